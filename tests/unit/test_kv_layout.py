"""The engine's KV layout, as a worker's /health tells it: per row by default, padded when asked
for or when the model cannot be served per row, and kv_bits applied only where it can be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.config import Settings
from mlxhost.demo import make_model
from mlxhost.worker.app import create_app
from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams
from mlxhost.worker.engine.options import EngineOptions

pytestmark = pytest.mark.unit


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the engine hands results over with loop.call_soon_threadsafe


async def _serve(model: Path, **options: Any) -> tuple[dict[str, Any], list[str]]:
    """The worker's /health "batch" and its greedy answers to two prompts side by side."""
    async with Engine.open(model, EngineOptions(prompt_cache_entries=0, **options)) as engine:
        app = create_app(engine, Settings(), "tiny")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://w") as http:
            batch = (await http.get("/health")).json()["batch"]
        sessions = []
        for text in ("Once upon a time", "The quick brown fox jumps over the lazy dog " * 20):
            request = GenerationRequest(await engine.encode(text), 24, SamplingParams(temperature=0.0))
            sessions.append(engine.submit(request))
        answers = []
        for session in sessions:
            answers.append("".join([delta.text async for delta in session]))
        return batch, answers


@pytest.mark.anyio
async def test_per_row_by_default_and_padded_when_asked_with_the_same_answers(tiny_model: Path) -> None:
    per_row, answers = await _serve(tiny_model)
    assert per_row == {
        "kv_layout": "per_row",
        "kv_layout_reason": None,
        "kv_bits": None,
        "kv_bits_reason": None,
    }
    padded, same = await _serve(tiny_model, kv_layout="padded")
    assert (
        padded["kv_layout"] == "padded" and padded["kv_layout_reason"] == "kv_layout = 'padded' was asked for"
    )
    assert same == answers and all(answers)


@pytest.mark.anyio
async def test_kv_bits_is_applied_where_mlx_can_quantize_and_said_why_not_elsewhere(
    tiny_model: Path, tmp_path: Path
) -> None:
    refused, _ = await _serve(tiny_model, kv_bits=4)
    assert refused["kv_layout"] == "per_row" and refused["kv_bits"] is None
    assert refused["kv_bits_reason"].startswith("quantized KV failed")
    quantizable = make_model(tmp_path / "q", size="quantizable")
    applied, answers = await _serve(quantizable, kv_bits=4)
    assert applied["kv_bits"] == 4 and applied["kv_bits_reason"] is None
    assert all(answers)
