"""The standby pool on its own, with real worker processes: warm, taken, replaced, closed."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import psutil
import pytest

from mlxhost.config import Settings
from mlxhost.host.workers.standby import StandbyPool
from mlxhost.wire.launch import WORKER_READY, LaunchRecord, ReadyLine, WorkerOptions, parse_line

pytestmark = pytest.mark.anyio

WAIT = 120  # seconds: a fresh interpreter imports MLX, mlx-lm and transformers, on a busy machine


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, bool]]:
    # The loop the host runs its supervisors on (mlxhost.runtime.eventloop). On the standard
    # loop, CPython 3.11's pipe transport can report a worker's stdin lost twice when the parent
    # closes it as the worker exits, and the second report raises InvalidStateError in a callback.
    return ("asyncio", {"use_uvloop": True})


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_a_standby_becomes_warm_then_closing_leaves_no_process() -> None:
    async with StandbyPool.open(Settings(standby_workers=2)) as pool:
        with anyio.fail_after(WAIT):
            await pool.wait_ready()
        records = pool.snapshot()
        assert [r.state for r in records] == ["ready", "ready"]
        assert all(r.rss_bytes > 0 for r in records)
        pids = [r.pid for r in records]
        for pid in pids:
            assert "mlxhost.worker" in " ".join(psutil.Process(pid).cmdline())
    assert pool.snapshot() == []
    assert all(gone(pid) for pid in pids)


async def test_take_hands_over_a_warm_process_that_serves_and_a_replacement_comes(
    tiny_model: Path, tmp_path: Path
) -> None:
    async with StandbyPool.open(Settings(standby_workers=1)) as pool:
        with anyio.fail_after(WAIT):
            await pool.wait_ready()
        (waiting,) = pool.snapshot()
        standby = pool.take()
        assert standby is not None and standby.pid == waiting.pid
        assert pool.take() is None  # it was the only one, and its replacement is not ready yet
        out: list[str] = []
        standby.attach(out.append, lambda line: None)
        socket = tmp_path / "w.sock"
        record = LaunchRecord("w", str(socket), str(tiny_model), "tiny", options=WorkerOptions(state_dir=str(tmp_path)))
        process = standby.process
        assert process.stdin is not None
        await process.stdin.send(record.encode())
        with anyio.fail_after(WAIT):
            while not any(line.startswith(WORKER_READY) for line in out):
                await anyio.sleep(0.05)
            ready = next(parse_line(line) for line in out if line.startswith(WORKER_READY))
            assert isinstance(ready, ReadyLine) and ready.pid == standby.pid and ready.socket == str(socket)
            await pool.wait_ready()  # the replacement, once the taken one is up
        (replacement,) = pool.snapshot()
        assert replacement.pid != standby.pid and pool.taken == 1
        # The taken process is the caller's: the pool's closing leaves it alone.
        await process.stdin.aclose()  # its parent "goes": it drains and exits
        with anyio.fail_after(WAIT):
            assert await process.wait() == 0
        await process.aclose()
    assert gone(replacement.pid)


async def test_a_standby_killed_before_use_is_replaced() -> None:
    async with StandbyPool.open(Settings(standby_workers=1)) as pool:
        with anyio.fail_after(WAIT):
            await pool.wait_ready()
        (first,) = pool.snapshot()
        os.kill(first.pid, signal.SIGKILL)
        with anyio.fail_after(WAIT):
            while not [r for r in pool.snapshot() if r.pid != first.pid and r.state == "ready"]:
                await anyio.sleep(0.05)
        assert gone(first.pid)
        (second,) = pool.snapshot()
        assert pool.taken == 0
    assert gone(second.pid)


async def test_a_standby_whose_stdin_ends_exits_quietly() -> None:
    # What a host that is SIGKILLed leaves: a standby reading the end of its stdin, before any record.
    process = await anyio.open_process([sys.executable, "-m", "mlxhost.worker"])
    assert process.stdin is not None and process.stderr is not None
    await process.stdin.aclose()
    with anyio.fail_after(WAIT):
        assert await process.wait() == 0
        stderr = b"".join([chunk async for chunk in process.stderr])
    await process.aclose()
    assert b"launch record" not in stderr and b"Traceback" not in stderr


@pytest.mark.parametrize(
    "settings", [Settings(standby_workers=0), Settings(worker_command=f"{sys.executable} -m mlxhost.worker")]
)
async def test_no_standby_without_standby_workers_or_with_a_custom_worker_command(settings: Settings) -> None:
    async with StandbyPool.open(settings) as pool:
        assert pool.size == 0
        await anyio.sleep(1.0)  # a spawn would have shown by now
        assert pool.snapshot() == [] and pool.take() is None
