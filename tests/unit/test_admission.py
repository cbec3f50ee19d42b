"""Admission on its own: places to run, a bounded FIFO queue, refusal beyond it, and the gate an
exclusive operation closes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from mlxhost.host.serving.admission import Admission, QueueFull
from mlxhost.wire.admin import AdmissionRecord


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the host serves on asyncio (Hypercorn)


async def settle() -> None:
    await anyio.wait_all_tasks_blocked()


class Sessions:
    """Sessions that take a place, note when they got it, and hold it until told to leave."""

    def __init__(self, admission: Admission, tg: anyio.abc.TaskGroup) -> None:
        self.admission = admission
        self.tg = tg
        self.ran: list[str] = []
        self.refused: list[str] = []
        self.leave: dict[str, anyio.Event] = {}
        self.scopes: dict[str, anyio.CancelScope] = {}

    def arrive(self, *names: str) -> None:
        for name in names:  # in this order
            self.leave[name] = anyio.Event()
            self.scopes[name] = anyio.CancelScope()
            self.tg.start_soon(self._session, name)

    async def _session(self, name: str) -> None:
        with self.scopes[name]:
            try:
                async with self.admission.slot(name):
                    self.ran.append(name)
                    await self.leave[name].wait()
            except QueueFull:
                self.refused.append(name)

    def exclusive(self, name: str) -> None:
        async def run() -> None:
            async with self.admission.exclusive():
                self.ran.append(name)
                # Alone: nothing else runs while it does.
                assert self.admission.statistics().active == 0

        self.tg.start_soon(run)


@asynccontextmanager
async def sessions_of(admission: Admission) -> AsyncIterator[Sessions]:
    """Sessions of `admission`; the block ends once every one has."""
    async with anyio.create_task_group() as tg:
        yield Sessions(admission, tg)


def counts(admission: Admission) -> tuple[int, int, int, int]:
    stats = admission.statistics()
    return stats.active, stats.queued, stats.admitted, stats.rejected


@pytest.mark.anyio
async def test_sessions_run_up_to_the_limit_then_wait_then_are_refused() -> None:
    admission = Admission(max_active=2, max_queued=1)
    async with sessions_of(admission) as sessions:
        for name in "abcd":
            sessions.arrive(name)
            await settle()
        assert sessions.ran == ["a", "b"]  # c waits, d finds the queue full
        assert sessions.refused == ["d"]
        assert counts(admission) == (2, 1, 2, 1)
        assert admission.full()
        assert admission.statistics() == AdmissionRecord(max_active=2, max_queued=1, active=2, queued=1, admitted=2, rejected=1)

        sessions.leave["a"].set()
        await settle()
        assert sessions.ran == ["a", "b", "c"] and counts(admission) == (2, 0, 3, 1)
        assert admission.full() is False  # a place in the queue is free again
        sessions.leave["b"].set()
        sessions.leave["c"].set()
    assert counts(admission) == (0, 0, 3, 1)


@pytest.mark.anyio
async def test_with_no_queue_a_free_place_admits_and_a_full_house_refuses() -> None:
    admission = Admission(max_active=1, max_queued=0)
    assert not admission.full()
    async with sessions_of(admission) as sessions:
        sessions.arrive("a")
        await settle()
        assert admission.full()
        assert admission.turn_away() and counts(admission) == (1, 0, 1, 1)  # counted as a refusal
        sessions.arrive("b")
        await settle()
        assert sessions.refused == ["b"] and counts(admission) == (1, 0, 1, 2)
        sessions.leave["a"].set()
    assert not admission.full() and not admission.turn_away()
    assert counts(admission) == (0, 0, 1, 2)


@pytest.mark.anyio
async def test_waiters_run_in_the_order_they_came() -> None:
    admission = Admission(max_active=1, max_queued=10)
    async with sessions_of(admission) as sessions:
        for name in ["first", "second", "third", "fourth"]:
            sessions.arrive(name)
            await settle()
        for name in ["first", "second", "third"]:
            sessions.leave[name].set()
            # One arriving just as a place frees up queues behind those already waiting.
            sessions.arrive(f"late-{name}")
            await settle()
        sessions.leave["fourth"].set()
        for name in ["first", "second", "third"]:
            sessions.leave[f"late-{name}"].set()
    assert sessions.ran == ["first", "second", "third", "fourth", "late-first", "late-second", "late-third"]


@pytest.mark.anyio
async def test_a_waiter_that_leaves_the_queue_frees_its_place_in_it() -> None:
    admission = Admission(max_active=1, max_queued=1)
    async with sessions_of(admission) as sessions:
        sessions.arrive("a", "b")
        await settle()
        assert admission.full() and counts(admission) == (1, 1, 1, 0)

        sessions.scopes["b"].cancel()  # its client went away while it waited
        await settle()
        assert not admission.full() and counts(admission) == (1, 0, 1, 0)
        sessions.arrive("c")  # takes the place b left, not refused
        await settle()
        assert sessions.refused == [] and counts(admission) == (1, 1, 1, 0)

        sessions.leave["a"].set()
        await settle()
        sessions.leave["c"].set()
    assert sessions.ran == ["a", "c"] and counts(admission) == (0, 0, 2, 0)


@pytest.mark.anyio
async def test_an_exclusive_operation_runs_after_those_admitted_or_waiting_and_before_later_ones() -> None:
    admission = Admission(max_active=1, max_queued=5)
    async with sessions_of(admission) as sessions:
        sessions.arrive("running", "waiting")
        await settle()
        sessions.exclusive("restart")
        await settle()
        sessions.arrive("later")  # the gate is closed: it waits behind the restart, and counts as queued
        await settle()
        assert counts(admission) == (1, 2, 1, 0)

        sessions.leave["running"].set()
        await settle()
        assert sessions.ran == ["running", "waiting"]
        sessions.leave["waiting"].set()
        await settle()
        assert sessions.ran == ["running", "waiting", "restart", "later"]
        sessions.leave["later"].set()


@pytest.mark.anyio
async def test_with_the_gate_closed_and_no_queue_a_free_place_does_not_admit() -> None:
    admission = Admission(max_active=2, max_queued=0)
    async with sessions_of(admission) as sessions:
        sessions.arrive("a")
        await settle()
        sessions.exclusive("restart")
        await settle()
        sessions.arrive("b")  # one place is free, but a restart is waiting for it
        await settle()
        assert sessions.refused == ["b"] and counts(admission) == (1, 0, 1, 1)
        sessions.leave["a"].set()
    assert sessions.ran == ["a", "restart"]


@pytest.mark.anyio
async def test_a_waiter_leaving_at_the_gate_frees_its_place() -> None:
    admission = Admission(max_active=1, max_queued=1)
    async with sessions_of(admission) as sessions:
        sessions.arrive("a")
        await settle()
        sessions.exclusive("restart")
        sessions.arrive("b")  # waits at the gate
        await settle()
        assert counts(admission) == (1, 1, 1, 0)
        sessions.scopes["b"].cancel()
        await settle()
        assert counts(admission) == (1, 0, 1, 0)
        sessions.leave["a"].set()
    assert sessions.ran == ["a", "restart"]


@pytest.mark.anyio
async def test_an_exclusive_operation_runs_when_the_waiter_handed_the_last_place_leaves() -> None:
    admission = Admission(max_active=1, max_queued=5)
    with anyio.fail_after(5):
        async with sessions_of(admission) as sessions:
            sessions.arrive("running", "waiting")
            await settle()
            sessions.exclusive("restart")
            await settle()
            # In the same moment the running session ends (handing its place to the waiter) and
            # the waiter's client goes away: the place comes back free, and the restart runs.
            sessions.leave["running"].set()
            sessions.scopes["waiting"].cancel()
            await settle()
            assert sessions.ran == ["running", "restart"]
            sessions.arrive("later")
            await settle()
            sessions.leave["later"].set()
    assert sessions.ran == ["running", "restart", "later"]
