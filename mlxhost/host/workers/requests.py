"""One worker's requests, as the pool and the supervisor count them: in flight on it, waiting for it.

A request in flight holds the worker in service: the pool never retires it, and stopping it
drains such requests first. A request waiting for it to become ready keeps the pool from choosing
it to make room. `last_used` is when it last served, for the pool's least-recently-used eviction and
its idle unload. Whether a request may wait at all is the supervisor's to say (`Supervisor.wait_ready`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import anyio

__all__ = ["Requests"]


class Requests:
    def __init__(self) -> None:
        self.in_flight = 0
        self.waiting = 0  # requests waiting in `wait` for the worker to become ready
        self.last_used = time.monotonic()
        self._idle = anyio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def lease(self) -> Iterator[None]:
        """Count a request as in flight for the block."""
        self.in_flight += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self.last_used = time.monotonic()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()
            if self.in_flight == 0:
                self._idle.set()

    async def wait(self, changed: anyio.Event) -> None:
        """Wait for `changed`, counted as a request waiting for the worker."""
        self.waiting += 1
        try:
            await changed.wait()
        finally:
            self.waiting -= 1

    async def drain(self, timeout: float) -> None:
        """Return once no request is in flight, or after `timeout` seconds."""
        with anyio.move_on_after(timeout):
            await self._idle.wait()
