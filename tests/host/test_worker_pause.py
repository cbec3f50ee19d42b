"""Pausing a worker for a managed job, and holding back its spawns: a real Supervisor, real workers.

The parent's side (`Supervisor.paused()`, the spawn gate) runs here in the test's event loop; the
worker is a real `python -m mlxhost.worker` process serving the tiny model, which the tests also
reach directly on its private socket (its /health, its /admin/lease, chat completions).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.workers.status import WorkerState
from mlxhost.host.workers.supervisor import Supervisor
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.launch import MemoryReading

LONG = {"messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 1500, "temperature": 0}
SHORT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0}
BOUND = 120  # seconds: only a hang reaches it


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, bool]]:
    # The loop the host runs its supervisors on (mlxhost.runtime.eventloop). On the standard
    # loop, CPython 3.11's pipe transport can report a worker's stdin lost twice when the parent
    # closes it as the worker exits, and the second report raises InvalidStateError in a callback.
    return ("asyncio", {"use_uvloop": True})


class Running:
    """A supervisor running a real worker, the events it published, and HTTP to the worker."""

    def __init__(self, supervisor: Supervisor, events: list[str]) -> None:
        self.supervisor = supervisor
        self.events = events
        self.socket = str(supervisor.socket_path)
        self.http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(supervisor.socket_path)),
            base_url="http://worker",
            timeout=BOUND,
        )

    async def health(self) -> dict[str, Any]:
        # A client of its own each time: a respawned worker listens on the same path anew.
        async with httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=self.socket), timeout=BOUND
        ) as http:
            response = await http.get("http://worker/health")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    async def wait_health(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while not predicate(health := await self.health()):
            await anyio.sleep(0.02)
        return health


@asynccontextmanager
async def running(
    model: Path, spawn_gate: Callable[[], Awaitable[None]] | None = None, **options: Any
) -> AsyncIterator[Running]:
    # A short directory of its own: a Unix socket's path has at most 107 bytes.
    with tempfile.TemporaryDirectory(prefix="mlxp") as directory:
        hub = EventHub()
        settings = Settings(crash_backoff=0.0, **options)
        supervisor = Supervisor(
            ModelSpec("m", str(model)),
            model,
            settings,
            Path(directory) / "w.sock",
            hub,
            spawn_gate=spawn_gate,
        )
        events: list[str] = []
        async with anyio.create_task_group() as tg:

            async def collect() -> None:
                async for event in hub.subscribe(after=0):
                    events.append(event["type"])

            tg.start_soon(collect)
            await tg.start(supervisor.run)
            run = Running(supervisor, events)
            try:
                yield run
            finally:
                with anyio.fail_after(BOUND):
                    await run.http.aclose()
                    await supervisor.stop(drain=False)
                tg.cancel_scope.cancel()


class Stream:
    """A streamed chat completion read in a task: its content chunks and its finish reason."""

    def __init__(self) -> None:
        self.contents = 0
        self.first = anyio.Event()
        self.finished = anyio.Event()
        self.finish_reason: str | None = None
        self.tokens = 0

    async def read(self, http: httpx.AsyncClient, body: dict[str, Any]) -> None:
        async with http.stream(
            "POST",
            "/v1/chat/completions",
            json={**body, "stream": True, "stream_options": {"include_usage": True}},
        ) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    self.tokens = chunk["usage"]["completion_tokens"]
                for choice in chunk["choices"]:
                    if choice["delta"].get("content"):
                        self.contents += 1
                        self.first.set()
                    if choice.get("finish_reason"):
                        self.finish_reason = choice["finish_reason"]
        self.finished.set()


@pytest.mark.anyio
async def test_a_pause_lets_running_generations_finish_then_holds_new_ones_until_released(
    tiny_model: Path,
) -> None:
    async with running(tiny_model) as run:
        supervisor = run.supervisor
        await supervisor.wait_ready()
        held, release, released = anyio.Event(), anyio.Event(), anyio.Event()
        readings: list[MemoryReading | None] = []

        async def hold_pause() -> None:
            async with supervisor.paused() as reading:
                readings.append(reading)
                held.set()
                await release.wait()
            released.set()

        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                running_one = Stream()

                tg.start_soon(running_one.read, run.http, LONG)
                await running_one.first.wait()
                tg.start_soon(hold_pause)
                # The gate closes while the generation still runs; the pause waits for it.
                closing = await run.wait_health(lambda h: h["paused"] or held.is_set())
                assert closing["paused"] and closing["engine"]["active"] == 1
                await held.wait()
                assert supervisor.paused_now
                # Paused: /health answers 200 and says so; the generation ended in the engine
                # first (its last chunks may still be on their way), and was not cut short.
                health = await run.health()
                assert health["paused"] is True and health["status"] == "ok"
                assert health["engine"]["active"] == 0 and health["engine"]["completed"] == 1
                await running_one.finished.wait()
                assert running_one.finish_reason == "length" and running_one.tokens == LONG["max_tokens"]
                # MLX's cache went back to the system.
                (reading,) = readings
                assert reading is not None and reading.cache_bytes == 0
                assert supervisor.snapshot().state == "ready"

                # A request sent now waits, untouched, without a token.
                waiting = Stream()
                tg.start_soon(waiting.read, run.http, SHORT)
                before = (await run.wait_health(lambda h: h["engine"]["waiting"] == 1))["engine"]
                await anyio.sleep(0.5)  # room for a token that must not come
                after = (await run.health())["engine"]
                assert after["generated_tokens"] == before["generated_tokens"] and after["active"] == 0
                assert waiting.contents == 0 and not waiting.finished.is_set()

                release.set()
                await waiting.finished.wait()
                await released.wait()
                assert waiting.finish_reason is not None and waiting.contents > 0
        assert not supervisor.paused_now
        health = await run.health()
        assert health["paused"] is False and health["engine"]["cancelled"] == 0


@pytest.mark.anyio
async def test_a_parent_that_drops_its_lease_leaves_the_worker_running(tiny_model: Path) -> None:
    async with running(tiny_model) as run:
        supervisor = run.supervisor
        await supervisor.wait_ready()
        with anyio.fail_after(BOUND):
            # The task holding the pause is cancelled: the connection goes, and the worker resumes.
            async with anyio.create_task_group() as tg:
                held = anyio.Event()

                async def hold_pause() -> None:
                    async with supervisor.paused():
                        held.set()
                        await anyio.sleep_forever()

                tg.start_soon(hold_pause)
                await held.wait()
                assert (await run.health())["paused"] is True
                tg.cancel_scope.cancel()
            assert not supervisor.paused_now
            await run.wait_health(lambda h: h["paused"] is False)

            # A client gone before its pause was even held (a generation still ran) releases it too.
            stream = Stream()
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.read, run.http, LONG)
                await stream.first.wait()
                lease = await anyio.connect_unix(str(supervisor.socket_path))
                await lease.send(b"POST /admin/lease HTTP/1.1\r\nhost: worker\r\ncontent-length: 0\r\n\r\n")
                await run.wait_health(lambda h: h["paused"] is True or stream.finished.is_set())
                await lease.aclose()
                await run.wait_health(lambda h: h["paused"] is False)
            assert stream.finish_reason == "length" and stream.tokens == LONG["max_tokens"]
            assert (await run.health())["engine"]["cancelled"] == 0


@pytest.mark.anyio
async def test_leases_are_counted_and_a_worker_that_dies_paused_is_left_quietly(tiny_model: Path) -> None:
    async with running(tiny_model) as run:
        supervisor = run.supervisor
        await supervisor.wait_ready()
        with anyio.fail_after(BOUND):
            async with run.http.stream("POST", "/admin/lease") as other:
                lines = other.aiter_lines()
                assert json.loads(await anext(lines))["paused"] is True
                async with supervisor.paused() as reading:
                    assert reading is not None
                assert (await run.health())["paused"] is True  # the other lease still holds it
            await run.wait_health(lambda h: h["paused"] is False)

            pid = supervisor.pid
            assert pid is not None
            async with supervisor.paused() as reading:
                assert reading is not None and supervisor.paused_now
                os.kill(pid, signal.SIGKILL)
                while supervisor.pid == pid:
                    await supervisor.exit_of(pid, 1.0)
                assert not supervisor.paused_now
            await supervisor.wait_replaced(pid)
            assert (await run.health())["paused"] is False


@pytest.mark.anyio
async def test_with_no_process_there_is_nothing_to_pause(tiny_model: Path) -> None:
    gate = anyio.Event()
    async with running(tiny_model, spawn_gate=gate.wait) as run, run.supervisor.paused() as reading:
        assert reading is None and not run.supervisor.paused_now


@pytest.mark.anyio
async def test_the_spawn_gate_holds_back_every_spawn_and_a_stop_ends_the_wait(tiny_model: Path) -> None:
    gate = anyio.Event()
    gate_waits = 0

    async def spawn_gate() -> None:
        nonlocal gate_waits
        gate_waits += 1
        await gate.wait()

    async with running(tiny_model, spawn_gate=spawn_gate) as run:
        supervisor = run.supervisor
        with anyio.fail_after(BOUND):
            while gate_waits == 0:
                await anyio.sleep(0.01)
            await anyio.sleep(0.3)  # room for a spawn that must not happen
            assert supervisor.state is WorkerState.STARTING and supervisor.pid is None
            assert "worker.spawned" not in run.events
            gate.set()
            await supervisor.wait_ready()
            assert run.events.count("worker.spawned") == 1

            # A respawn waits too; the state stays "restarting" meanwhile.
            gate = anyio.Event()
            pid = supervisor.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            while gate_waits < 2:
                await anyio.sleep(0.01)
            await anyio.sleep(0.3)
            assert supervisor.state is WorkerState.RESTARTING and supervisor.pid is None
            assert run.events.count("worker.spawned") == 1
            gate.set()
            await supervisor.wait_replaced(pid)
            assert run.events.count("worker.spawned") == 2

    # A stop while the gate is closed returns at once, and nothing was ever spawned.
    closed = anyio.Event()
    async with running(tiny_model, spawn_gate=closed.wait) as run:
        await anyio.sleep(0.1)
        with anyio.fail_after(10):
            await run.supervisor.stop()
        assert run.supervisor.state is WorkerState.CLOSED
        assert "worker.spawned" not in run.events and "worker.exited" not in run.events
