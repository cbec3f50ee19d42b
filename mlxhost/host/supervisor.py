"""One supervisor per model worker: spawn it, wait until it is ready, respawn it when it dies.

    starting → ready → (restarting → ready)* → exhausted | closed

Respawns are budgeted: at most `restart_limit` in a rolling `restart_window`, and at most
`restart_limit` failed starts in a row (a load that keeps timing out outlasts any window); two
early exits in a row (within `early_exit` seconds of their spawn) wait `crash_backoff` before the
next try, so a model that cannot load does not spin. A worker that cannot even be spawned is a
failed start like any other, never the host's end. A launch mismatch (exit status 2 before ready,
or a ready line naming another socket or protocol version) is not tried again: every try would
end the same way. Once exhausted, the supervisor waits for an operator's restart.

Stopping drains in-flight requests, then SIGTERM, then SIGKILL after `stop_timeout`. Workers run
in a session of their own, so a terminal's Ctrl-C reaches the parent only, which drains them as
it does on SIGTERM; a worker draining on its own (`"status": "stopping"`) is alive, not hung.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mlxhost.config import ModelSpec, Settings
from mlxhost.host.events import EventHub
from mlxhost.host.launch import launch_record, lines, refusal, worker_command
from mlxhost.host.liveness import wait_hung
from mlxhost.host.upstream import WorkerClient
from mlxhost.host.worker_status import WorkerExit, WorkerState, WorkerUnavailable
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.launch import EXIT_BAD_LAUNCH, MemoryReading, ReadyLine, SessionProgress, parse_line

__all__ = ["Supervisor"]

logger = logging.getLogger("mlxhost.supervisor")

STDERR_KEPT = 20


class _Start:
    """What a starting worker has said: whether it is ready, and why its ready line is refused."""

    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.refused: str | None = None


class Supervisor:
    def __init__(
        self,
        spec: ModelSpec,
        model_path: Path,
        settings: Settings,
        socket_path: Path,
        events: EventHub | None = None,
        on_progress: Callable[[SessionProgress], None] | None = None,
    ) -> None:
        self.events = events or EventHub()
        self._on_progress = on_progress
        self.spec = spec
        self.id = spec.id
        self.model_path = model_path
        self.settings = settings
        self.socket_path = socket_path
        self.state = WorkerState.STARTING
        self.pid: int | None = None  # the running process's; None while none runs
        self.restarts = 0
        self.last_exit: WorkerExit | None = None
        self.memory: MemoryReading | None = None
        self.ready_seconds: float | None = None  # spawn to ready, last time
        self.ready_since: float | None = None
        self.in_flight = 0
        self.waiting = 0  # requests waiting in wait_ready for it to become ready
        self.retired = False  # the pool took it out of service (evicted or unloaded)
        self.last_used = time.monotonic()
        self.client: WorkerClient | None = None
        self._process: anyio.abc.Process | None = None
        self._changed = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._terminate = anyio.Event()  # end the current process (stop, or a planned restart)
        self._resume = anyio.Event()  # an operator asked an exhausted worker to try again
        self._closing = False
        self._planned_restart = False
        self._drain_on_stop = True
        self._closed = anyio.Event()
        self._respawns: list[float] = []
        self._failed_starts = 0  # exits in a row without having become ready
        self._back_at = 0.0
        self._hung_reason: str | None = None
        self._gave_up = ("its worker keeps exiting", "restart_limit_reached")  # why, and the code

    # -- for the pool and the proxy ------------------------------------------------------

    async def wait_ready(self) -> None:
        """Return once ready; wait through a first start; refuse if restarting, exhausted or stopping.

        Once it has seen the worker ready it returns without a checkpoint, so the caller can take
        its `lease` before anything else runs.
        """
        while True:
            if self._closing or self.state is WorkerState.CLOSED:
                raise WorkerUnavailable(
                    f"the model '{self.id}' was unloaded", code="model_unloaded", retry_after=1.0
                )
            if self.state is WorkerState.READY:
                return
            if self.state is WorkerState.RESTARTING:
                # When it should be back: what is left of the backoff, plus its last load time.
                eta = max(1.0, math.ceil(self._back_at - time.monotonic()))
                raise WorkerUnavailable(
                    f"the model '{self.id}' is restarting after its worker exited; try again in "
                    f"about {eta:.0f}s",
                    code="model_restarting",
                    retry_after=eta,
                )
            if self.state is WorkerState.EXHAUSTED:
                why, code = self._gave_up
                raise WorkerUnavailable(
                    f"the model '{self.id}' is not available: {why}. "
                    f"Fix the cause, then POST /admin/workers/{self.id}/restart or restart the host.",
                    code=code,
                )
            self.waiting += 1
            try:
                await self._changed.wait()
            finally:
                self.waiting -= 1

    @contextlib.contextmanager
    def lease(self) -> Iterator[int]:
        """Count a request as in flight (it blocks eviction and draining); yields the worker's pid.

        Take it right after `wait_ready` returned, with no await in between: the pool retires
        only workers with nothing in flight, so one found ready and leased at once stays routable.
        """
        self.in_flight += 1
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        self.last_used = time.monotonic()
        try:
            yield self.pid or 0
        finally:
            self.in_flight -= 1
            self.last_used = time.monotonic()
            if self.in_flight == 0:
                self._idle.set()

    async def exit_of(self, pid: int, wait: float) -> WorkerExit | None:
        """The exit of process `pid`, waiting up to `wait` seconds for the supervisor to see it."""
        with anyio.move_on_after(wait):
            while not (self.last_exit and self.last_exit.pid == pid):
                await self._changed.wait()
        return self.last_exit if self.last_exit and self.last_exit.pid == pid else None

    async def wait_replaced(self, pid: int | None) -> None:
        """Wait until a process other than `pid` is ready (or the worker gives up)."""
        while not (self.state is WorkerState.READY and self.pid != pid):
            if self.state in (WorkerState.EXHAUSTED, WorkerState.CLOSED):
                return
            await self._changed.wait()

    async def restart(self) -> None:
        """An operator's restart: drain and respawn now, with a fresh restart budget."""
        self._respawns.clear()
        self._failed_starts = 0
        if self.state is WorkerState.EXHAUSTED:
            self._set_state(WorkerState.STARTING)  # requests wait for it from now on
            self._resume.set()
        elif self.state is WorkerState.RESTARTING:
            self._terminate.set()  # skip the crash-loop wait
        elif self.state in (WorkerState.READY, WorkerState.STARTING):
            self._planned_restart = True
            self._terminate.set()

    def retire(self, drain: bool = True) -> None:
        """Take it out of service now, for the pool (eviction, idle unload); it stops soon after.

        From here on no request is routed to it: those waiting for it are refused as unloaded,
        and the pool starts a fresh worker for them. `stop` waits for the process to end.
        """
        self.retired = True
        self._begin_stop(drain)

    async def stop(self, drain: bool = True) -> None:
        """Stop for good (idempotent); returns once the process is gone."""
        self._begin_stop(drain)
        await self._closed.wait()

    def kill(self) -> None:
        """SIGKILL the worker process now, if one runs; never a pid that may have been reused."""
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "id": self.id,
            "model": self.spec.id,
            "state": self.state.value,
            "pid": self.pid,
            "socket": str(self.socket_path),
            "restarts": self.restarts,
            "in_flight": self.in_flight,
            "uptime_s": round(now - self.ready_since, 3) if self.ready_since else None,
            "ready_s": round(self.ready_seconds, 3) if self.ready_seconds is not None else None,
            "last_exit": self.last_exit.as_dict() if self.last_exit else None,
            "memory": self.memory.__dict__ if self.memory else None,
        }

    # -- the lifecycle task ----------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        early_exits = 0
        try:
            while not self._closing:
                exit = await self._run_process()
                if self._closing:
                    break
                if self._planned_restart:
                    self._planned_restart = False
                    self._set_state(WorkerState.STARTING)
                    continue
                early_exits = early_exits + 1 if exit.uptime < self.settings.early_exit else 0
                self._failed_starts = 0 if exit.ready else self._failed_starts + 1
                now = time.monotonic()
                self._respawns = [t for t in self._respawns if now - t < self.settings.restart_window]
                gave_up = self._gives_up(exit)
                if gave_up is not None:
                    await self._exhausted(exit, *gave_up)
                    early_exits = self._failed_starts = 0
                    continue
                delay = self.settings.crash_backoff if early_exits >= 2 else 0.0
                self._respawns.append(now)
                self.restarts += 1
                logger.warning(
                    "worker %s: restarting (attempt %d of %d in %gs%s) after %s",
                    self.id, len(self._respawns), self.settings.restart_limit, self.settings.restart_window,
                    f", waiting {delay:g}s: it keeps exiting early" if delay else "", exit.describe(),
                )
                self._back_at = time.monotonic() + delay + (self.ready_seconds or 1.0)
                self._set_state(WorkerState.RESTARTING)
                self.events.publish(
                    "worker.restarting",
                    worker=self.id,
                    attempt=len(self._respawns),
                    max=self.settings.restart_limit,
                    delay_ms=int(delay * 1000),
                )
                with anyio.move_on_after(delay):
                    await self._terminate.wait()  # a stop during the wait ends it
        finally:
            self._set_state(WorkerState.CLOSED)
            self._closed.set()

    def _gives_up(self, exit: WorkerExit) -> tuple[str, str] | None:
        """Why not to respawn after `exit`, with the error code requests get; None: respawn."""
        last = exit.describe()
        limit, window = self.settings.restart_limit, self.settings.restart_window
        if exit.permanent:
            return f"its worker cannot start ({last}); another try would end the same way", "worker_cannot_start"
        if len(self._respawns) >= limit:
            why = f"its worker exited {len(self._respawns) + 1} times within {window:g}s (last: {last})"
        elif self._failed_starts > limit:
            why = f"its worker failed to start {self._failed_starts} times in a row (last: {last})"
        else:
            return None
        return why, "restart_limit_reached"

    async def _exhausted(self, exit: WorkerExit, why: str, code: str) -> None:
        """Refuse requests, saying why, until an operator's restart (or a stop)."""
        logger.error(
            "worker %s: %s; not starting it again until POST /admin/workers/%s/restart", self.id, why, self.id
        )
        self._gave_up = (why, code)
        self._set_state(WorkerState.EXHAUSTED)
        self.events.publish("worker.exhausted", worker=self.id, reason=why, last_exit=exit.as_dict())
        self._resume = anyio.Event()
        await self._resume.wait()
        if not self._closing:
            self._set_state(WorkerState.STARTING)

    async def _run_process(self) -> WorkerExit:
        self._terminate = anyio.Event()
        self.socket_path.unlink(missing_ok=True)
        record = launch_record(self.spec, self.model_path, self.settings, self.socket_path)
        spawned = time.monotonic()
        try:
            # A session of its own: signals meant for the parent's terminal (Ctrl-C) skip it.
            process = await anyio.open_process(worker_command(self.settings), start_new_session=True)
        except (OSError, ValueError) as exc:  # no such file, not executable, EMFILE, bad command
            why = f"cannot start the worker: {excerpt(exc, MESSAGE_CHARS)}"
            return self._record_exit(None, None, spawned, False, why)
        self._process = process
        self.pid = process.pid
        logger.info("worker %s: spawned pid %d for %s", self.id, process.pid, self.model_path)
        self.events.publish("worker.spawned", worker=self.id, model=self.spec.id, pid=process.pid)
        stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_KEPT)
        start = _Start()
        exit_reason: str | None = None
        unsent: str | None = None  # why the launch record could not be written
        try:
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            stdout_done, stderr_done = anyio.Event(), anyio.Event()
            async with anyio.create_task_group() as readers:
                readers.start_soon(self._read_stdout, process.stdout, start, stdout_done)
                readers.start_soon(self._read_stderr, process.stderr, stderr_tail, stderr_done)
                try:
                    await process.stdin.send(record.encode())
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    # It ended (or shut its stdin) before reading the record; its stderr may say why.
                    unsent = f"could not send the launch record: {excerpt(exc, MESSAGE_CHARS)}"
                    process.kill()
                else:
                    with anyio.move_on_after(self.settings.load_timeout):
                        await _first_of(start.ready.wait, process.wait, self._terminate.wait)
                alive = process.returncode is None and not self._terminate.is_set()
                if start.refused is not None:
                    exit_reason = start.refused
                    if process.returncode is None:
                        logger.error("worker %s: %s; killing it", self.id, exit_reason)
                        process.kill()
                elif alive and start.ready.is_set():
                    await self._serve(process, spawned)
                elif alive and unsent is None:
                    exit_reason = f"did not become ready within {self.settings.load_timeout:g}s"
                    logger.error("worker %s: %s; killing it", self.id, exit_reason)
                    process.kill()
                if self._terminate.is_set() and process.returncode is None:
                    await self._end(process, drain=self._drain_on_stop or self._planned_restart)
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
                    process.kill()
                    await process.wait()
                await process.aclose()
                if self.client is not None:
                    await self.client.aclose()
                    self.client = None
            # Gone: no pid to show or signal, no memory it holds.
            self._process, self.pid, self.memory, self.ready_since = None, None, None, None
            exit = self._record_exit(
                process.pid,
                process.returncode,
                spawned,
                start.ready.is_set() and start.refused is None,
                exit_reason,
                stderr_tail,
                fallback=unsent,
                permanent=start.refused is not None,
            )
        return exit

    async def _serve(self, process: anyio.abc.Process, spawned: float) -> None:
        self.ready_seconds = time.monotonic() - spawned
        self.ready_since = self.last_used = time.monotonic()  # idle from now: a slow load is no idleness
        self.client = WorkerClient(str(self.socket_path))
        logger.info("worker %s: ready (pid %d) in %.2fs", self.id, process.pid, self.ready_seconds)
        self.events.publish(
            "worker.ready", worker=self.id, pid=process.pid, ready_ms=int(self.ready_seconds * 1000)
        )
        self._set_state(WorkerState.READY)
        await _first_of(process.wait, self._terminate.wait, lambda: self._watch_liveness(process))

    async def _watch_liveness(self, process: anyio.abc.Process) -> None:
        """Return (and so end the process) once the worker stops answering its health check.

        A worker that is stopped or wedged, not dead, would otherwise hold its clients forever.
        """
        settings = self.settings
        why = await wait_hung(self.socket_path, settings.health_interval, settings.health_timeout)
        if process.returncode is None:
            logger.error("worker %s: pid %d is hung (%s); killing it", self.id, process.pid, why)
            self._hung_reason = why
            process.kill()

    async def _end(self, process: anyio.abc.Process, drain: bool) -> None:
        if drain and self.in_flight:
            logger.info("worker %s: draining %d request(s)", self.id, self.in_flight)
            with anyio.move_on_after(self.settings.drain_timeout):
                await self._idle.wait()
        process.terminate()
        # The worker finishes what it still runs within its own shutdown_grace.
        with anyio.move_on_after(self.settings.shutdown_grace + self.settings.stop_timeout):
            await process.wait()
            return
        logger.warning("worker %s: did not stop after SIGTERM; killing it", self.id)
        process.kill()

    def _record_exit(
        self,
        pid: int | None,
        code: int | None,
        spawned: float,
        was_ready: bool,
        reason: str | None,
        stderr_tail: collections.deque[str] | None = None,
        fallback: str | None = None,
        permanent: bool = False,
    ) -> WorkerExit:
        signame = None
        if code is not None and code < 0:
            signame = signal.Signals(-code).name
            code = None
        if reason is None and not was_ready and stderr_tail:
            reason = stderr_tail[-1]
        if reason is None and self._hung_reason:
            reason = f"hung: {self._hung_reason}"
        self._hung_reason = None
        reason = reason or fallback
        # Exit status 2 before ready is the worker refusing its launch record (another version).
        permanent = permanent or (not was_ready and code == EXIT_BAD_LAUNCH)
        exit = WorkerExit(pid, code, signame, time.monotonic() - spawned, was_ready, reason, permanent)
        self.last_exit = exit
        planned = self._closing or self._planned_restart
        self.events.publish("worker.exited", worker=self.id, planned=planned, **exit.as_dict())
        log = logger.info if planned else logger.error
        if pid is None:
            log("worker %s: %s", self.id, exit.describe())
        else:
            log(
                "worker %s: pid %d exited (%s)%s",
                self.id, pid, exit.describe(), "" if was_ready else " before it was ready",
            )
        self._notify()
        return exit

    async def _read_stdout(
        self, stream: anyio.abc.ByteReceiveStream, start: _Start, done: anyio.Event
    ) -> None:
        log = logging.getLogger(f"mlxhost.worker.{self.id}")
        try:
            async for line in lines(stream):
                message = parse_line(line)
                if isinstance(message, ReadyLine):
                    if not start.ready.is_set():
                        start.refused = refusal(message, self.socket_path)
                        start.ready.set()
                elif isinstance(message, MemoryReading):
                    self.memory = message
                    self.events.publish("worker.memory", worker=self.id, **message.__dict__)
                elif isinstance(message, SessionProgress):
                    if self._on_progress is not None:
                        self._on_progress(message)
                else:
                    log.info("%s", line)
        finally:
            done.set()

    async def _read_stderr(
        self, stream: anyio.abc.ByteReceiveStream, tail: collections.deque[str], done: anyio.Event
    ) -> None:
        log = logging.getLogger(f"mlxhost.worker.{self.id}")
        try:
            async for line in lines(stream):
                tail.append(excerpt(line, MESSAGE_CHARS))  # the last one may become an exit's reason
                log.info("%s", line)
        finally:
            done.set()

    def _begin_stop(self, drain: bool) -> None:
        self._closing = True
        self._drain_on_stop = drain
        self._terminate.set()
        self._resume.set()
        self._notify()  # requests waiting for it to be ready learn it never will be

    def _set_state(self, state: WorkerState) -> None:
        self.state = state
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


async def _first_of(*waits: Any) -> None:
    async with anyio.create_task_group() as tg:

        async def run(wait: Any) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(run, wait)
