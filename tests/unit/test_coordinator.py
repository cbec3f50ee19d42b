"""The execution coordinator: shared leases for sessions, the exclusive one for a job, in arrival order."""

from __future__ import annotations

import anyio
import pytest

from mlxhost.host.serving.coordinator import CoordinatorClosed, ExecutionCoordinator

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the host serves on asyncio (Hypercorn)


async def test_sessions_share_and_a_job_waits_for_the_running_ones() -> None:
    coordinator = ExecutionCoordinator()
    order: list[str] = []
    release = anyio.Event()

    async def session(name: str) -> None:
        async with coordinator.shared(name):
            order.append(f"{name} runs")
            await release.wait()
        order.append(f"{name} done")

    async def job() -> None:
        async with coordinator.exclusive("job"):
            order.append("job runs")

    async with anyio.create_task_group() as tg:
        tg.start_soon(session, "a")
        tg.start_soon(session, "b")
        await wait_for(lambda: coordinator.record().shared == 2)
        tg.start_soon(job)
        await wait_for(lambda: coordinator.record().waiting == ("job",))
        assert "job runs" not in order
        release.set()
    assert order.index("job runs") > max(order.index("a done"), order.index("b done"))


async def test_a_waiting_job_is_not_starved_by_sessions_arriving_after_it() -> None:
    coordinator = ExecutionCoordinator()
    order: list[str] = []
    first_done = anyio.Event()

    async def first() -> None:
        async with coordinator.shared("first"):
            await first_done.wait()

    async def job() -> None:
        async with coordinator.exclusive("job"):
            order.append("job")
            await anyio.sleep(0.01)

    async def late() -> None:
        async with coordinator.shared("late"):
            order.append("late")

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await wait_for(lambda: coordinator.record().shared == 1)
        tg.start_soon(job)
        await wait_for(lambda: coordinator.record().waiting == ("job",))
        tg.start_soon(late)
        await wait_for(lambda: coordinator.record().waiting == ("job", "late"))
        first_done.set()
    assert order == ["job", "late"]


async def test_a_cancelled_job_leaves_the_line_and_lets_the_sessions_behind_it_run() -> None:
    coordinator = ExecutionCoordinator()
    ran: list[str] = []
    hold = anyio.Event()
    job_scope = anyio.CancelScope()

    async def holder() -> None:
        async with coordinator.shared("holder"):
            await hold.wait()

    async def job() -> None:
        with job_scope:
            async with coordinator.exclusive("job"):
                ran.append("job")

    async def late() -> None:
        async with coordinator.shared("late"):
            ran.append("late")

    async with anyio.create_task_group() as tg:
        tg.start_soon(holder)
        await wait_for(lambda: coordinator.record().shared == 1)
        tg.start_soon(job)
        await wait_for(lambda: coordinator.record().waiting == ("job",))
        tg.start_soon(late)
        await wait_for(lambda: coordinator.record().waiting == ("job", "late"))
        job_scope.cancel()
        await wait_for(lambda: ran == ["late"])
        hold.set()
    assert ran == ["late"]
    assert coordinator.record().waiting == () and coordinator.record().shared == 0


async def test_a_respawn_waits_while_a_job_holds_the_lease() -> None:
    coordinator = ExecutionCoordinator()
    job_done = anyio.Event()
    respawned: list[bool] = []

    async def job() -> None:
        async with coordinator.exclusive("job"):
            await job_done.wait()

    async def respawn() -> None:
        await coordinator.wait_no_exclusive()
        respawned.append(job_done.is_set())

    async with anyio.create_task_group() as tg:
        tg.start_soon(job)
        await wait_for(lambda: coordinator.exclusive_owner == "job")
        tg.start_soon(respawn)
        await anyio.sleep(0.05)
        assert respawned == []
        job_done.set()
    assert respawned == [True]


async def test_closing_refuses_waiters() -> None:
    coordinator = ExecutionCoordinator()
    hold = anyio.Event()
    refused: list[str] = []

    async def job() -> None:
        async with coordinator.exclusive("job"):
            await hold.wait()

    async def session() -> None:
        try:
            async with coordinator.shared("s"):
                pass
        except CoordinatorClosed:
            refused.append("s")

    async with anyio.create_task_group() as tg:
        tg.start_soon(job)
        await wait_for(lambda: coordinator.exclusive_owner == "job")
        tg.start_soon(session)
        await wait_for(lambda: coordinator.record().waiting == ("s",))
        coordinator.close()
        await wait_for(lambda: refused == ["s"])
        hold.set()
    assert coordinator.record().waiting == ()


async def wait_for(condition: object) -> None:
    with anyio.fail_after(5):
        while not condition():  # type: ignore[operator]
            await anyio.sleep(0.001)
