"""Warm standby workers: interpreters that have done their imports and wait for a launch record.

Most of a worker's start is a fresh interpreter importing mlx, mlx_lm and transformers (seconds);
the model's load after that is often a fraction of it. So the host keeps `standby_workers`
processes spawned ahead, each stopped where it reads its launch record, having said
`MLXHOST-STANDBY` (`mlxhost.wire.launch`). A `WorkerProcess` takes one instead of spawning (a
crashed worker's successor, an on-demand model's cold start) and writes it the record; a
replacement is spawned in the background, a moment after the taken one serves. A standby holds
no model, only the imported libraries: its resident memory is the price, and /health,
/admin/state, metrics and the console show it.

    spawned → warming → ready → taken (a worker from then on) | gone (replaced after a backoff)

A standby's output is pumped line by line to a sink: the pool's (its log, its standby line) until
it is taken, then the worker's, from the very next line. The pumps run in the pool's task group,
so they carry on through the handover. Only the default worker command speaks the standby line:
with a custom `worker_command`, standby is off. While a job holds the machine, the standbys stay
as they are (they hold no model), and no replacement starts until it is done. Closing the pool
closes each waiting standby's stdin, and it exits; a host that is SIGKILLed leaves none behind,
for the same reason.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

import anyio
import anyio.abc
import psutil

from mlxhost.config import Settings
from mlxhost.host.workers.launch import lines, worker_command
from mlxhost.wire.admin import StandbyRecord
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.launch import WORKER_READY, StandbyLine, parse_line

__all__ = ["LineSink", "Standby", "StandbyPool"]

logger = logging.getLogger("mlxhost.standby")

LineSink = Callable[[str], None]
CLOSE_GRACE = 2.0  # seconds a standby gets to exit at the end of its stdin before it is killed
BACKOFF_FIRST = 1.0  # seconds before replacing a standby that died unused; doubled while they keep dying
BACKOFF_MAX = 60.0
# Once a taken standby serves, its replacement waits this long: an import takes a core for
# seconds, and the requests that waited through the restart (and their prefills) come first.
REFILL_AFTER = 2.0
STDERR_KEPT = 5


class Standby:
    """One warm process: its pid, whether it is ready, and its output, pumped to whoever holds it."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.pid = process.pid
        self.spawned = time.monotonic()
        self.ready = False  # its standby line was seen: its imports are done
        self.taken = anyio.Event()
        self.serving = anyio.Event()  # taken, it said it is ready (or it ended): its load is over
        self.stdout_closed = anyio.Event()
        self.stderr_closed = anyio.Event()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_KEPT)
        self._sinks: list[LineSink] = [_drop, _drop]
        try:
            self._ps: psutil.Process | None = psutil.Process(process.pid)
        except psutil.Error:
            self._ps = None

    @property
    def state(self) -> Literal["warming", "ready"]:
        return "ready" if self.ready else "warming"

    def attach(self, stdout: LineSink, stderr: LineSink) -> None:
        """Hand its output to `stdout` and `stderr` from the next line on: none is lost or seen twice.

        The pumps call the sinks with no checkpoint in between, so swapping them here is atomic.
        """
        self._sinks = [stdout, stderr]

    def rss_bytes(self) -> int:
        if self._ps is None or self.process.returncode is not None:
            return 0
        try:
            return int(self._ps.memory_info().rss)
        except psutil.Error:
            return 0

    def record(self) -> StandbyRecord:
        return StandbyRecord(pid=self.pid, state=self.state, rss_bytes=self.rss_bytes())

    async def _pump(self, which: int, stream: anyio.abc.ByteReceiveStream, closed: anyio.Event) -> None:
        try:
            async for line in lines(stream):
                if which == 0 and line.startswith(WORKER_READY):
                    self.serving.set()
                self._sinks[which](line)
        finally:
            closed.set()
            if which == 0:
                self.serving.set()


