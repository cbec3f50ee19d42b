"""Load generation over HTTP, the same for every server: streamed chat completions, greedy, read
frame by frame, one at a time or N at once.

Every request is the chat body `chat_body` builds. A stream asks for a usage chunk
(stream_options include_usage), which mlxhost and mlx_lm.server both send, so every server is read
alike; the SSE `data:` lines are parsed by hand, each stamped with when it arrived. The token
times of a stream are those of its first and last frames with content (mlxhost coalesces tokens
that come within --stream-interval, 50 ms by default, into one frame; mlx_lm.server sends a frame
per token), and its token count is the usage chunk's.

A stream may carry extra body fields (a `response_format`, say), and a batch one set per stream, so
that one batch can mix free and constrained streams (see `bench.constrained`).

A stream whose connection fails before the response head (mlx_lm.server's listen backlog
overflowing) is tried again, up to STREAM_ATTEMPTS tries, its time counting from the first.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import httpx

from bench.runs import BatchRun, StreamRun

STREAM_ATTEMPTS = 3
CHAT_PATH = "/v1/chat/completions"

T = TypeVar("T")


def chat_body(prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": stream,
    }
    return body


async def sse_chunks(response: httpx.Response) -> AsyncGenerator[tuple[float, dict[str, Any] | None]]:
    """Each `data:` frame of a chat stream with when it arrived (perf_counter), parsed; None for
    `[DONE]`. A frame that carries an error raises RuntimeError."""
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue  # blank separators and keep-alive comments
        now = time.perf_counter()
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            yield now, None
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"the stream failed: {chunk['error']}")
        yield now, chunk


@contextlib.asynccontextmanager
async def chat_stream(
    client: httpx.AsyncClient, body: Mapping[str, Any]
) -> AsyncIterator[AsyncGenerator[tuple[float, dict[str, Any] | None]]]:
    """A streamed chat completion's frames (`sse_chunks`); RuntimeError for an answer not 200."""
    async with client.stream("POST", CHAT_PATH, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
        async with contextlib.aclosing(sse_chunks(response)) as chunks:
            yield chunks


def has_content(chunk: dict[str, Any]) -> bool:
    # A forced call's first token is its call's first delta (the constrained part's streams).
    return any(
        choice["delta"].get("content") or choice["delta"].get("tool_calls")
        for choice in chunk.get("choices", [])
    )


async def gather(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run the calls side by side in a task group; their results in order. The first to fail
    cancels the others."""
    results: list[Any] = [None] * len(calls)

    async def run(index: int, call: Callable[[], Awaitable[T]]) -> None:
        results[index] = await call()

    async with anyio.create_task_group() as tasks:
        for index, call in enumerate(calls):
            tasks.start_soon(run, index, call)
    return results


class HTTPBench:
    """Streams of one prompt to one server, through one pooled client; what the server reported
    about the prompt (its token count, how much of it came from its prompt cache) is kept."""

    def __init__(self, client: httpx.AsyncClient, prompt: str, max_tokens: int) -> None:
        self.client = client
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.prompt_tokens: int | None = None  # as the server counted them
        # usage.prompt_tokens_details.cached_tokens (mlx_lm.server's prompt cache) to how often
        self.cached_tokens: collections.Counter[int] = collections.Counter()
        # Streams tried again after their connection failed before the response head, by error.
        self.retries: collections.Counter[str] = collections.Counter()

    async def stream(
        self, max_tokens: int | None = None, extra: Mapping[str, Any] | None = None
    ) -> StreamRun:
        """One streamed chat completion, read to the end of the response; `extra` fields are
        added to the body."""
        body = {
            **chat_body(self.prompt, max_tokens or self.max_tokens, stream=True),
            "stream_options": {"include_usage": True},  # the token count, read alike everywhere
            **(extra or {}),
        }
        tokens: int | None = None
        first: float | None = None
        last: float | None = None
        frames = 0
        done = False
        start = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            for attempt in range(1, STREAM_ATTEMPTS + 1):
                try:
                    response = await stack.enter_async_context(
                        self.client.stream("POST", CHAT_PATH, json=body)
                    )
                    break
                except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as exc:
                    if attempt == STREAM_ATTEMPTS:
                        raise
                    self.retries[type(exc).__name__] += 1
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
            async with contextlib.aclosing(sse_chunks(response)) as chunks:
                async for now, chunk in chunks:
                    if chunk is None:
                        done = True
                        continue
                    if usage := chunk.get("usage"):
                        tokens = usage["completion_tokens"]
                        self._count_prompt(usage)
                    if has_content(chunk):
                        first = now if first is None else first
                        last = now
                        frames += 1
        end = time.perf_counter()
        if not done or tokens is None:
            raise RuntimeError("the stream ended without a usage chunk and [DONE]")
        if first is None or last is None:
            first = last = end  # no visible text at all: no decode rate to speak of
        return StreamRun(tokens, first - start, last - first, end - start, frames)

    def _count_prompt(self, usage: dict[str, Any]) -> None:
        self.prompt_tokens = usage["prompt_tokens"]
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            self.cached_tokens[int(details["cached_tokens"])] += 1

    async def batch(
        self,
        concurrency: int,
        max_tokens: int | None = None,
        extras: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> BatchRun:
        """`concurrency` streams started together, timed from the start to the last one's end.
        `extras`, one per stream (None: nothing), are added to the streams' bodies."""
        if extras is None:
            extras = [None] * concurrency
        if len(extras) != concurrency:
            raise ValueError(f"{len(extras)} sets of extra fields for {concurrency} streams")
        start = time.perf_counter()
        runs = await gather([functools.partial(self.stream, max_tokens, extra) for extra in extras])
        wall = time.perf_counter() - start
        return BatchRun([run.tokens for run in runs], wall, [run.ttft_s for run in runs])
