"""The execution coordinator: sessions share the machine; a managed job takes it alone.

Every session holds a *shared* lease while it runs on a worker; a job holds the *exclusive* one
while its process runs. Leases are granted first come, first served: once a job waits, sessions
that arrive after it wait behind it (it is not starved by a steady stream of requests), while the
sessions already running finish first. Sessions waiting here still hold their admission slot, so
arrivals beyond that queue in admission as usual (429 past `max_queued`), and a session's deadline
still ends its wait.

This coordinates *execution*, not memory: what a job frees for itself (pausing the workers) is the
job's business (`mlxhost.host.jobs.execution`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum

import anyio

from mlxhost.wire.admin import ExecutionRecord

__all__ = ["CoordinatorClosed", "ExecutionCoordinator", "LeaseMode"]


class CoordinatorClosed(Exception):
    """The host is stopping: no lease is granted any more."""


class LeaseMode(StrEnum):
    SHARED = "shared"
    EXCLUSIVE = "exclusive"


@dataclass(eq=False)
class _Waiter:
    mode: LeaseMode
    owner: str
    granted: anyio.Event = field(default_factory=anyio.Event)


class ExecutionCoordinator:
    def __init__(self) -> None:
        self._shared = 0
        self._exclusive: str | None = None
        self._queue: deque[_Waiter] = deque()
        self._changed = anyio.Event()
        self._closed = False
        self.paused: tuple[str, ...] = ()  # workers paused for the exclusive holder (the runner sets it)

    @property
    def exclusive_owner(self) -> str | None:
        return self._exclusive

    def record(self) -> ExecutionRecord:
        return ExecutionRecord(
            shared=self._shared,
            exclusive=self._exclusive,
            waiting=tuple(w.owner for w in self._queue),
            paused=self.paused if self._exclusive is not None else (),
        )

    @asynccontextmanager
    async def shared(self, owner: str) -> AsyncIterator[None]:
        """Hold a shared lease for the block (a session running on a worker)."""
        await self._acquire(LeaseMode.SHARED, owner)
        try:
            yield
        finally:
            self._release(LeaseMode.SHARED)

    @asynccontextmanager
    async def exclusive(self, owner: str) -> AsyncIterator[None]:
        """Hold the exclusive lease for the block: after every session running now, before later ones."""
        await self._acquire(LeaseMode.EXCLUSIVE, owner)
        try:
            yield
        finally:
            self._release(LeaseMode.EXCLUSIVE)

    async def wait_no_exclusive(self) -> None:
        """Return once no job holds the exclusive lease (a worker's respawn waits for this)."""
        while self._exclusive is not None and not self._closed:
            await self._wait_changed()

    def close(self) -> None:
        """Refuse every waiter and every later request; leases held stay until their blocks end."""
        self._closed = True
        self._notify()

    async def _acquire(self, mode: LeaseMode, owner: str) -> None:
        if self._closed:
            raise CoordinatorClosed("the host is stopping")
        if not self._queue and self._free_for(mode):
            self._take(mode, owner)
            return
        waiter = _Waiter(mode, owner)
        self._queue.append(waiter)
        self._notify()
        try:
            while not waiter.granted.is_set():
                if self._closed:
                    raise CoordinatorClosed("the host is stopping")
                await self._wait_changed()
        except BaseException:
            if waiter.granted.is_set():
                # Granted just as it was cancelled: give the lease back, as if it had run.
                self._release(mode)
            else:
                self._queue.remove(waiter)
                self._grant()  # a job at the head leaving may let the sessions behind it run
            raise

    def _free_for(self, mode: LeaseMode) -> bool:
        if self._exclusive is not None:
            return False
        return mode is LeaseMode.SHARED or self._shared == 0

    def _take(self, mode: LeaseMode, owner: str) -> None:
        if mode is LeaseMode.SHARED:
            self._shared += 1
        else:
            self._exclusive = owner
        self._notify()

    def _release(self, mode: LeaseMode) -> None:
        if mode is LeaseMode.SHARED:
            self._shared -= 1
        else:
            self._exclusive = None
        self._grant()

    def _grant(self) -> None:
        """Hand leases to the waiters at the head of the line, in order, while they fit."""
        while self._queue and self._free_for(self._queue[0].mode):
            waiter = self._queue.popleft()
            self._take(waiter.mode, waiter.owner)
            waiter.granted.set()
        self._notify()

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
