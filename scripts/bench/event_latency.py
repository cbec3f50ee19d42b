"""Event latency: how soon what happens in the isolated parent reaches a subscriber of its admin
event stream (GET /admin/events, SSE), after the cancel runs and before the kills.

A subscriber through `mlxhost.client.admin.AdminClient` (what `mlxhost tui` reads, see
`bench.watcher`), live before the first request; then 20 non-streaming requests of max_tokens 8,
one after the other (one more first, not counted). For each session (x-mlxhost-session):
session.opened from the request's start, session.closed from the response read, to the event's
arrival at the subscriber, all on this process's perf_counter. Also shown: the event's `at` (the
parent's wall clock, ms) to the arrival; and, during the recovery runs, each kill -9 to its
worker.exited event's arrival. Target: p95 <= 250 ms (over the session events; worker.exited
checked alike, by its max).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

import httpx

from bench.figures import percentile, progress, verdict
from bench.results.measurements import EventLatency, EventSettings, LatencyStats, WorkerExited
from bench.streams import CHAT_PATH, chat_body
from bench.watcher import EVENT_WAIT_S, EventSample, EventWatcher, event_sample, watching
from mlxhost.wire.headers import SESSION_HEADER

EVENT_REQUESTS = 20
EVENT_MAX_TOKENS = 8
EVENT_LATENCY_P95_TARGET_MS = 250.0
SESSION_EVENTS = ("session.opened", "session.closed")


def of_session(kind: str, session: str) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == kind and event.get("session") == session


def of_worker(kind: str, pid: int) -> Callable[[dict[str, Any]], bool]:
    return lambda event: event["type"] == kind and event.get("pid") == pid


async def measure_event_latency(
    client: httpx.AsyncClient, url: str, prompt: str
) -> tuple[list[EventSample], dict[str, int], str | None]:
    """EVENT_REQUESTS short chat requests one after the other, with an AdminClient subscribed:
    each session's session.opened, from the request's start, and session.closed, from the
    response's arrival, to the event's arrival at the subscriber. One request first, unmeasured."""
    samples: list[EventSample] = []
    missing: collections.Counter[str] = collections.Counter()
    body = chat_body(prompt, EVENT_MAX_TOKENS, stream=False)
    async with watching(url) as watcher:
        for number in range(EVENT_REQUESTS + 1):
            since = len(watcher.arrivals)
            began = time.perf_counter()
            response = await client.post(CHAT_PATH, json=body)
            answered = time.perf_counter()
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
            session = response.headers.get(SESSION_HEADER)
            if session is None:
                raise RuntimeError(f"no {SESSION_HEADER} header on a chat completion")
            found = {}
            for kind in SESSION_EVENTS:
                arrival = await watcher.wait_for(of_session(kind, session), EVENT_WAIT_S, since)
                if arrival is None:
                    missing[kind] += 1
                else:
                    found[kind] = arrival
            if number == 0:
                continue  # the warm-up
            for kind, arrival in found.items():
                samples.append(event_sample(arrival, began if kind == "session.opened" else answered))
        types = collections.Counter(e["type"] for _, _, e in watcher.live())
    error = None if watcher.error is None else f"{type(watcher.error).__name__}: {watcher.error}"
    if missing:
        progress(f"warning: events that never arrived: {dict(missing)}")
    return samples, dict(types), error


async def worker_exits(
    watcher: EventWatcher, kills: list[tuple[int, float]]
) -> tuple[list[EventSample], int]:
    """Each kill -9 (pid, when) to its worker.exited event's arrival; and how many never came."""
    samples: list[EventSample] = []
    missing = 0
    for pid, killed in kills:
        arrival = await watcher.wait_for(of_worker("worker.exited", pid), EVENT_WAIT_S)
        if arrival is None:
            missing += 1
        else:
            samples.append(event_sample(arrival, killed))
    return samples, missing


def latency_stats(values: list[float]) -> LatencyStats:
    return LatencyStats(
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        max=max(values, default=float("nan")),
        count=len(values),
    )


def event_latency_summary(
    samples: list[EventSample],
    exits: list[EventSample],
    types: dict[str, int],
    error: str | None,
    exits_missing: int,
) -> EventLatency:
    latency = [s.latency_ms for s in samples]
    p95 = percentile(latency, 95)
    exit_ms = [s.latency_ms for s in exits]
    return EventLatency(
        **vars(latency_stats(latency)),
        by_type={
            kind: latency_stats([s.latency_ms for s in samples if s.type == kind]) for kind in SESSION_EVENTS
        },
        publish_to_arrival_ms=latency_stats([s.publish_to_arrival_ms for s in samples]),
        worker_exited=WorkerExited(
            **vars(latency_stats(exit_ms)),
            missing=exits_missing,
            publish_to_arrival_ms=latency_stats([s.publish_to_arrival_ms for s in exits]),
            ok=None if not exit_ms else max(exit_ms) <= EVENT_LATENCY_P95_TARGET_MS,
        ),
        meets_target=bool(latency) and p95 <= EVENT_LATENCY_P95_TARGET_MS,
        types_seen=types,
        subscriber_error=error,
        settings=EventSettings(requests=EVENT_REQUESTS, max_tokens=EVENT_MAX_TOKENS),
        samples=samples,
        worker_exited_samples=exits,
    )


def print_event_latency(latency: EventLatency) -> None:
    def ms(stats: LatencyStats) -> str:
        if not stats.count:
            return "none"
        return (
            f"p50 {stats.p50:.1f} ms, p95 {stats.p95:.1f} ms, max {stats.max:.1f} ms "
            f"over {stats.count}"
        )

    settings = latency.settings
    print()
    print(
        f"admin event stream (isolated: GET /admin/events through AdminClient, what mlxhost tui "
        f"reads; {settings.requests} sequential non-streaming requests of max_tokens "
        f"{settings.max_tokens}):"
    )
    print(
        f"  event latency {ms(latency)}: target p95 <= {EVENT_LATENCY_P95_TARGET_MS:g} ms: "
        f"{verdict(latency.meets_target)}"
    )
    by_type = latency.by_type
    print(f"    session.opened (from the request's start): {ms(by_type['session.opened'])}")
    print(f"    session.closed (from the response read):   {ms(by_type['session.closed'])}")
    print(
        f"    the parent's publish ('at', ms wall clock) to the arrival: "
        f"{ms(latency.publish_to_arrival_ms)}"
    )
    exited = latency.worker_exited
    missing = f", {exited.missing} never arrived" if exited.missing else ""
    print(
        f"  worker.exited, from the kill -9 (recovery runs): {ms(exited)}{missing}; publish to "
        f"arrival {ms(exited.publish_to_arrival_ms)}: max <= "
        f"{EVENT_LATENCY_P95_TARGET_MS:g} ms: {verdict(exited.ok)}"
    )
    types = ", ".join(f"{k} {v}" for k, v in sorted(latency.types_seen.items()))
    print(f"  events seen meanwhile: {types}")
    if latency.subscriber_error:
        print(f"  problem: the subscriber failed: {latency.subscriber_error}")
