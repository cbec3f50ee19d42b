"""The job runner: takes submissions, runs them one at a time under the exclusive lease, keeps them.

    queued → running → succeeded | failed | cancelled | interrupted

A job waits in line (FIFO) for the execution coordinator's exclusive lease: sessions already
running finish first, later ones wait behind it. Holding it, the runner pauses every resident
worker (each through a lease on the worker's own socket, so a host that dies releases it), runs
the job's process (`JobProcess`), follows its log for progress, and on success registers its
output as a model the pool serves at once. Then the workers resume and the lease goes back.

Everything durable is under the state directory: the store (`jobs.db`), and one folder per job
holding its spec, its log, the process's own output (`stderr.log`) and its result (`output/`).
One host owns a state directory at a time (an advisory lock on the directory itself, which no
one deletes by accident as they might a lock file); a second host on the same one runs without
jobs rather than let two runners mark each other's jobs interrupted.

The store failing (a full disk, mostly) never ends the host: what could not be written is kept in
memory (the API shows it) and written once the store takes writes again; `problem` says why
meanwhile, and a submission is refused (507 when the disk is full) rather than half recorded.

At start, a job the store says is queued or running belongs to a host that is gone: it becomes
`interrupted` (its process, if one is somehow still alive, is killed first). Never resumed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import secrets
import signal
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.jobs.folder import JobFolder, fold_progress
from mlxhost.host.jobs.models import job_model
from mlxhost.host.jobs.process import JobProcess, process_alive
from mlxhost.host.jobs.requests import resolve
from mlxhost.host.jobs.store import JobStore, StoreFailed, now_ms
from mlxhost.host.jobs.tail import TailSlots, tail
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.workers.pool import ModelPool, UnknownModel
from mlxhost.host.workers.status import WorkerUnavailable
from mlxhost.model_spec import ModelSpec
from mlxhost.wire.admin import ExecutionChanged, JobFinished, JobProgressed, JobQueued, JobStarted
from mlxhost.wire.admin.job_requests import JobRequest
from mlxhost.wire.admin.jobs import (
    INTERRUPTED_BY_EXIT,
    JobLogEvent,
    JobProgress,
    JobRecord,
    JobResult,
    JobState,
    LaunchedJob,
)
from mlxhost.wire.errors import AdmissionRefused
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.layout import JOBS_DB, JOBS_DIR
from mlxhost.wire.layout import state_dir as resolve_state_dir

__all__ = ["CannotRecord", "JobConflict", "JobRunner", "UnknownJob"]

logger = logging.getLogger("mlxhost.jobs")

MAX_QUEUED = 16  # jobs waiting to run; more are refused with 429
QUEUE_RETRY_AFTER_S = 60  # a job in line takes minutes: a client need not ask again sooner
MAX_TAILS = 16  # SSE tails of job logs open at once; more are refused with 429
STORE_CHECK = 5.0  # seconds between looks at the store: deleted under the host? writable again?
RECENT = 20  # jobs the state snapshot carries
PROGRESS_EVERY = 1.0  # seconds between progress writes to the store and the event stream
LOG_POLL = 0.5  # seconds between looks at a running job's log for progress
HOST_STOPPED = "the host stopped while the job ran"


class UnknownJob(Exception):
    pass


class JobConflict(Exception):
    """The job is not in a state that allows this (e.g. cancelling a finished job)."""


class CannotRecord(Exception):
    """A submission the state directory cannot take; `full` when for want of space."""

    def __init__(self, message: str, *, full: bool) -> None:
        super().__init__(message)
        self.full = full


class JobRunner:
    def __init__(
        self,
        settings: Settings,
        state_dir: Path,
        store: JobStore,
        pool: ModelPool,
        coordinator: ExecutionCoordinator,
        events: EventHub,
    ) -> None:
        self.settings = settings
        self.state_dir = state_dir
        self.store = store
        self.pool = pool
        self.coordinator = coordinator
        self.events = events
        self._jobs_dir = state_dir / JOBS_DIR
        # The line: ids waiting to run, FIFO; a job cancelled in line leaves it, and its slot, at once.
        self._line: deque[str] = deque()
        self._lined = anyio.Event()  # set when an id joins the line
        self._current: str | None = None
        self.tails = TailSlots(MAX_TAILS)
        self._problem: str | None = None
        self._recovered = False  # the previous host's jobs read back (a store that cannot be read: not yet)
        # Jobs not yet ended, as last known: what a record falls back on when the store cannot be read.
        self._live: dict[str, JobRecord] = {}
        # Records the store could not take: (the record as it is now, the changes still to write).
        self._unsaved: dict[str, tuple[JobRecord, dict[str, Any]]] = {}
        self._waiting_scope: anyio.CancelScope | None = None  # the current job's wait for the lease
        self._cancel = anyio.Event()  # the current job was asked to stop

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: Settings, pool: ModelPool, coordinator: ExecutionCoordinator, events: EventHub
    ) -> AsyncIterator[JobRunner | None]:
        """The runner for `settings.state_dir`, or None when another host owns that directory."""
        state_dir = resolve_state_dir(settings)
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with _owned(state_dir) as owned:
            if not owned:
                logger.warning(
                    "another mlxhost owns the state directory %s: jobs are off for this host "
                    "(give it its own with --state-dir)",
                    state_dir,
                )
                yield None
                return
            store = JobStore(state_dir / JOBS_DB)
            try:
                runner = cls(settings, state_dir, store, pool, coordinator, events)
                runner._recover()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(runner._run_queue)
                    tg.start_soon(runner._watch_store)
                    try:
                        yield runner
                    finally:
                        tg.cancel_scope.cancel()
                # The running job ended itself (see _execute); those still in line never will run.
                for job_id in [i for i, r in runner._live.items() if r.job_state is JobState.QUEUED]:
                    runner._finish(job_id, JobState.INTERRUPTED, "the host stopped before the job ran")
                if runner._unsaved:
                    logger.warning(
                        "the job store could not record how %d jobs ended (%s): %s",
                        len(runner._unsaved),
                        ", ".join(runner._unsaved),
                        runner._problem,
                    )
            finally:
                store.close()

    @property
    def problem(self) -> str | None:
        """Why jobs cannot be recorded now (the state directory is full, say); None when they can."""
        return self._problem

    # -- for the admin routes ----------------------------------------------------------------

    async def submit(self, request: JobRequest) -> JobRecord:
        """Check, record and queue a job.

        Raises InvalidRequest (400), AdmissionRefused (429) or CannotRecord; a refused job leaves
        no record and no folder behind.
        """
        resolved = await resolve(request, self._find_model, self._find_job)  # reads a dataset in a thread
        # From here to the end, no await: the line cannot change under the check.
        if len(self._line) >= MAX_QUEUED:
            raise AdmissionRefused(
                f"{len(self._line)} jobs are already waiting to run, the most the queue holds "
                f"({MAX_QUEUED}); try again later",
                code="queue_full",
                headers={"retry-after": str(QUEUE_RETRY_AFTER_S)},
            )
        job_id = _new_id()
        folder = self._folder(job_id)
        options = {**resolved.options, "model_path": str(resolved.model_path)}
        launched = LaunchedJob(
            version=LaunchedJob.VERSION,
            id=job_id,
            kind=resolved.kind.value,
            model_path=str(resolved.model_path),
            output=str(folder.output),
            log=str(folder.log),
            options=options,
            adapter_path=None if resolved.adapter_path is None else str(resolved.adapter_path),
        )
        record = JobRecord(
            id=job_id,
            kind=resolved.kind.value,
            model=resolved.model.id,
            state=JobState.QUEUED.value,
            options=options,
            progress=None,
            result=None,
            error=None,
            pid=None,
            created_at=now_ms(),
            started_at=None,
            ended_at=None,
        )
        try:
            folder.path.mkdir(parents=True, mode=0o700)
            folder.spec.write_text(json.dumps(launched.to_json(), indent=2))
            self._flush()  # what earlier jobs could not write goes first
            self.store.create(record)
        except (OSError, StoreFailed) as exc:
            folder.delete()
            raise self._cannot_record(exc) from None
        self._saved()
        self._live[job_id] = record
        self._line.append(job_id)
        self._lined.set()
        self.events.publish(JobQueued(job=job_id, kind=record.kind, model=record.model))
        return record

    def _cannot_record(self, exc: OSError | StoreFailed) -> CannotRecord:
        if isinstance(exc, StoreFailed):
            self._failed(exc)
            full = exc.full
        else:
            full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if full:
            return CannotRecord(
                f"the state directory {self.state_dir} is full: the job cannot be recorded "
                "(free space there, then submit it again)",
                full=True,
            )
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        return CannotRecord(
            f"the state directory {self.state_dir} cannot be written: {excerpt(why, MESSAGE_CHARS)}", full=False
        )

    def get(self, job_id: str) -> JobRecord:
        """The job's record; UnknownJob, or StoreFailed when the store cannot be read."""
        record = self._find_job(job_id)
        if record is None:
            raise UnknownJob(job_id)
        return record

    def peek(self, job_id: str) -> JobRecord | None:
        """The job's record as best known, for a reader that must not fail (a tail): the store, else memory."""
        try:
            return self._find_job(job_id)
        except StoreFailed:
            return self._live.get(job_id)

    def all(self) -> list[JobRecord]:
        """Newest first; StoreFailed when the store cannot be read."""
        return self._overlaid(self.store.newest())

    def recent(self) -> list[JobRecord]:
        """The newest few, for the state snapshot: what memory knows when the store cannot be read."""
        try:
            return self._overlaid(self.store.newest(RECENT))
        except StoreFailed:
            known = {**self._live, **{job_id: record for job_id, (record, _) in self._unsaved.items()}}
            return sorted(known.values(), key=lambda r: r.created_at, reverse=True)[:RECENT]

    def log_path(self, job_id: str) -> Path:
        return self._folder(job_id).log

    def cancel(self, job_id: str) -> JobRecord:
        record = self.get(job_id)
        if record.job_state.terminal:
            raise JobConflict(f"job '{job_id}' has already ended ({record.state})")
        if job_id != self._current:
            # Still in line: it leaves it (and its slot), and never runs.
            with contextlib.suppress(ValueError):
                self._line.remove(job_id)
            return self._finish(job_id, JobState.CANCELLED, "cancelled before it started")
        if self._waiting_scope is not None:
            self._waiting_scope.cancel()  # waiting for the lease: it leaves the line
        self._cancel.set()
        return record

    # -- running ------------------------------------------------------------------------------

    async def _run_queue(self) -> None:
        while True:
            if not self._line:
                self._lined = anyio.Event()
                await self._lined.wait()
                continue
            job_id = self._line.popleft()
            record = self.peek(job_id)
            if record is None or record.job_state is not JobState.QUEUED:
                continue  # cancelled while queued
            self._current, self._cancel = job_id, anyio.Event()
            try:
                await self._run(record)
            except OSError as exc:
                # The state directory failing under a job (a full disk) ends the job, not the host.
                logger.warning("job %s: %s", job_id, exc)
                if not self._record_of(job_id).job_state.terminal:
                    self._finish(
                        job_id, JobState.FAILED, f"the host could not run it: {excerpt(exc, MESSAGE_CHARS)}"
                    )
            finally:
                self._current = None

    async def _run(self, record: JobRecord) -> None:
        job_id = record.id
        self.events.publish(ExecutionChanged(owner=job_id, change="waiting"))
        with anyio.CancelScope() as waiting:
            self._waiting_scope = waiting
            async with self.coordinator.exclusive(job_id):
                self._waiting_scope = None
                try:
                    async with AsyncExitStack() as paused:
                        names = await self._pause_workers(paused)
                        self.coordinator.paused = names
                        self.events.publish(ExecutionChanged(owner=job_id, change="held", paused=names))
                        await self._execute(record)
                finally:
                    self.coordinator.paused = ()
        self._waiting_scope = None
        if waiting.cancelled_caught:
            self._finish(job_id, JobState.CANCELLED, "cancelled before it started")
        self.events.publish(ExecutionChanged(owner=job_id, change="released"))
        self._prune()

    async def _pause_workers(self, stack: AsyncExitStack) -> tuple[str, ...]:
        """Pause every worker that runs a process (one still loading once it is up); their names."""
        names: list[str] = []
        for supervisor in self.pool.supervisors():
            try:
                reading = await stack.enter_async_context(supervisor.paused())
            except WorkerUnavailable as exc:
                # Sessions cannot run while the job holds the lease, so a worker that does not
                # pause is stuck in something else; the job goes on rather than wait on it.
                logger.warning("job: could not pause worker %s: %s", supervisor.id, exc)
                continue
            if reading is not None:  # None: no process runs (stopped, restarting, held back)
                names.append(supervisor.id)
        return tuple(names)

    async def _execute(self, record: JobRecord) -> None:
        job_id = record.id
        folder = self._folder(job_id)
        try:
            process = await JobProcess.spawn(folder.spec, folder.stderr)
        except OSError as exc:
            self._finish(
                job_id, JobState.FAILED, f"cannot start the job process: {excerpt(exc, MESSAGE_CHARS)}"
            )
            return
        self._update(
            job_id, state=JobState.RUNNING, pid=process.pid, pid_started=process.started, started_at=now_ms()
        )
        self.events.publish(JobStarted(job=job_id, pid=process.pid))
        logger.info("job %s (%s of %s): started, pid %d", job_id, record.kind, record.model, process.pid)
        stopped_by_host = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow_progress, job_id)

                async def cancel_on_request() -> None:
                    await self._cancel.wait()
                    await process.cancel(self.settings.stop_timeout)

                tg.start_soon(cancel_on_request)
                await process.wait()
                tg.cancel_scope.cancel()
        except BaseException:
            # The host is stopping: the job ends itself when its stdin closes, logging why.
            stopped_by_host = True
            with anyio.CancelScope(shield=True):
                await process.abandon(self.settings.stop_timeout)
                self._conclude(record, process.returncode, stopped_by_host)
                await process.aclose()
            raise
        await process.aclose()
        self._conclude(record, process.returncode, stopped_by_host)

    def _conclude(self, record: JobRecord, code: int | None, stopped_by_host: bool) -> None:
        """The job's state from its log's terminal line; the host writes that line when the job could not."""
        job_id = record.id
        terminal, progress = self._folder(job_id).read_log()
        if progress is not None:
            # The last word, which the follower (throttled) may not have passed on.
            self._update(job_id, progress=progress)
            self._publish_progress(job_id, progress)
        error: str | None
        if terminal is None:
            if stopped_by_host:
                state, error = JobState.INTERRUPTED, HOST_STOPPED
            elif self._cancel.is_set():
                state, error = JobState.CANCELLED, "cancelled"
            else:
                state, error = JobState.FAILED, _exit_error(code, self._folder(job_id).last_words())
            try:
                self._folder(job_id).append(JobLogEvent(state.value, now_ms(), {"error": error}))
            except OSError as exc:  # a full disk: the record (and a tail, from it) still says how it ended
                logger.warning("job %s: cannot write its log's last line: %s", job_id, exc)
        else:
            state = JobState(terminal.type)
            said = terminal.data.get("error")
            error = None if state is JobState.SUCCEEDED or said is None else str(said)
        if state is JobState.SUCCEEDED:
            try:
                self._register(self._record_of(job_id))
            except (OSError, ValueError) as exc:
                # The job said it succeeded; its output is unusable: the log keeps its word, the record not.
                self._finish(
                    job_id, JobState.FAILED, f"its output cannot be served: {excerpt(exc, MESSAGE_CHARS)}"
                )
                return
            self._finish(job_id, JobState.SUCCEEDED, None)
            return
        self._folder(job_id).discard_output()
        self._finish(job_id, state, str(error) if error else state.value)

    def _finish(self, job_id: str, state: JobState, error: str | None) -> JobRecord:
        record = self._update(job_id, state=state, error=error, pid=None, pid_started=None, ended_at=now_ms())
        if job_id not in self._unsaved:
            self._live.pop(job_id, None)
        model = record.result.model if record.result else None
        self.events.publish(JobFinished(job=job_id, state=state.value, error=error, model=model))
        log = logger.info if state is JobState.SUCCEEDED else logger.warning
        log(
            "job %s: %s%s",
            job_id,
            state.value,
            f" ({error})" if error else f", serving {model}" if model else "",
        )
        return record

    async def _follow_progress(self, job_id: str) -> None:
        """Fold the log's progress lines into the store and the event stream, at most once a second."""
        latest: JobProgress | None = None
        written: JobProgress | None = None
        last_write = 0.0
        async for item in tail(self.log_path(job_id), lambda: self.peek(job_id), follow=True, quiet=LOG_POLL):
            if item is not None:
                latest = fold_progress(latest, item[1])
            now = anyio.current_time()
            if latest is not None and latest is not written and now - last_write >= PROGRESS_EVERY:
                self._update(job_id, progress=latest)
                self._publish_progress(job_id, latest)
                written, last_write = latest, now

    def _publish_progress(self, job_id: str, progress: JobProgress) -> None:
        self.events.publish(
            JobProgressed(
                job=job_id,
                iteration=progress.iteration,
                total=progress.total,
                train_loss=progress.train_loss,
                val_loss=progress.val_loss,
            )
        )

    # -- models made by jobs ---------------------------------------------------------------------

    def _register(self, record: JobRecord) -> None:
        output = self._folder(record.id).output
        model = job_model(record, output)
        if record.result is None:
            self._update(record.id, result=JobResult(model=model.spec.id, path=str(output)))
        if self.pool.resolve_exact(model.spec.id) is None:
            self.pool.register(model.spec, model.path, model.origin)

    def _find_model(self, name: str) -> tuple[ModelSpec, Path] | None:
        spec = self.pool.resolve_exact(name)
        return None if spec is None else (spec, self.pool.path_of(spec.id))

    # -- start and housekeeping --------------------------------------------------------------------

    def _recover(self) -> None:
        """The previous host's jobs: those it left unfinished end interrupted, those it made serve again.

        A store that cannot be read leaves them as they are, logged (the host serves meanwhile);
        one that cannot be written keeps the interruptions in memory until it can.
        """
        try:
            unfinished = self.store.in_states([JobState.QUEUED, JobState.RUNNING])
            succeeded = self.store.in_states([JobState.SUCCEEDED])
            processes = {record.id: self.store.process_of(record.id) for record in unfinished}
        except StoreFailed as exc:
            self._failed(exc)
            logger.warning("jobs: the previous host's jobs cannot be read back yet: %s", exc)
            return
        self._recovered = True
        for record in unfinished:
            if record.id in self._live:
                continue  # this host's own (recovery came late, once the store could be read)
            process = processes[record.id]
            if process is not None and process_alive(*process):
                # Its host died without it noticing (it ends itself when its stdin closes): end it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process[0], signal.SIGKILL)
            self._folder(record.id).discard_output()
            self._live[record.id] = record
            self._finish(record.id, JobState.INTERRUPTED, INTERRUPTED_BY_EXIT)
        for record in succeeded:
            try:
                self._register(record)
            except (OSError, ValueError, KeyError, UnknownModel) as exc:
                logger.warning("job %s: its model cannot be served: %s", record.id, exc)
        self._prune()

    def _prune(self) -> None:
        try:
            for record in self.store.beyond(self.settings.jobs_keep):
                if record.id in self._unsaved:
                    continue
                if record.result is not None:
                    self.pool.unregister(record.result.model)
                self._folder(record.id).delete()
                self.store.delete(record.id)
        except StoreFailed as exc:
            self._failed(exc)  # pruned another time

    def _folder(self, job_id: str) -> JobFolder:
        return JobFolder(self._jobs_dir / job_id)

    # -- the store, and what it could not take -------------------------------------------------------

    def _find_job(self, job_id: str) -> JobRecord | None:
        if job_id in self._unsaved:
            return self._unsaved[job_id][0]
        return self.store.get(job_id)

    def _record_of(self, job_id: str) -> JobRecord:
        """A job this runner works on, as best known; never fails."""
        record = self.peek(job_id)
        assert record is not None, job_id  # a job in line or running is in memory (_live)
        return record

    def _overlaid(self, records: list[JobRecord]) -> list[JobRecord]:
        return [self._unsaved[r.id][0] if r.id in self._unsaved else r for r in records]

    def _update(self, job_id: str, **changes: Any) -> JobRecord:
        """The store's update; when it cannot take it, the change is kept in memory and written later."""
        try:
            self._flush()
            record = self.store.update(job_id, **changes)
        except StoreFailed as exc:
            self._failed(exc)
            return self._keep(job_id, changes)
        self._saved()
        if job_id in self._live:
            self._live[job_id] = record
        return record

    def _keep(self, job_id: str, changes: dict[str, Any]) -> JobRecord:
        before, pending = self._unsaved.get(job_id) or (self._record_of(job_id), {})
        shown = {name: str(value) if name == "state" else value for name, value in changes.items()}
        shown.pop("pid_started", None)
        record = dataclasses.replace(before, **shown)
        self._unsaved[job_id] = (record, {**pending, **changes})
        if job_id in self._live:
            self._live[job_id] = record
        return record

    def _flush(self) -> None:
        """Write what the store could not take before; StoreFailed while it still cannot."""
        for job_id, (record, changes) in list(self._unsaved.items()):
            if self.store.get(job_id) is not None:
                self.store.update(job_id, **changes)
            del self._unsaved[job_id]
            if record.job_state.terminal:
                self._live.pop(job_id, None)

    def _failed(self, exc: StoreFailed) -> None:
        problem = (
            f"the state directory {self.state_dir} is full: jobs cannot be recorded"
            if exc.full
            else f"jobs cannot be recorded: {exc}"
        )
        if problem != self._problem:
            logger.warning("%s", problem)
        self._problem = problem

    def _saved(self) -> None:
        if self._problem is not None:
            logger.info("the job store %s takes writes again", self.store.path)
            self._problem = None

    async def _watch_store(self) -> None:
        """Notice a store deleted under the host (and write it again), and one that takes writes again."""
        while True:
            await anyio.sleep(STORE_CHECK)
            if not self._recovered:
                self._recover()
            try:
                self.store.check()
                if self._problem is not None or self._unsaved:
                    self._flush()
                    self.store.probe()
            except StoreFailed as exc:
                self._failed(exc)
                continue
            self._saved()


def _exit_error(code: int | None, last_words: str) -> str:
    how = (
        f"exited with status {code}"
        if code is not None and code >= 0
        else f"was killed by signal {-(code or 0)}"
    )
    return f"the job process {how}" + (f": {last_words}" if last_words else "")


def _new_id() -> str:
    return secrets.token_hex(4)


@contextlib.contextmanager
def _owned(state_dir: Path) -> Iterator[bool]:
    """Hold the state directory's lock for the block; False when another process holds it.

    The lock is on the directory itself: a lock file can be deleted (a tidy-up, an `rm` of old
    state), and the next host would lock a new file and take over a directory still in use.
    """
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock
