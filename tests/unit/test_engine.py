"""The engine on its own: how decoded text reaches the event loop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from mlxhost.wire.chunks import Delta
from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams, ThinkingBudget
from mlxhost.worker.engine.options import EngineOptions


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


class Recording:
    """A stand-in for the engine's tokenizer that notes which thread uses it."""

    def __init__(self, tokenizer: object, threads: list[str]) -> None:
        self._tokenizer = tokenizer
        self._threads = threads

    def __getattr__(self, name: str) -> object:
        self._threads.append(threading.current_thread().name)
        return getattr(self._tokenizer, name)


@pytest.mark.anyio
async def test_the_event_loop_never_touches_the_tokenizer(tiny_model: Path) -> None:
    threads: list[str] = []
    async with Engine.open(tiny_model, EngineOptions(prompt_cache_entries=0)) as engine:
        engine.tokenizer._encoder = Recording(engine.tokenizer._encoder, threads)
        # Short prompts too: how long a template takes is not told by its characters.
        prompt = await engine.encode_chat([{"role": "user", "content": "hi"}])
        assert await engine.encode("hi")
        request = GenerationRequest(prompt, 16, SamplingParams(temperature=0.0), logprobs=3)
        async with engine.generate(request) as session:
            deltas = [delta async for delta in session]
    assert sum(len(d.logprobs or []) for d in deltas) == deltas[-1].completion_tokens > 0
    assert threads  # the prompts were encoded by the recorded tokenizer...
    # ...in the tokenizer thread only: not on the event loop, and not by the generation thread,
    # which decodes (text and logprobs) with its own copy, so the two never share one.
    assert threading.main_thread().name not in threads
    assert "mlxhost-generation" not in threads


@pytest.mark.anyio
async def test_a_thinking_budget_ends_the_think_block_after_that_many_tokens(tiny_model: Path) -> None:
    async def tokens(budget: int | None) -> list[str]:
        async with Engine.open(tiny_model, EngineOptions(prompt_cache_entries=0)) as engine:
            assert engine.tokenizer.think_ids is not None
            start, end = engine.tokenizer.think_ids
            prompt = [*await engine.encode("Think first."), *start]  # the prompt opens the block
            limit = None if budget is None else ThinkingBudget(budget, start, end, open=True)
            request = GenerationRequest(
                prompt, 12, SamplingParams(temperature=0.0), logprobs=0, thinking_budget=limit
            )
            async with engine.generate(request) as session:
                return [lp.token for delta in [d async for d in session] for lp in delta.logprobs or ()]

    free, bounded = await tokens(None), await tokens(4)
    assert "</think>" not in free[:6]  # left alone, this (greedy, seeded) model keeps thinking
    assert bounded[:4] == free[:4]
    assert bounded[4] == "</think>"
    assert bounded.count("</think>") == 1  # closed once; what follows is the answer
