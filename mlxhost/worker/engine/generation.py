"""A generation session: one request's prompt, options, output channel and cancel flag.

The engine's generation thread produces `Delta`s; the event loop hands them to the session, and
the HTTP layer reads them with `async for`. The channel is a bounded anyio memory object stream.
The generation thread never waits for a reader: when a reader falls behind and the buffer is full,
new output is merged into one pending delta (a slow client receives fewer, larger frames), so a
slow reader slows only itself and the batch keeps stepping for everyone else.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mlxhost.wire.chunks import Delta

if TYPE_CHECKING:
    from mlxhost.worker.engine.grammar_mask import Grammar

__all__ = [
    "GenerationRequest",
    "GenerationSession",
    "SamplingParams",
]

CHANNEL_SIZE = 16

_ids = itertools.count(1)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


@dataclass(frozen=True)
class ThinkingBudget:
    """At most `tokens` of reasoning: past them, the think block's end is all the model may write.

    A marker is one token in most families (`<think>`), several in some (Gemma's `<|channel>thought`,
    Kimi's `<|open|>think<|sep|>`): each is its token ids."""

    tokens: int
    start: tuple[int, ...]  # the think block's markers, as token ids
    end: tuple[int, ...]
    open: bool  # the prompt leaves the model inside a think block


@dataclass(frozen=True)
class GenerationRequest:
    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams = SamplingParams()
    stop: tuple[str, ...] = ()
    # None: no logprobs; n >= 0: the chosen token's logprob plus the n most likely alternatives.
    logprobs: int | None = None
    # Whose prompt-cache entries this request may start from and adds to: (the caller's scope,
    # its cache_salt). A prefix cached under another namespace is never reused, nor counted.
    cache_namespace: tuple[str, str] = ("", "")
    # What the output must match (a JSON schema, a tool call); None: anything.
    grammar: Grammar | None = None
    # (token id, bias) pairs added to the logits at every step.
    logit_bias: tuple[tuple[int, float], ...] = ()
    # Whether its prompt and output go into the prompt cache when it ends.
    keep_cache: bool = True
    thinking_budget: ThinkingBudget | None = None


@dataclass(eq=False)  # identity: sessions live in sets
class GenerationSession:
    request: GenerationRequest
    wake_engine: Callable[[], None]
    id: int = field(default_factory=lambda: next(_ids))
    created: float = field(default_factory=time.monotonic)
    cancel_reason: str | None = None
    # The engine's step counter when cancel() was called, to measure how late the stop was.
    cancel_step: int | None = None
    finish: Delta | None = None
    tag: str | None = None  # the host's session id, for progress events
    tokens: int = 0  # generated so far

    def __post_init__(self) -> None:
        self._send: MemoryObjectSendStream[Delta]
        self._receive: MemoryObjectReceiveStream[Delta]
        self._send, self._receive = anyio.create_memory_object_stream[Delta](CHANNEL_SIZE)
        self._pending: Delta | None = None
        self._ended_waiter: asyncio.Future[None] | None = None

    @property
    def done(self) -> bool:
        return self.finish is not None

    def cancel(self, reason: str, step: int | None = None) -> None:
        """Ask the engine to stop this session; it leaves the batch before the next step."""
        if self.cancel_reason is None and not self.done:
            self.cancel_reason = reason
            self.cancel_step = step
            self.wake_engine()

    def deliver(self, delta: Delta) -> None:
        """Called on the event loop with the engine's output; never blocks."""
        self.tokens = delta.completion_tokens
        if delta.finish_reason is not None:
            self.finish = delta
            if self._ended_waiter is not None:
                _wake(self._ended_waiter)
        if self._pending is not None:
            self._pending = self._pending.merge(delta)
            return
        try:
            self._send.send_nowait(delta)
        except anyio.WouldBlock:
            self._pending = delta
            return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the reader is gone; the engine is already told through cancel()
        if delta.finish_reason is not None:
            self._send.close()

    def __aiter__(self) -> GenerationSession:
        return self

    async def __anext__(self) -> Delta:
        try:
            delta = await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        return self.merge_ready(delta)

    def ready(self) -> Delta | None:
        """Everything produced and not yet read, as one delta, or None: never waits."""
        try:
            delta = self._receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):
            return None
        return self.merge_ready(delta)

    def merge_ready(self, delta: Delta) -> Delta:
        """`delta` with everything already produced after it: one larger frame, not many."""
        while True:
            try:
                delta = delta.merge(self._receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
        if self._pending is not None:
            delta, self._pending = delta.merge(self._pending), None
        if delta.finish_reason is not None:
            self._send.close()
        return delta

    async def wait_ended(self, seconds: float) -> None:
        """Sleep up to `seconds`, woken early only by the session's end, not by each new delta.

        A reader that holds output back to send it in fewer frames waits here rather than in
        `async for`, so the event loop does not wake its task once per decode step. This is
        the hot path of every stream, so it waits on a bare asyncio future and timer rather
        than an anyio cancel scope, which costs several times more per call; the worker runs
        on asyncio in any case (Hypercorn serves on asyncio). Cancelling the task still
        cancels the wait.
        """
        if self.finish is not None:
            return
        loop = asyncio.get_running_loop()
        waiter = self._ended_waiter = loop.create_future()
        timer = loop.call_later(seconds, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._ended_waiter = None

    def close(self) -> None:
        self._receive.close()
        self._send.close()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
