"""Cancellation: how soon a client that leaves mid-stream frees the worker's engine.

Isolated server, --repeats times, after the memory readings and before any kill: a greedy stream
of max_tokens 3000 (tiny; 1000 for bench) read until 20 content frames came, then its connection
closed (t0); the worker's /health (over its Unix socket) is polled every 2 ms until
engine.cancelled went up and engine.active is 0 (t1). cancel_ms = t1 - t0, an upper bound (it
includes the polling); cancel_steps = the engine's last_cancel_lag_steps (decode steps from the
cancel reaching the engine to the sequence leaving the batch). Also shown: the per-step time at c1
(1000 / the isolated single-stream decode tok/s), cancel_ms in steps, the engine steps from just
before the close to t1, and the parent's outcome for the session (x-mlxhost-session, looked up in
/admin/sessions). Target: cancel_steps <= 1.
"""

from __future__ import annotations

import collections
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from bench.figures import median, number, progress, ratio, verdict
from bench.health import worker_client
from bench.hosts import ADMIN_HEADERS
from bench.results.measurements import CancelSettings, CancelSummary, Spread
from bench.streams import CHAT_PATH, chat_body, has_content, sse_chunks
from mlxhost.wire.headers import SESSION_HEADER

CANCEL_MAX_TOKENS = {"tiny": 3000, "bench": 1000}  # "custom" (--model): the tiny figure
CANCEL_AFTER_FRAMES = 20
CANCEL_POLL_S = 0.002  # the worker's /health, from the close until the engine is idle
CANCEL_DEADLINE_S = 10.0
CANCEL_STEPS_TARGET = 1  # the sequence leaves the batch within one decode step of the cancel
OUTCOME_WAIT_S = 2.0  # for the parent's record of the session, once the relay unwound


@dataclass(frozen=True)
class CancelRun:
    """One streaming request closed mid-stream, timed from the close."""

    session: str | None  # the x-mlxhost-session header
    frames: int  # content frames read before the close
    cancel_ms: float  # close to the first worker /health showing the engine cancelled and idle
    polls: int  # worker /health reads in cancel_ms
    lag_steps: int | None  # the engine's last_cancel_lag_steps: cancel reaching it to removal
    steps_after_close: int | None  # engine steps from just before the close to that reading
    generated_tokens: int  # by the engine for this request, to the removal
    outcome: dict[str, Any] | None  # the parent's record of the session, as the host wrote it


def cancel_max_tokens(size: str) -> int:
    return CANCEL_MAX_TOKENS.get(size, CANCEL_MAX_TOKENS["tiny"])


async def cancel_once(
    client: httpx.AsyncClient, worker_socket: str, prompt: str, max_tokens: int
) -> CancelRun:
    """Read a long greedy stream until CANCEL_AFTER_FRAMES content frames came, close the
    connection (t0), and poll the worker's /health until the engine counted the cancel and holds
    no sequence (t1)."""
    async with worker_client(worker_socket) as worker:

        async def engine() -> dict[str, Any]:
            return dict((await worker.get("/health")).json()["engine"])

        before = await engine()
        if before["active"] or before["waiting"]:
            raise RuntimeError(f"the worker is not idle before the cancel run: {before}")
        body = chat_body(prompt, max_tokens, stream=True)
        frames = 0
        # A client of its own: leaving the response unread closes its connection, not a pooled
        # one that another request would reuse.
        async with (
            httpx.AsyncClient(base_url=client.base_url, timeout=30.0) as own,
            own.stream("POST", CHAT_PATH, json=body) as response,
        ):
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
            session = response.headers.get(SESSION_HEADER)
            async with contextlib.aclosing(sse_chunks(response)) as chunks:
                async for _, chunk in chunks:
                    if chunk is None:
                        break
                    if has_content(chunk):
                        frames += 1
                        if frames >= CANCEL_AFTER_FRAMES:
                            break
            if frames < CANCEL_AFTER_FRAMES:
                raise RuntimeError(
                    f"the stream ended after {frames} content frames, before the close"
                )
            steps_before = (await engine())["steps"]
            closed = time.perf_counter()
        # Leaving the block closed the response, and with it the connection, mid-stream.
        polls = 0
        while True:
            stats = await engine()
            polls += 1
            now = time.perf_counter()
            if stats["cancelled"] > before["cancelled"] and stats["active"] == 0:
                break
            if stats["completed"] > before["completed"]:
                raise RuntimeError(f"the request completed instead of being cancelled: {stats}")
            if now - closed > CANCEL_DEADLINE_S:
                raise RuntimeError(f"no cancel within {CANCEL_DEADLINE_S:g}s of the close: {stats}")
            await anyio.sleep(CANCEL_POLL_S)

    return CancelRun(
        session=session,
        frames=frames,
        cancel_ms=(now - closed) * 1e3,
        polls=polls,
        lag_steps=stats.get("last_cancel_lag_steps"),
        steps_after_close=stats["steps"] - steps_before,
        generated_tokens=stats["generated_tokens"] - before["generated_tokens"],
        outcome=await session_outcome(client, session),
    )