class StandbyPool:
    """Keeps `standby_workers` warm processes; `take` hands one over. Open it with `open`."""

    def __init__(
        self,
        settings: Settings,
        task_group: anyio.abc.TaskGroup,
        spawn_gate: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        # A custom worker command may not speak the standby line, or may mean to misbehave.
        self.size = 0 if settings.worker_command else settings.standby_workers
        self.taken = 0  # standbys handed over so far
        self._tg = task_group
        self._spawn_gate = spawn_gate
        self._waiting: list[Standby] = []  # spawned and not taken, in spawn order
        self._started = False
        self._changed = anyio.Event()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        spawn_gate: Callable[[], Awaitable[None]] | None = None,
        *,
        start: bool = True,
    ) -> AsyncIterator[StandbyPool]:
        """The pool, for the block; `start=False` spawns nothing until `start()`. Leaves no process."""
        async with anyio.create_task_group() as tg:
            pool = cls(settings, tg, spawn_gate)
            if start:
                pool.start()
            try:
                yield pool
            finally:
                tg.cancel_scope.cancel()  # each slot closes its standby on the way out

    def start(self) -> None:
        """Start keeping the standbys (once; later calls do nothing)."""
        if self._started:
            return
        self._started = True
        for _ in range(self.size):
            self._tg.start_soon(self._keep_one)

    def take(self) -> Standby | None:
        """A ready standby, now the caller's (its process, its output), or None if none is ready."""
        for standby in self._waiting:
            if standby.ready and standby.process.returncode is None:
                self._waiting.remove(standby)
                self.taken += 1
                standby.taken.set()
                logger.info("standby pid %d taken", standby.pid)
                self._notify()
                return standby
        return None

    def snapshot(self) -> list[StandbyRecord]:
        return [standby.record() for standby in self._waiting]

    async def wait_ready(self, count: int | None = None) -> None:
        """Wait until `count` standbys (all of them by default) are ready."""
        count = self.size if count is None else count
        while sum(s.ready and s.process.returncode is None for s in self._waiting) < count:
            await self._changed.wait()

    # -- one slot: a standby, and its replacement once it is taken or gone ------------------------

    async def _keep_one(self) -> None:
        failures = 0  # standbys of this slot that died unused, in a row
        while True:
            if self._spawn_gate is not None:
                await self._spawn_gate()  # a job holds the machine: no imports compete with it
            standby = await self._spawn()
            if standby is not None:
                self._waiting.append(standby)
                self._notify()
                try:
                    gone = await self._hold(standby)
                finally:
                    if standby in self._waiting:
                        self._waiting.remove(standby)
                        self._notify()
                        with anyio.CancelScope(shield=True):
                            await _close(standby.process)
                if not gone:
                    failures = 0
                    # Its replacement's imports would compete with the model's load for the CPU.
                    with anyio.move_on_after(self.settings.load_timeout):
                        await standby.serving.wait()
                    await anyio.sleep(REFILL_AFTER)
                    continue
            failures += 1
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1))
            logger.warning("standby: spawning another in %gs", delay)
            await anyio.sleep(delay)

    async def _spawn(self) -> Standby | None:
        try:
            process = await anyio.open_process(worker_command(self.settings), start_new_session=True)
        except (OSError, ValueError) as exc:
            logger.error("standby: cannot start one: %s", excerpt(exc, MESSAGE_CHARS))
            return None
        log = logging.getLogger(f"mlxhost.standby.{process.pid}")
        standby = Standby(process)

        def on_stdout(line: str) -> None:
            if isinstance(parse_line(line), StandbyLine):
                if not standby.ready:
                    standby.ready = True
                    took = time.monotonic() - standby.spawned
                    logger.info("standby pid %d ready in %.2fs", standby.pid, took)
                    self._notify()
            else:
                log.info("%s", line)

        def on_stderr(line: str) -> None:
            standby.stderr_tail.append(excerpt(line, MESSAGE_CHARS))
            log.info("%s", line)

        standby.attach(on_stdout, on_stderr)
        assert process.stdout is not None and process.stderr is not None
        self._tg.start_soon(standby._pump, 0, process.stdout, standby.stdout_closed)
        self._tg.start_soon(standby._pump, 1, process.stderr, standby.stderr_closed)
        logger.info("standby pid %d: warming up", process.pid)
        return standby

    async def _hold(self, standby: Standby) -> bool:
        """Wait until it is taken (False) or gone (True, said in the log)."""
        async with anyio.create_task_group() as tg:

            async def taken() -> None:
                await standby.taken.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(taken)
            await standby.process.wait()
            tg.cancel_scope.cancel()
        if standby.taken.is_set():
            return False
        with anyio.move_on_after(1.0):  # its last words, for the log
            await standby.stderr_closed.wait()
        code = standby.process.returncode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        tail = standby.stderr_tail
        logger.warning(
            "standby pid %d %s before it was used (%s)%s",
            standby.pid,
            "ended" if standby.ready else "ended while importing",
            how,
            f": {tail[-1]}" if tail else "",
        )
        return True

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


def _drop(line: str) -> None:
    pass


async def _close(process: anyio.abc.Process) -> None:
    """End a standby: the end of its stdin is enough; SIGKILL after a grace."""
    if process.returncode is None:
        assert process.stdin is not None
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
        with anyio.move_on_after(CLOSE_GRACE):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    await process.aclose()
