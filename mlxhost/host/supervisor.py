"""One supervisor per model worker: spawn it, wait until it is ready, respawn it when it dies.

    starting → ready → (restarting → ready)* → exhausted | closed

Respawns are budgeted: at most `restart_limit` in a rolling `restart_window`; two early exits in
a row (within `early_exit` seconds of their spawn) wait `crash_backoff` before the next try, so a
model that cannot load does not spin. Once exhausted, the supervisor waits for an operator's
restart. Stopping drains in-flight requests, then SIGTERM, then SIGKILL after `stop_timeout`.
"""

from __future__ import annotations

import collections
import logging
import math
import shlex
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx

from ..config import ModelSpec, Settings
from ..protocol import (
    LaunchRecord,
    MemoryReading,
    ReadyLine,
    SessionProgress,
    parse_line,
)
from .events import EventHub
from .upstream import WorkerClient
from .worker_status import WorkerExit, WorkerState, WorkerUnavailable

__all__ = ["Supervisor"]

logger = logging.getLogger("mlxhost.supervisor")

WORKER_OPTIONS = (
    "max_body_bytes",
    "default_max_tokens",
    "max_tokens_limit",
    "max_batch",
    "prefill_batch",
    "prefill_step",
    "prompt_cache_size",
    "prompt_cache_mb",
    "keepalive_seconds",
    "stream_interval",
    "shutdown_grace",
    "stall_timeout",
    "log_level",
)
STDERR_KEPT = 20
MAX_LINE = 1 << 20


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
        self.pid: int | None = None
        self.restarts = 0
        self.last_exit: WorkerExit | None = None
        self.memory: MemoryReading | None = None
        self.ready_seconds: float | None = None  # spawn to ready, last time
        self.ready_since: float | None = None
        self.in_flight = 0
        self.last_used = time.monotonic()
        self.client: WorkerClient | None = None
        self._changed = anyio.Event()
        self._exited = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._terminate = anyio.Event()  # end the current process (stop, or a planned restart)
        self._resume = anyio.Event()  # an operator asked an exhausted worker to try again
        self._closing = False
        self._planned_restart = False
        self._drain_on_stop = True
        self._closed = anyio.Event()
        self._respawns: list[float] = []
        self._back_at = 0.0
        self._hung_reason: str | None = None

    # -- for the pool and the proxy ------------------------------------------------------

    async def wait_ready(self) -> None:
        """Return once ready; wait through a first start; refuse while restarting or exhausted."""
        while True:
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
                raise WorkerUnavailable(
                    f"the model '{self.id}' stopped restarting: its worker exited "
                    f"{self.settings.restart_limit + 1} times within {self.settings.restart_window:g}s "
                    f"(last: {self.last_exit.describe() if self.last_exit else 'unknown'}). "
                    f"Fix the cause, then POST /admin/workers/{self.id}/restart or restart the host.",
                    code="restart_limit_reached",
                )
            if self.state is WorkerState.CLOSED:
                raise WorkerUnavailable(f"the model '{self.id}' was unloaded", code="model_unloaded", retry_after=1.0)
            await self._changed.wait()

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[int]:
        """Count a request as in flight (it blocks eviction and draining); yields the worker's pid."""
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
        if self.state is WorkerState.EXHAUSTED:
            self._set_state(WorkerState.STARTING)  # requests wait for it from now on
            self._resume.set()
        elif self.state is WorkerState.RESTARTING:
            self._terminate.set()  # skip the crash-loop wait
        elif self.state in (WorkerState.READY, WorkerState.STARTING):
            self._planned_restart = True
            self._terminate.set()

    async def stop(self, drain: bool = True) -> None:
        """Stop for good (idempotent); returns once the process is gone."""
        self._closing = True
        self._drain_on_stop = drain
        self._terminate.set()
        self._resume.set()
        await self._closed.wait()

    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "id": self.id,
            "model": self.spec.id,
            "state": self.state.value,
            "pid": self.pid if self.state is not WorkerState.CLOSED else None,
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
                await self._run_process()
                if self._closing:
                    break
                if self._planned_restart:
                    self._planned_restart = False
                    self._set_state(WorkerState.STARTING)
                    continue
                exit = self.last_exit
                assert exit is not None
                early_exits = early_exits + 1 if exit.uptime < self.settings.early_exit else 0
                now = time.monotonic()
                self._respawns = [t for t in self._respawns if now - t < self.settings.restart_window]
                if len(self._respawns) >= self.settings.restart_limit:
                    logger.error(
                        "worker %s: exited %d times within %gs (last: %s); not restarting it again "
                        "until POST /admin/workers/%s/restart",
                        self.id, len(self._respawns) + 1, self.settings.restart_window, exit.describe(), self.id,
                    )
                    self._set_state(WorkerState.EXHAUSTED)
                    self.events.publish("worker.exhausted", worker=self.id, last_exit=exit.as_dict())
                    self._resume = anyio.Event()
                    await self._resume.wait()
                    early_exits = 0
                    if not self._closing:
                        self._set_state(WorkerState.STARTING)
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

    async def _run_process(self) -> None:
        self._terminate = anyio.Event()
        self.socket_path.unlink(missing_ok=True)
        record = LaunchRecord(
            worker_id=self.id,
            socket=str(self.socket_path),
            model_path=str(self.model_path),
            model_id=self.spec.id,
            options=self._worker_options(),
        )
        spawned = time.monotonic()
        process = await anyio.open_process(self._command())
        self.pid = process.pid
        logger.info("worker %s: spawned pid %d for %s", self.id, process.pid, self.model_path)
        self.events.publish("worker.spawned", worker=self.id, model=self.spec.id, pid=process.pid)
        stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_KEPT)
        ready = anyio.Event()
        exit_reason: str | None = None
        try:
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            await process.stdin.send(record.encode())
            stdout_done, stderr_done = anyio.Event(), anyio.Event()
            async with anyio.create_task_group() as readers:
                readers.start_soon(self._read_stdout, process.stdout, ready, stdout_done)
                readers.start_soon(self._read_stderr, process.stderr, stderr_tail, stderr_done)
                with anyio.move_on_after(self.settings.load_timeout):
                    await _first_of(ready.wait, process.wait, self._terminate.wait)
                if ready.is_set() and process.returncode is None and not self._terminate.is_set():
                    await self._serve(process, spawned)
                elif process.returncode is None and not self._terminate.is_set():
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
            self.ready_since = None
            self._record_exit(process, spawned, ready.is_set(), exit_reason, stderr_tail)

    async def _serve(self, process: anyio.abc.Process, spawned: float) -> None:
        self.ready_seconds = time.monotonic() - spawned
        self.ready_since = time.monotonic()
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
        interval, timeout = self.settings.health_interval, self.settings.health_timeout
        if not interval:
            await anyio.sleep_forever()
        transport = httpx.AsyncHTTPTransport(uds=str(self.socket_path))
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as probe:
            while True:
                await anyio.sleep(interval)
                try:
                    with anyio.fail_after(timeout):
                        (await probe.get("/health")).raise_for_status()
                except (TimeoutError, httpx.HTTPError) as exc:
                    if process.returncode is not None:
                        return
                    why = f"no answer to a health check within {timeout:g}s"
                    if not isinstance(exc, TimeoutError):
                        why = f"its health check failed ({type(exc).__name__})"
                    logger.error("worker %s: pid %d is hung (%s); killing it", self.id, process.pid, why)
                    self._hung_reason = why
                    process.kill()
                    return

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
        process: anyio.abc.Process,
        spawned: float,
        was_ready: bool,
        reason: str | None,
        stderr_tail: collections.deque[str],
    ) -> None:
        code = process.returncode
        signame = None
        if code is not None and code < 0:
            signame = signal.Signals(-code).name
            code = None
        if reason is None and not was_ready and stderr_tail:
            reason = stderr_tail[-1]
        if reason is None and self._hung_reason:
            reason, self._hung_reason = f"hung: {self._hung_reason}", None
        exit = WorkerExit(process.pid, code, signame, time.monotonic() - spawned, was_ready, reason)
        self.last_exit = exit
        planned = self._closing or self._planned_restart
        self.events.publish("worker.exited", worker=self.id, planned=planned, **exit.as_dict())
        log = logger.info if planned else logger.error
        log(
            "worker %s: pid %d exited (%s)%s",
            self.id, process.pid, exit.describe(), "" if was_ready else " before it was ready",
        )
        self._changed.set()
        self._changed = anyio.Event()

    async def _read_stdout(
        self, stream: anyio.abc.ByteReceiveStream, ready: anyio.Event, done: anyio.Event
    ) -> None:
        log = logging.getLogger(f"mlxhost.worker.{self.id}")
        try:
            async for line in _lines(stream):
                message = parse_line(line)
                if isinstance(message, ReadyLine):
                    ready.set()
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
            async for line in _lines(stream):
                tail.append(line)
                log.info("%s", line)
        finally:
            done.set()

    def _command(self) -> list[str]:
        if self.settings.worker_command:
            return shlex.split(self.settings.worker_command)
        return [sys.executable, "-m", "mlxhost.worker"]

    def _worker_options(self) -> dict[str, Any]:
        options = {name: getattr(self.settings, name) for name in WORKER_OPTIONS}
        for name in ("max_batch", "max_tokens_limit"):
            if getattr(self.spec, name) is not None:
                options[name] = getattr(self.spec, name)
        return options

    def _set_state(self, state: WorkerState) -> None:
        self.state = state
        self._changed.set()
        self._changed = anyio.Event()


async def _lines(stream: anyio.abc.ByteReceiveStream) -> AsyncIterator[str]:
    pending = b""
    while True:
        try:
            chunk = await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            if pending:
                yield pending.decode(errors="replace")
            return
        *lines, pending = (pending + chunk).split(b"\n")
        if len(pending) > MAX_LINE:  # a runaway line is cut, not held without bound
            lines.append(pending)
            pending = b""
        for line in lines:
            yield line.decode(errors="replace").rstrip("\r")


async def _first_of(*waits: Any) -> None:
    async with anyio.create_task_group() as tg:

        async def run(wait: Any) -> None:
            await wait()
            tg.cancel_scope.cancel()

        for wait in waits:
            tg.start_soon(run, wait)
