"""Markup never reaches the answer: every family's model, driven by logit_bias toward each of its
control tokens in turn (closing and inner markers of its calls, its turn markers, any special
token), writes them where they mean nothing, and `content` (and a completion's `text`) holds none
of them, streamed and whole. The probe saw `</tool_call>`, `<arg_key>`, `[ARGS]`,
`<|tool_call_end|>`, `<tool_call|>` and `<|system|>` reach message.content.

Through the real engine and routes of each family (tests/e2e/family_worker.py), and the SDK.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost.worker.engine.tokenizer import control_tokens
from tests.e2e.family_worker import family_worker
from tests.e2e.test_family_matrix import VARIANTS
from tests.unit.tool_format_helpers import TOOLS, openai_tools

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Say something."}]
FUNCTIONS = openai_tools(TOOLS)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def biased_toward(token_id: int) -> dict[str, int]:
    return {str(token_id): 100}


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["tiny", *VARIANTS])
async def test_no_control_token_reaches_the_answer(
    family_model: Callable[[str], Path], tiny_model: Path, name: str
) -> None:
    model = tiny_model if name == "tiny" else family_model(name)
    tokenizer = load_tokenizer(model)
    controls = control_tokens(tokenizer)
    eos = set(tokenizer.eos_token_ids)
    markers = {token_id: text for token_id, text in controls.items() if token_id not in eos}
    assert markers
    async with family_worker(model) as worker:

        async def streamed(bias: dict[str, int], tools: list[dict[str, Any]] | None) -> str:
            extra: dict[str, Any] = {"tools": tools} if tools else {}
            stream = await worker.openai.chat.completions.create(
                model="tiny", messages=ASK, max_tokens=8, logit_bias=bias, stream=True, **extra  # type: ignore[arg-type]
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        async def whole(bias: dict[str, int], tools: list[dict[str, Any]] | None) -> str:
            extra: dict[str, Any] = {"tools": tools} if tools else {}
            reply = await worker.openai.chat.completions.create(
                model="tiny", messages=ASK, max_tokens=8, logit_bias=bias, **extra  # type: ignore[arg-type]
            )
            return reply.choices[0].message.content or ""

        async def completed(bias: dict[str, int]) -> str:
            reply = await worker.openai.completions.create(model="tiny", prompt="Hello", max_tokens=8, logit_bias=bias)
            return reply.choices[0].text

        # Each marker alone, streamed, with calls read (tools offered) and not, side by side in the
        # batch; then all of them at once, whole, and in a completion's text.
        everything = {str(token_id): 100 for token_id in markers}
        texts = await asyncio.gather(
            *(streamed(biased_toward(t), tools) for t in markers for tools in (None, FUNCTIONS)),
            whole(everything, None), whole(everything, FUNCTIONS), completed(everything),
        )  # fmt: skip
    for text in texts:
        assert not any(m in text for m in controls.values()), (name, text)
        assert "\ue000" not in text and "\ue001" not in text  # the engine's own marking never leaks