async def session_outcome(client: httpx.AsyncClient, session: str | None) -> dict[str, Any] | None:
    """The parent's record of how the session ended: it closes once the relay has unwound."""
    outcome = None
    deadline = time.perf_counter() + OUTCOME_WAIT_S
    while session is not None and outcome is None and time.perf_counter() < deadline:
        answer = await client.get("/admin/sessions", headers=ADMIN_HEADERS)
        if answer.status_code != 200:
            progress(f"warning: GET /admin/sessions answered {answer.status_code}: {answer.text}")
            break
        recent = answer.json()["recent"]
        outcome = next((s["outcome"] for s in recent if s["id"] == session), None)
        if outcome is None:
            await anyio.sleep(0.02)
    return outcome


def describe_cancel(run: CancelRun) -> str:
    outcome = run.outcome or {}
    return (
        f"cancel {run.cancel_ms:.1f} ms ({run.polls} polls), engine lag {run.lag_steps} step(s), "
        f"{run.steps_after_close} engine steps after the close, {run.generated_tokens} tokens "
        f"generated; parent outcome {outcome.get('kind')} ({outcome.get('reason')})"
    )


def cancel_summary(runs: list[CancelRun], ms_per_step: float, max_tokens: int) -> CancelSummary:
    cancel_ms = [r.cancel_ms for r in runs]
    lags = [r.lag_steps for r in runs if r.lag_steps is not None]
    after = [r.steps_after_close for r in runs if r.steps_after_close is not None]
    p50 = median(cancel_ms)
    return CancelSummary(
        cancel_ms=Spread(p50, max(cancel_ms, default=float("nan"))),
        cancel_steps=Spread(median(lags), max(lags, default=None)),
        steps_after_close=Spread(median(after), max(after, default=None)),
        ms_per_step_c1=ms_per_step,
        cancel_ms_p50_in_steps=ratio(p50, ms_per_step),
        cancel_ms_max_in_steps=ratio(max(cancel_ms, default=float("nan")), ms_per_step),
        meets_target=bool(runs) and len(lags) == len(runs) and max(lags) <= CANCEL_STEPS_TARGET,
        outcomes=[r.outcome for r in runs],
        settings=CancelSettings(
            max_tokens=max_tokens, closed_after_frames=CANCEL_AFTER_FRAMES, poll_ms=CANCEL_POLL_S * 1e3
        ),
        runs=runs,
    )


def print_cancel(cancel: CancelSummary) -> None:
    settings = cancel.settings
    print()
    print(
        f"cancellation (isolated: a greedy stream of max_tokens {settings.max_tokens} closed "
        f"after {settings.closed_after_frames} content frames; {len(cancel.runs)} run(s), "
        "medians and max):"
    )
    ms, steps, after = cancel.cancel_ms, cancel.cancel_steps, cancel.steps_after_close
    per_step = cancel.ms_per_step_c1
    print(
        f"  cancel_ms p50 {number(ms.p50)} ms, max {number(ms.max)} ms: from the close to "
        f"the worker's /health showing the cancel and no active sequence (polled every "
        f"{settings.poll_ms:g} ms: an upper bound)"
    )
    print(
        f"  per decode step at c1 {number(per_step, 2)} ms (the isolated single-stream decode): "
        f"cancel_ms p50 = {number(cancel.cancel_ms_p50_in_steps)} steps, max = "
        f"{number(cancel.cancel_ms_max_in_steps)} steps; engine steps from just before the "
        f"close to then: p50 {number(after.p50, 0)}, max {after.max}"
    )
    print(
        f"  cancel_steps (engine: the cancel reaching it to the sequence leaving the batch) p50 "
        f"{number(steps.p50, 0)}, max {steps.max}: target <= {CANCEL_STEPS_TARGET} step: "
        f"{verdict(cancel.meets_target)}"
    )
    outcomes = collections.Counter(
        f"{o.get('kind')} ({o.get('reason') or o.get('code') or o.get('finish_reason')})"
        if o
        else "? (not found)"
        for o in cancel.outcomes
    )
    listed = ", ".join(f"{k} x{v}" for k, v in outcomes.items())
    print(f"  the parent's session outcomes: {listed}")
