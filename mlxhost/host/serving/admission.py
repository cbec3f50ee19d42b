"""Admission for one model: a bounded number of sessions run, a bounded number wait, FIFO.

Beyond `max_active + max_queued` the answer is an immediate refusal (429), never a pile-up. An
exclusive operation (an operator's restart) closes the gate: sessions that were already waiting
keep their turn, new arrivals wait behind it, and it runs once no session is active.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from mlxhost.wire.admin import AdmissionRecord

__all__ = ["Admission", "QueueFull"]


class QueueFull(Exception):
    pass


class Admission:
    def __init__(self, max_active: int, max_queued: int) -> None:
        self.max_active = max_active
        self.max_queued = max_queued
        # CapacityLimiter is FIFO-fair on both anyio backends: the queue needs no hand-made lock.
        self._limiter = anyio.CapacityLimiter(max_active)
        self._gate = anyio.Event()  # set while open; an exclusive operation closes it
        self._gate.set()
        self._at_gate = 0
        self._exclusive = anyio.Lock()
        self._idle = anyio.Event()
        self._idle.set()
        self.admitted = 0
        self.rejected = 0

    def statistics(self) -> AdmissionRecord:
        """The gauges and counters the admin API shows for this model."""
        limiter = self._limiter.statistics()
        return AdmissionRecord(
            max_active=self.max_active,
            max_queued=self.max_queued,
            active=limiter.borrowed_tokens,
            queued=limiter.tasks_waiting + self._at_gate,
            admitted=self.admitted,
            rejected=self.rejected,
        )

    def full(self) -> bool:
        """Whether a new arrival could neither run nor wait now."""
        stats = self.statistics()
        can_run_now = stats.active < self.max_active and stats.queued == 0 and self._gate.is_set()
        return not can_run_now and stats.queued >= self.max_queued

    def turn_away(self) -> bool:
        """True, and counted as a refusal, when a new arrival could neither run nor wait now."""
        if self.full():
            self.rejected += 1
            return True
        return False

    @asynccontextmanager
    async def slot(self, owner: object) -> AsyncIterator[None]:
        """Hold one of the `max_active` places; raise QueueFull at once when too many wait."""
        if self.turn_away():
            raise QueueFull
        if not self._gate.is_set():
            self._at_gate += 1
            try:
                while not self._gate.is_set():
                    await self._gate.wait()
            finally:
                self._at_gate -= 1
        try:
            await self._limiter.acquire_on_behalf_of(owner)
        except BaseException:
            # A waiter cancelled just as a leaving session handed it the last place gives that
            # place back inside the limiter: nobody else would say the model is idle, and an
            # exclusive operation waiting for that (with the gate closed) would wait forever.
            if self._limiter.borrowed_tokens == 0:
                self._idle.set()
            raise
        self.admitted += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        try:
            yield
        finally:
            self._limiter.release_on_behalf_of(owner)
            if self._limiter.borrowed_tokens == 0:
                self._idle.set()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Run alone: after the sessions already admitted or waiting, before any that arrive later."""
        async with self._exclusive:
            self._gate = anyio.Event()
            try:
                while self._limiter.borrowed_tokens or self._limiter.statistics().tasks_waiting:
                    await self._idle.wait()
                    await anyio.sleep(0)  # let a waiter that was just handed a place take it
                yield
            finally:
                self._gate.set()
