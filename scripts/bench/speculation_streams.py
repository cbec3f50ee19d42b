"""The speculation bench's host arms: an isolated mlxhost server per arm, speculating (`lookup`, the
host's default) or not (`off`), and the streams it is measured by.

A stream is a streamed chat completion of the request's own messages, greedy, asking for the usage
chunk, read as a client reads it: its text is the content deltas joined, its token count and its
drafts (`usage.completion_tokens_details`: accepted and rejected prediction tokens) the usage's.
Its times are its first and last frames with content. The bench compares answers by their text.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import httpx

from bench import hosts
from bench.settings import REPO_ROOT
from bench.speculation_raw import Answer
from bench.streams import chat_stream, gather, has_content

HOST_ARMS = ("lookup", "off")


def host_flags() -> set[str]:
    """The `--speculate` and `--draft-tokens` flags `mlxhost serve` takes, of those two (a checkout
    from before speculation takes neither: both arms are then the same host)."""
    helped = subprocess.run(
        [sys.executable, "-m", "mlxhost", "serve", "--help"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    ).stdout  # fmt: skip
    return {flag for flag in ("--speculate", "--draft-tokens") if flag in helped}


def arm_options(arm: str, draft_tokens: int, flags: set[str], concurrency: int) -> list[str]:
    """An arm's server options, as the report shows them."""
    options = [f"--max-active={max(hosts.MIN_MAX_ACTIVE, concurrency)}"]
    if "--speculate" in flags:
        options.append(f"--speculate={arm}")
    if "--draft-tokens" in flags and arm != "off":
        options.append(f"--draft-tokens={draft_tokens}")
    return options


async def stream(client: httpx.AsyncClient, messages: Sequence[dict[str, str]], max_tokens: int) -> Answer:
    """One streamed, greedy chat completion (its token ids are not known: see the module's doc)."""
    body: dict[str, Any] = {
        "messages": list(messages),
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    pieces: list[str] = []
    usage: dict[str, Any] | None = None
    first: float | None = None
    last: float | None = None
    start = time.perf_counter()
    async with chat_stream(client, body) as chunks:
        async for now, chunk in chunks:
            if chunk is None:
                continue
            usage = chunk.get("usage") or usage
            if has_content(chunk):
                first = now if first is None else first
                last = now
                pieces.extend(choice["delta"].get("content") or "" for choice in chunk["choices"])
    end = time.perf_counter()
    if usage is None:
        raise RuntimeError("the stream ended without a usage chunk")
    details = usage.get("completion_tokens_details") or {}
    return Answer(
        count=int(usage["completion_tokens"]),
        text="".join(pieces),
        ttft_s=(end if first is None else first) - start,
        end_s=(end if last is None else last) - start,
        drafted=int(details.get("accepted_prediction_tokens") or 0),
        refused=int(details.get("rejected_prediction_tokens") or 0),
    )


async def batch(
    client: httpx.AsyncClient, requests: Sequence[tuple[Sequence[dict[str, str]], int]]
) -> tuple[list[Answer], float]:
    """Every request (messages, max_tokens) streamed at once; the answers and the wall time to the
    last one's end."""
    began = time.perf_counter()
    calls = [functools.partial(stream, client, messages, max_tokens) for messages, max_tokens in requests]
    answers = await gather(calls)
    return answers, time.perf_counter() - began
