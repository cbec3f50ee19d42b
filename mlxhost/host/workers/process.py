"""One worker process, from spawn to exit: start it, hear it out, watch it, stop it, say how it ended.

The process is a warm standby when the `StandbyPool` has one ready (`mlxhost.host.workers.standby`:
its imports done, it waits for its record), else a fresh spawn; from then on both are the same. It
gets its launch record on stdin and answers on stdout (`mlxhost.wire.launch`): a ready line, then
memory readings, draft totals and session progress, which go to the supervisor's callbacks; any
other line, on stdout or stderr, is the worker's log. A ready line that does not answer the launch
record, or none within `load_timeout`, gets the process killed. Once ready, it is watched until it
exits, stops answering its health check (then it is killed as hung), or the supervisor asks it to
end. What a group of ranks under `mlx.launch` does its own way (its command, its ready line, how it
is signalled, how its exit reads) is its `Shape`'s (`mlxhost.host.workers.group`).

Ending it: the supervisor's `drain` first, then SIGTERM, then SIGKILL after its `shutdown_grace`
and `stop_timeout`. Workers run in a session of their own, so a terminal's Ctrl-C reaches the
parent only. The exit is classified as a `WorkerExit`: the signal or status, the reason (a refused
ready line, a timeout, the worker's last words on stderr, a hang), and whether it is permanent
(exit status 2 before ready is a launch mismatch that no retry would change).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mlxhost.config import Settings
from mlxhost.host.workers.group import Shape
from mlxhost.host.workers.launch import lines, refusal, worker_command
from mlxhost.host.workers.liveness import wait_hung
from mlxhost.host.workers.standby import StandbyPool
from mlxhost.host.workers.status import WorkerExit
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.launch import (
    EXIT_BAD_LAUNCH,
    LaunchRecord,
    MemoryReading,
    ReadyLine,
    SessionProgress,
    SpeculationReading,
    StandbyLine,
    parse_line,
)

__all__ = ["STDERR_KEPT", "WorkerProcess", "exit_of"]

# The supervisor's logger: these lines read as the supervisor's, as they always have.
logger = logging.getLogger("mlxhost.supervisor")

STDERR_KEPT = 20


class _Start:
    """What a starting worker has said: whether it is ready, and why its ready line is refused."""

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.refused: str | None = None


def exit_of(
    pid: int | None,
    code: int | None,
    uptime: float,
    was_ready: bool,
    reason: str | None,
    stderr_tail: Iterable[str] = (),
    hung: str | None = None,
    fallback: str | None = None,
    permanent: bool = False,
) -> WorkerExit:
    """How a process ended, from its return code (negative: the signal) and what was seen of it.

    The reason is the first known of: the one given, the last stderr line of a worker that never
    became ready, its hang, the fallback.
    """
    signame = None
    if code is not None and code < 0:
        signame = signal.Signals(-code).name
        code = None
    tail = list(stderr_tail)
    if reason is None and not was_ready and tail:
        reason = tail[-1]
    if reason is None and hung:
        reason = f"hung: {hung}"
    reason = reason or fallback
    # Exit status 2 before ready is the worker refusing its launch record (another version).
    permanent = permanent or (not was_ready and code == EXIT_BAD_LAUNCH)
    return WorkerExit(pid, code, signame, uptime, was_ready, reason, permanent)


class WorkerProcess:
    """One spawn of a model's worker. `run` returns its exit; `kill` ends it at once."""

    def __init__(
        self,
        worker_id: str,
        socket_path: Path,
        settings: Settings,
        *,
        on_spawned: Callable[[int], None],
        on_ready: Callable[[int, float], None],
        on_memory: Callable[[MemoryReading], None],
        on_progress: Callable[[SessionProgress], None] | None,
        on_speculation: Callable[[SpeculationReading], None] | None = None,
        drain: Callable[[], Awaitable[None]],
        shape: Shape,
        standby: StandbyPool | None = None,
    ) -> None:
        self.id = worker_id
        self.socket_path = socket_path
        self.settings = settings
        self._on_spawned = on_spawned  # its pid, once it runs
        self._on_ready = on_ready  # its pid and the seconds it took, once its ready line is accepted
        self._on_memory = on_memory
        self._on_speculation = on_speculation
        self._on_progress = on_progress
        self._drain = drain  # before it is asked to stop: let its requests finish
        self._standby = standby  # warm processes to take instead of spawning
        self.process: anyio.abc.Process | None = None  # while it runs
        self.exit: WorkerExit | None = None  # once it ended (set even if `run` is cancelled)
        self._hung: str | None = None  # why the liveness watch killed it
        # One interpreter or a group of ranks: how it is started, signalled and read.
        self.shape = shape
        self.at_once = False  # asked to end without a drain or a grace (an operator's `drain=false`)

    def kill(self) -> None:
        """SIGKILL the process now, if it runs; never a pid that may have been reused."""
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.shape.kill(process)

    async def run(self, record: LaunchRecord, terminate: anyio.Event) -> WorkerExit:
        """Spawn it and serve until it exits; `terminate` asks it to end (drained, then signalled)."""
        spawned = time.monotonic()
        standby = self._standby.take() if self._standby is not None and self.shape.takes_standby else None
        if standby is not None:
            process = standby.process
            logger.info("worker %s: takes the warm standby pid %d", self.id, process.pid)
        else:
            command: list[str] = []
            try:
                command = worker_command(self.settings)
                command, env = self.shape.command(command)
                # A session of its own: signals meant for the parent's terminal (Ctrl-C) skip it.
                process = await anyio.open_process(command, start_new_session=True, env=env)
            except (OSError, ValueError) as exc:  # no such file, not executable, EMFILE, bad command
                if isinstance(exc, OSError) and exc.errno and exc.filename is None and command:
                    # uvloop's spawn error does not say which file it could not run; asyncio's does.
                    exc = OSError(exc.errno, exc.strerror, command[0])
                why = f"cannot start the worker: {excerpt(exc, MESSAGE_CHARS)}"
                self.exit = exit_of(None, None, time.monotonic() - spawned, False, why)
                return self.exit
        self.process = process
        self._on_spawned(process.pid)
        stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_KEPT)
        start = _Start()
        exit_reason: str | None = None
        unsent: str | None = None  # why the launch record could not be written
        try:
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            log = logging.getLogger(f"mlxhost.worker.{self.id}")
            on_stdout = functools.partial(self._stdout_line, start, log)
            on_stderr = functools.partial(self._stderr_line, stderr_tail, log)
            async with anyio.create_task_group() as readers:
                if standby is None:
                    stdout_done, stderr_done = anyio.Event(), anyio.Event()
                    readers.start_soon(_read, process.stdout, on_stdout, stdout_done)
                    readers.start_soon(_read, process.stderr, on_stderr, stderr_done)
                else:
                    # Its pumps carry on in the standby pool, into these sinks from the next line.
                    standby.attach(on_stdout, on_stderr)
                    stdout_done, stderr_done = standby.stdout_closed, standby.stderr_closed
                try:
                    await process.stdin.send(record.encode())
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    # It ended (or shut its stdin) before reading the record; its stderr may say why.
                    unsent = f"could not send the launch record: {excerpt(exc, MESSAGE_CHARS)}"
                    process.kill()
                else:
                    with anyio.move_on_after(self.settings.load_timeout):
                        await _first_of(start.ready.wait, process.wait, terminate.wait)
                alive = process.returncode is None and not terminate.is_set()
                if start.refused is not None:
                    exit_reason = start.refused
                    if process.returncode is None:
                        logger.error("worker %s: %s; killing it", self.id, exit_reason)
                        process.kill()
                elif alive and start.ready.is_set():
                    self._on_ready(process.pid, time.monotonic() - spawned)
                    await _first_of(process.wait, terminate.wait, lambda: self._watch_liveness(process))
                elif alive and unsent is None:
                    exit_reason = f"did not become ready within {self.settings.load_timeout:g}s"
                    logger.error("worker %s: %s; killing it", self.id, exit_reason)
                    process.kill()
                if terminate.is_set() and process.returncode is None:
                    await self._stop(process)
                await process.wait()
                # Read its last words (the reason it gave on stderr); its pipes close with it,
                # unless something it started holds them open.
                with anyio.move_on_after(1.0):
                    await stdout_done.wait()
                    await stderr_done.wait()
                readers.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    self.shape.kill(process)
                    await process.wait()
                await process.aclose()
            self.shape.reap(process.pid)
            self.process = None
            code, rank_reason = self.shape.exit_code(process.returncode)
            self.exit = exit_of(
                process.pid,
                code,
                time.monotonic() - spawned,
                start.ready.is_set() and start.refused is None,
                exit_reason or rank_reason,
                stderr_tail,
                hung=self._hung,
                fallback=unsent,
                permanent=start.refused is not None,
            )
        return self.exit

    async def _watch_liveness(self, process: anyio.abc.Process) -> None:
        """Return (and so end the process) once the worker stops answering its health check.

        A worker that is stopped or wedged, not dead, would otherwise hold its clients forever.
        """
        settings = self.settings
        why = await wait_hung(self.socket_path, settings.health_interval, settings.health_timeout)
        if process.returncode is None:
            logger.error("worker %s: pid %d is hung (%s); killing it", self.id, process.pid, why)
            self._hung = why
            self.shape.kill(process)

    async def _stop(self, process: anyio.abc.Process) -> None:
        if self.at_once:
            # Its running requests end with an error now, as documented, instead of within
            # drain_timeout plus its own shutdown_grace.
            self.shape.kill(process)
            await process.wait()
            return
        await self._drain()
        self.shape.terminate(process)
        # The worker finishes what it still runs within its own shutdown_grace.
        with anyio.move_on_after(self.settings.shutdown_grace + self.settings.stop_timeout):
            await process.wait()
            return
        logger.warning("worker %s: did not stop after SIGTERM; killing it", self.id)
        self.shape.kill(process)

    def _stdout_line(self, start: _Start, log: logging.Logger, line: str) -> None:
        message = parse_line(line)
        if isinstance(message, ReadyLine):
            if not start.ready.is_set():
                start.refused = refusal(message, self.socket_path)
                if start.refused is None:
                    start.refused = self.shape.accept(message)
                start.ready.set()
        elif isinstance(message, MemoryReading):
            self._on_memory(message)
        elif isinstance(message, SpeculationReading):
            if self._on_speculation is not None:
                self._on_speculation(message)
        elif isinstance(message, SessionProgress):
            if self._on_progress is not None:
                self._on_progress(message)
        elif isinstance(message, StandbyLine):
            pass  # its imports are done: a spawned worker says so before it reads its record
        else:
            log.info("%s", line)

    def _stderr_line(self, tail: collections.deque[str], log: logging.Logger, line: str) -> None:
        tail.append(excerpt(line, MESSAGE_CHARS))  # the last one may become an exit's reason
        self.shape.stderr_line(line)
        log.info("%s", line)


async def _read(stream: anyio.abc.ByteReceiveStream, sink: Callable[[str], None], done: anyio.Event) -> None:
    try:
        async for line in lines(stream):
            sink(line)
    finally:
        done.set()


async def _first_of(*waits: Any) -> None:
    async with anyio.create_task_group() as tg:

        async def run(wait: Any) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(run, wait)
