"""The engine on its own: how decoded text reaches the event loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxhost.worker.engine import Engine, EngineOptions
from mlxhost.worker.sessions import Delta, GenerationRequest, SamplingParams


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the engine hands results over with loop.call_soon_threadsafe


async def generate(model: Path, publish_interval: float) -> list[Delta]:
    options = EngineOptions(publish_interval=publish_interval, prompt_cache_entries=0)
    async with Engine.open(model, options) as engine:
        prompt = await engine.encode("Once upon a time")
        request = GenerationRequest(prompt, 200, SamplingParams(temperature=0.0))
        async with engine.generate(request) as session:
            return [delta async for delta in session]


@pytest.mark.anyio
async def test_text_held_back_between_hand_overs_arrives_whole_and_in_order(tiny_model: Path) -> None:
    every_step = await generate(tiny_model, publish_interval=0.0)
    held = await generate(tiny_model, publish_interval=60.0)
    assert "".join(d.text for d in held) == "".join(d.text for d in every_step)
    assert held[-1].completion_tokens == every_step[-1].completion_tokens
    assert held[-1].finish_reason == every_step[-1].finish_reason
    # The first token is handed over at once (it is the time to first token), the rest with the
    # ending: a reader is woken twice, not once per step.
    assert held[0].completion_tokens == 1 and held[0].finish_reason is None
    assert len(held) == 2
    assert len(every_step) > 10
