"""A subscriber of the isolated parent's admin event stream (GET /admin/events) through
`mlxhost.client.admin.AdminClient`, what `mlxhost tui` reads: every event with when it arrived
here, on this process's perf_counter (and its wall clock, to compare with the event's `at`).

`watching(url)` subscribes, and returns once the subscription is live: it resumes just before the
last published event (Last-Event-ID), which the host's ring sends back at once. The reader runs in
a task group that ends with the block.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from bench.hosts import ADMIN_TOKEN
from mlxhost.client.admin import AdminClient, Target

EVENT_WAIT_S = 5.0  # for an event to arrive before it counts as missing
NO_RESUME_WAIT_S = 0.2  # a host that published nothing yet (it publishes host.started)

Arrival = tuple[float, float, dict[str, Any]]  # (perf_counter, unix seconds, event)


class EventWatcher:
    """The events that arrived, in order; see `watching`."""

    def __init__(self, client: AdminClient) -> None:
        self.client = client
        self.arrivals: list[Arrival] = []
        self.live_from = 0  # arrivals from this index on came live, not from the ring
        self.seq_at_start = 0  # the host's last seq when the subscription began
        self.error: BaseException | None = None
        self.reading = False
        self._arrived = anyio.Event()  # set, and replaced, on every arrival

    async def read(self, after: int | None) -> None:
        try:
            async for event in self.client.events(after):
                self.arrivals.append((time.perf_counter(), time.time(), event))
                self._notify()
        except Exception as exc:  # noqa: BLE001 - reported by wait_for and the summary
            self.error = exc
        finally:
            self.reading = False
            self._notify()

    def _notify(self) -> None:
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait_for(
        self, match: Callable[[dict[str, Any]], bool], timeout: float, since: int = 0
    ) -> Arrival | None:
        """The first arrival from index `since` whose event `match`es; None after `timeout`."""
        deadline = time.perf_counter() + timeout
        checked = since
        while True:
            arrived = self._arrived  # taken before looking, so that no arrival goes unnoticed
            for index in range(checked, len(self.arrivals)):
                if match(self.arrivals[index][2]):
                    return self.arrivals[index]
            checked = len(self.arrivals)
            left = deadline - time.perf_counter()
            if left <= 0 or self.error is not None or not self.reading:
                return None
            with anyio.move_on_after(left):
                await arrived.wait()

    def live(self) -> list[Arrival]:
        return self.arrivals[self.live_from :]


@asynccontextmanager
async def watching(url: str) -> AsyncIterator[EventWatcher]:
    """A live subscription for the length of the block."""
    async with (
        AdminClient(Target(url=url, token=ADMIN_TOKEN)) as client,
        anyio.create_task_group() as tasks,
    ):
        watcher = EventWatcher(client)
        seq = int((await client.state())["seq"])
        watcher.seq_at_start = seq
        watcher.reading = True
        tasks.start_soon(watcher.read, seq - 1 if seq > 0 else None)
        if seq > 0:
            await watcher.wait_for(lambda e: e["seq"] >= seq, EVENT_WAIT_S)
        else:
            await anyio.sleep(NO_RESUME_WAIT_S)
        watcher.live_from = len(watcher.arrivals)
        try:
            yield watcher
        finally:
            tasks.cancel_scope.cancel()


@dataclass(frozen=True)
class EventSample:
    """One event's latency: from what caused it, seen by this process, to its arrival here."""

    type: str
    # From the request's start (session.opened), the response read (session.closed) or the
    # kill -9 (worker.exited):
    latency_ms: float
    publish_to_arrival_ms: float  # the event's `at` (the parent's wall clock, ms) to its arrival


def event_sample(arrival: Arrival, cause: float) -> EventSample:
    at_perf, at_wall, event = arrival
    return EventSample(event["type"], (at_perf - cause) * 1e3, at_wall * 1e3 - event["at"])
