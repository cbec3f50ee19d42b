"""One supervisor per model worker: spawn it, wait until it is ready, respawn it when it dies.

    starting → ready → (restarting → ready)* → exhausted | closed

This is the state machine, and what the pool and the relay see of a worker: whether it is ready,
its requests (`mlxhost.host.workers.requests`: in flight, waiting for it), its snapshot and its
events. One process at a time runs as a `WorkerProcess` (`mlxhost.host.workers.process`: spawn,
launch protocol, liveness, stop, exit), shaped as one interpreter or a group of ranks
(`mlxhost.host.workers.group`), a warm standby's when one is ready
(`mlxhost.host.workers.standby`), so that a respawn costs the model's load.
After an unplanned exit the `RestartBudget` (`mlxhost.host.workers.restart_budget`) says whether to
respawn, after what backoff, or to give up: a worker that cannot even be spawned is a failed start
like any other, never the host's end, and a launch mismatch is not tried again. Once exhausted,
the supervisor waits for an operator's restart, which also resets the budget.

Stopping drains in-flight requests, then SIGTERM, then SIGKILL after `stop_timeout`. A terminal's
Ctrl-C reaches the parent only, which drains workers as it does on SIGTERM; a worker draining on
its own (`"status": "stopping"`) is alive, not hung.

For a managed job, `paused()` holds the running worker paused (the lease's client is
`mlxhost.host.workers.pause_lease`) and the `spawn_gate` holds back every spawn, so that no worker computes
or loads while the job has the machine. What the admin API shows of a worker is built in
`mlxhost.host.workers.snapshot`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import anyio.abc

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.workers.group import shape_of
from mlxhost.host.workers.launch import launch_record
from mlxhost.host.workers.pause_lease import pause_lease
from mlxhost.host.workers.process import WorkerProcess
from mlxhost.host.workers.requests import Requests
from mlxhost.host.workers.restart_budget import GiveUp, RestartBudget
from mlxhost.host.workers.snapshot import rank_records, worker_record
from mlxhost.host.workers.standby import StandbyPool
from mlxhost.host.workers.status import WorkerExit, WorkerState, WorkerUnavailable
from mlxhost.host.workers.upstream import WorkerClient
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin import (
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRecord,
    WorkerRestarting,
    WorkerSpawned,
)
from mlxhost.wire.launch import MemoryReading, SessionProgress, SpeculationReading

__all__ = ["Supervisor"]

logger = logging.getLogger("mlxhost.supervisor")

# Beyond drain_timeout, which the worker's running generations get: its answer, and freeing the cache.
PAUSE_MARGIN = 5.0


class Supervisor:
    def __init__(
        self,
        spec: ModelSpec,
        model_path: Path,
        settings: Settings,
        socket_path: Path,
        events: EventHub | None = None,
        on_progress: Callable[[SessionProgress], None] | None = None,
        *,
        spawn_gate: Callable[[], Awaitable[None]] | None = None,
        standby: StandbyPool | None = None,
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
        self.speculation: SpeculationReading | None = None  # its draft totals, once it drafted
        self.ready_seconds: float | None = None  # spawn to ready, last time
        self.ready_since: float | None = None
        self.requests = Requests()  # in flight on it, waiting in wait_ready for it, when last used
        self.retired = False  # the pool took it out of service (evicted or unloaded)
        self.client: WorkerClient | None = None
        self.paused_now = False  # a `paused()` block holds the running worker paused
        # Awaited before every spawn: returns once a process may start (no job holds the machine).
        self._spawn_gate = spawn_gate
        self._standby = standby  # warm interpreters: a respawn takes one rather than spawning
        self._worker: WorkerProcess | None = None  # the process running now
        self._changed = anyio.Event()
        self._terminate = anyio.Event()  # end the current process (stop, or a planned restart)
        self._resume = anyio.Event()  # an operator asked an exhausted worker to try again
        self._closing = False
        self._stopping = anyio.Event()  # set with _closing: ends a wait at the spawn gate
        self._planned_restart = False
        self._drain_on_stop = True
        self._closed = anyio.Event()
        self._budget = RestartBudget.from_settings(settings)
        self._back_at = 0.0
        self._backoff_until = 0.0  # a respawn held back by the crash-loop backoff waits until then
        self._gave_up = GiveUp("its worker keeps exiting", "restart_limit_reached")

    # -- for the pool and the proxy ------------------------------------------------------

    async def wait_ready(self) -> None:
        """Return once ready; wait through a start or a respawn; refuse while the crash-loop backoff
        holds a respawn back, and if exhausted or stopping.

        A respawn takes about a model load (a warm standby takes over): a request waits for it
        rather than sending its client into a retry loop. A backoff lasts seconds, and it means
        the worker keeps dying: that is refused at once, with when to come back.

        Once it has seen the worker ready it returns without a checkpoint, so the caller can take
        its `lease` before anything else runs.
        """
        while True:
            if self._closing or self.state is WorkerState.CLOSED:
                raise WorkerUnavailable.unloaded(self.id)
            if self.state is WorkerState.READY:
                return
            if self.state is WorkerState.RESTARTING and time.monotonic() < self._backoff_until:
                # When it should be back: what is left of the backoff, plus its last load time.
                eta = max(1.0, math.ceil(self._back_at - time.monotonic()))
                raise WorkerUnavailable.restarting(self.id, eta)
            if self.state is WorkerState.EXHAUSTED:
                raise WorkerUnavailable.exhausted(self.id, self._gave_up.why, self._gave_up.code)
            await self.requests.wait(self._changed)

    @contextlib.contextmanager
    def lease(self) -> Iterator[int]:
        """Count a request as in flight (it blocks eviction and draining); yields the worker's pid.

        Take it right after `wait_ready` returned, with no await in between: the pool retires
        only workers with nothing in flight, so one found ready and leased at once stays routable.
        """
        with self.requests.lease():
            yield self.pid or 0

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

    async def restart(self, drain: bool = True) -> None:
        """An operator's restart: drain (or, without `drain`, kill) and respawn now, with a fresh
        restart budget."""
        self._budget.reset()
        if not drain and self._worker is not None:
            self._worker.at_once = True
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
        if self._worker is not None:
            self._worker.kill()

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[MemoryReading | None]:
        """Hold the worker paused for the block; yields its memory once paused, or None if none runs.

        Its running generations finish first (nothing is cancelled), then it takes in nothing new
        and gives MLX's cached memory back; leaving the block resumes it. A process still loading
        is waited for, then paused. With no process (stopped, restarting, held at the spawn gate,
        or gone while asked) nothing computes or holds MLX memory, so that yields None: the job
        may run. Raises `WorkerUnavailable` when it is not paused within `drain_timeout` plus a
        margin, or refuses: a job must not share the machine with a worker still computing.
        A worker that dies while paused ends the pause; leaving the block is then quiet.
        """
        while self.client is None and self._worker is not None:  # spawned, not ready yet
            await self._changed.wait()
        if self.client is None:
            yield None
            return
        async with pause_lease(self.client, self.id, self.settings.drain_timeout + PAUSE_MARGIN) as reading:
            if reading is None:
                yield None
                return
            self.paused_now = True
            logger.info("worker %s: paused", self.id)
            try:
                yield reading
            finally:
                self.paused_now = False
                logger.info("worker %s: resumed", self.id)

    def snapshot(self) -> WorkerRecord:
        return worker_record(self, self._worker.shape.ranks if self._worker is not None else [])

    # -- the lifecycle task ----------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            while not self._closing:
                if not await self._wait_spawn_gate():
                    break
                exit = await self._run_process()
                if self._closing:
                    break
                if self._planned_restart:
                    self._planned_restart = False
                    self._set_state(WorkerState.STARTING)
                    continue
                verdict = self._budget.after_exit(exit)
                if isinstance(verdict, GiveUp):
                    await self._exhausted(exit, verdict)
                    continue
                delay = verdict.delay
                self.restarts += 1
                logger.warning(
                    "worker %s: restarting (attempt %d of %d in %gs%s) after %s",
                    self.id, verdict.attempt, self.settings.restart_limit, self.settings.restart_window,
                    f", waiting {delay:g}s: it keeps exiting early" if delay else "", exit.describe(),
                )
                self._back_at = time.monotonic() + delay + (self.ready_seconds or 1.0)
                self._backoff_until = time.monotonic() + delay
                self._set_state(WorkerState.RESTARTING)
                self.events.publish(
                    WorkerRestarting(
                        worker=self.id,
                        attempt=verdict.attempt,
                        max=self.settings.restart_limit,
                        delay_ms=int(delay * 1000),
                    )
                )
                with anyio.move_on_after(delay):
                    await self._terminate.wait()  # a stop during the wait ends it
                self._backoff_until = 0.0
        finally:
            self._set_state(WorkerState.CLOSED)
            self._closed.set()

    async def _exhausted(self, exit: WorkerExit, gave_up: GiveUp) -> None:
        """Refuse requests, saying why, until an operator's restart (or a stop)."""
        logger.error(
            "worker %s: %s; not starting it again until POST /admin/workers/%s/restart",
            self.id, gave_up.why, self.id,
        )
        self._gave_up = gave_up
        self._set_state(WorkerState.EXHAUSTED)
        self.events.publish(WorkerExhausted(worker=self.id, reason=gave_up.why, last_exit=exit.record()))
        self._resume = anyio.Event()
        await self._resume.wait()
        if not self._closing:
            self._set_state(WorkerState.STARTING)

    async def _wait_spawn_gate(self) -> bool:
        """Before a spawn: wait until the gate lets a process start; False if stopped meanwhile.

        The state stays what it was (starting, restarting): requests wait, or are told when to
        come back, as they would through a slow load.
        """
        gate = self._spawn_gate
        if gate is not None and not self._closing:
            async with anyio.create_task_group() as tg:

                async def stop_waiting() -> None:
                    await self._stopping.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(stop_waiting)
                await gate()
                tg.cancel_scope.cancel()
        self._planned_restart = False  # an operator's restart asked for while none ran: this spawn
        return not self._closing

    async def _run_process(self) -> WorkerExit:
        self._terminate = anyio.Event()
        self.socket_path.unlink(missing_ok=True)
        record = launch_record(self.spec, self.model_path, self.settings, self.socket_path)
        worker = self._worker = WorkerProcess(
            self.id,
            self.socket_path,
            self.settings,
            on_spawned=self._spawned,
            on_ready=self._ready,
            on_memory=self._memory_read,
            on_progress=self._on_progress,
            on_speculation=self._speculation_read,
            drain=self._drain,
            shape=shape_of(self.spec.group),
            standby=self._standby,
        )
        try:
            await worker.run(record, self._terminate)
        finally:
            if self.client is not None:
                with anyio.CancelScope(shield=True):
                    await self.client.aclose()
                self.client = None
            # Gone: no pid to show or signal, no memory it holds; the next process counts anew.
            self._worker, self.pid, self.memory, self.ready_since = None, None, None, None
            self.speculation = None
            self.paused_now = False  # a pause ends with the process it paused
            assert worker.exit is not None  # `run` sets it, even when cancelled
            self._exited(worker.exit)
        return worker.exit

    # -- what the running process reports ------------------------------------------------------

    def _spawned(self, pid: int) -> None:
        self.pid = pid
        logger.info("worker %s: spawned pid %d for %s", self.id, pid, self.model_path)
        self.events.publish(WorkerSpawned(worker=self.id, model=self.spec.id, pid=pid))

    def _ready(self, pid: int, seconds: float) -> None:
        self.ready_seconds = seconds
        # Idle from now: a slow load is no idleness.
        self.ready_since = self.requests.last_used = time.monotonic()
        self.client = WorkerClient(str(self.socket_path))
        logger.info("worker %s: ready (pid %d) in %.2fs", self.id, pid, seconds)
        ranks = rank_records(self._worker.shape.ranks if self._worker is not None else [])
        self.events.publish(WorkerReady(worker=self.id, pid=pid, ready_ms=int(seconds * 1000), ranks=ranks))
        self._set_state(WorkerState.READY)

    def _memory_read(self, reading: MemoryReading) -> None:
        self.memory = reading
        self.events.publish(WorkerMemory(worker=self.id, memory=reading))

    def _speculation_read(self, reading: SpeculationReading) -> None:
        self.speculation = reading  # read by snapshots (admin state, /metrics), not announced

    async def _drain(self) -> None:
        """Before the process is asked to stop: let its requests finish, unless stopping at once."""
        if (self._drain_on_stop or self._planned_restart) and self.requests.in_flight:
            logger.info("worker %s: draining %d request(s)", self.id, self.requests.in_flight)
            await self.requests.drain(self.settings.drain_timeout)

    def _exited(self, exit: WorkerExit) -> None:
        self.last_exit = exit
        planned = self._closing or self._planned_restart
        self.events.publish(WorkerExited(worker=self.id, planned=planned, exit=exit.record()))
        log = logger.info if planned else logger.error
        if exit.pid is None:
            log("worker %s: %s", self.id, exit.describe())
        else:
            log(
                "worker %s: pid %d exited (%s)%s",
                self.id, exit.pid, exit.describe(), "" if exit.ready else " before it was ready",
            )
        self._notify()

    def _begin_stop(self, drain: bool) -> None:
        self._closing = True
        self._stopping.set()
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
