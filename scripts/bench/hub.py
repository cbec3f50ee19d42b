"""The event hub alone, after the servers stopped: `mlxhost.host.events.EventHub` in this
process, under anyio. 100,000 events published, each a `SessionProgressed` record built as the
host's publishers build theirs, a checkpoint after each (as they, each in a task step of its own,
do); one subscriber that never reads and one reading in a task. Target: >= 1,000 events/s, the
reader gets every event and the other is dropped with stream.lagged.
"""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel

from bench.figures import verdict
from bench.results.measurements import HubFigures
from mlxhost.host.events import EventHub
from mlxhost.wire.admin import SessionProgressed

HUB_EVENTS = 100_000
HUB_EVENTS_PER_S_TARGET = 1000.0
DRAIN_WAIT_S = 10.0  # for the reader to get the last event
LAGGING_READ_WAIT_S = 1.0  # its sender is closed once it was dropped


async def hub_throughput(events: int = HUB_EVENTS) -> HubFigures:
    """The EventHub alone, in this process: publish `events` events, yielding to the scheduler
    after each (as the host's publishers, each in its own task step, do), with one subscriber
    that never reads and one that reads everything in a task."""
    hub = EventHub()
    lagging = hub.subscribe()
    draining = hub.subscribe()
    received = 0
    done = anyio.Event()

    async def drain() -> None:
        nonlocal received
        async for _ in draining:
            received += 1
            if received >= events:
                break
        done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(drain)
        await anyio.lowlevel.checkpoint()
        began = time.perf_counter()
        for number in range(events):
            hub.publish(
                SessionProgressed(session="s-bench", model="bench", tokens=number, tokens_per_s=123.4)
            )
            await anyio.lowlevel.checkpoint()
        published = time.perf_counter()
        with anyio.move_on_after(DRAIN_WAIT_S):
            await done.wait()
        drained = time.perf_counter()
        tasks.cancel_scope.cancel()
    queued = []
    with anyio.move_on_after(LAGGING_READ_WAIT_S):
        queued = [event async for event in lagging]
    await lagging.aclose()  # type: ignore[attr-defined]  # a _Subscription
    await draining.aclose()  # type: ignore[attr-defined]
    wall = drained - began
    return HubFigures(
        events=events,
        events_per_s=events / wall,
        wall_s=wall,
        publish_s=published - began,
        received_by_reader=received,
        reader_kept=received == events,
        dropped_subscribers=hub.dropped_subscribers,
        lagging_got=len(queued),
        lagging_last_type=queued[-1]["type"] if queued else None,
        lagging_dropped=bool(queued) and queued[-1]["type"] == "stream.lagged",
    )


def hub_ok(hub: HubFigures) -> bool:
    return bool(
        hub.events_per_s >= HUB_EVENTS_PER_S_TARGET and hub.reader_kept and hub.lagging_dropped
    )


def print_hub(hub: HubFigures, subscriber_buffer: int) -> None:
    print(
        f"  the hub alone (EventHub in this process, anyio): {hub.events:,} events published, "
        f"one subscriber never reading, one reading in a task: {hub.events_per_s:,.0f} "
        f"events/s (publishing {hub.publish_s:.2f} s, all read {hub.wall_s:.2f} s); the "
        f"reader got {hub.received_by_reader:,}; the lagging one was "
        f"{'dropped' if hub.lagging_dropped else 'NOT dropped'} after {hub.lagging_got} "
        f"(buffer {subscriber_buffer}): target >= {HUB_EVENTS_PER_S_TARGET:,.0f} "
        f"events/s, the reader kept, the lagging one dropped: {verdict(hub_ok(hub))}"
    )
