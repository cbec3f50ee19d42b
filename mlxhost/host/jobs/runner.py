"""The job runner: takes submissions, runs them one at a time under the exclusive lease, keeps them.

    queued → running → succeeded | failed | cancelled | interrupted

A submission is checked (`requests.resolve`), given its folder and its record, and joins the line
(FIFO). A pull does not: it takes no lease, so it runs at once beside serving (at most
`MAX_PULLS` at a time), and a second pull of the same repo and revision while one is queued or
running joins it (the same job, one download). A pull with `quantize` queues a quantize job of
what it pulled once it succeeds. The runner takes one job at a time from the line and gives it its turn (`JobExecution`:
the exclusive lease, the workers paused, its process run, its output served as a model); then the
oldest jobs beyond `jobs_keep` are pruned, their folders and models with them.

Everything durable is under the state directory: the store (`jobs.db`, read and written through
`JobRecords`), and one folder per job (`JobFolder`) holding its spec, its log, the process's own
output (`stderr.log`) and its result (`output/`). The runner holds that directory while it runs
and settles the jobs a previous host left there (`recovery`).

The store failing (a full disk, mostly) never ends the host: `JobRecords` keeps what it could not
write until it can, `problem` says why meanwhile, and a submission is refused (507 when the disk
is full) rather than half recorded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.jobs.execution import JobExecution
from mlxhost.host.jobs.folder import JobFolder
from mlxhost.host.jobs.records import JobRecords
from mlxhost.host.jobs.recovery import owned, recover
from mlxhost.host.jobs.requests import resolve
from mlxhost.host.jobs.store import JobStore, StoreFailed, now_ms
from mlxhost.host.jobs.tail import TailSlots
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.workers.pool import ModelPool
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin import JobQueued, ModelDownload
from mlxhost.wire.admin.job_requests import JobRequest, QuantizeRequest
from mlxhost.wire.admin.jobs import JobKind, JobRecord, JobState, LaunchedJob
from mlxhost.wire.errors import AdmissionRefused, InvalidRequest
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.layout import JOBS_DB, JOBS_DIR
from mlxhost.wire.layout import state_dir as resolve_state_dir

__all__ = ["CannotRecord", "JobConflict", "JobRunner", "UnknownJob"]

logger = logging.getLogger("mlxhost.jobs")

MAX_QUEUED = 16  # jobs waiting to run; more are refused with 429
QUEUE_RETRY_AFTER_S = 60  # a job in line takes minutes: a client need not ask again sooner
MAX_PULLS = 2  # pulls downloading at once; more wait their turn (queued)
MAX_TAILS = 16  # SSE tails of job logs open at once; more are refused with 429
STORE_CHECK = 5.0  # seconds between looks at the store: deleted under the host? writable again?


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
        self.records = JobRecords(store, state_dir, events)
        self.pool = pool
        self.coordinator = coordinator
        self.events = events
        self._jobs_dir = state_dir / JOBS_DIR
        # The line: ids waiting to run, FIFO; a job cancelled in line leaves it, and its slot, at once.
        self._line: deque[str] = deque()
        self._lined = anyio.Event()  # set when an id joins the line
        self._current: JobExecution | None = None  # the job taken from the line, until it ends
        self.tails = TailSlots(MAX_TAILS)
        self._recovered = False  # the previous host's jobs read back (a store that cannot be read: not yet)
        self._tg: anyio.abc.TaskGroup | None = None  # where pulls run (set by `open`)
        self._pulls: dict[str, JobExecution | None] = {}  # live pulls by id; None until its turn
        self._pull_turns = anyio.CapacityLimiter(MAX_PULLS)
        self._download_watchers: dict[str, list[Callable[[ModelDownload], None]]] = {}

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: Settings, pool: ModelPool, coordinator: ExecutionCoordinator, events: EventHub
    ) -> AsyncIterator[JobRunner | None]:
        """The runner for `settings.state_dir`, or None when another host owns that directory."""
        state_dir = resolve_state_dir(settings)
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with owned(state_dir) as is_owned:
            if not is_owned:
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
                    runner._tg = tg
                    tg.start_soon(runner._run_queue)
                    tg.start_soon(runner._watch_store)
                    try:
                        yield runner
                    finally:
                        tg.cancel_scope.cancel()
                # The running job ended itself (see JobExecution); those still in line never will run.
                records = runner.records
                for job_id in [i for i, r in records.live.items() if r.job_state is JobState.QUEUED]:
                    records.finish(job_id, JobState.INTERRUPTED, "the host stopped before the job ran")
                if records.unsaved:
                    logger.warning(
                        "the job store could not record how %d jobs ended (%s): %s",
                        len(records.unsaved),
                        ", ".join(records.unsaved),
                        records.problem,
                    )
            finally:
                store.close()

    @property
    def problem(self) -> str | None:
        """Why jobs cannot be recorded now (the state directory is full, say); None when they can."""
        return self.records.problem

    # -- for the admin routes ----------------------------------------------------------------

    async def submit(self, request: JobRequest) -> JobRecord:
        """Check, record and queue a job.

        Raises InvalidRequest (400), AdmissionRefused (429) or CannotRecord; a refused job leaves
        no record and no folder behind.
        """
        resolved = await resolve(request, self._find_model, self.records.find)  # reads a dataset in a thread
        # From here to the end, no await: the line cannot change under the check.
        pull = resolved.kind is JobKind.PULL
        if pull and (joined := self._live_pull(resolved.options)) is not None:
            return joined
        waiting = sum(1 for e in self._pulls.values() if e is None) if pull else len(self._line)
        if waiting >= MAX_QUEUED:
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
            self.records.create(record)
        except (OSError, StoreFailed) as exc:
            folder.delete()
            raise self._cannot_record(exc) from None
        if pull:
            assert self._tg is not None
            self._pulls[job_id] = None
            self._tg.start_soon(self._run_pull, job_id)
        else:
            self._line.append(job_id)
            self._lined.set()
        self.events.publish(JobQueued(job=job_id, kind=record.kind, model=record.model))
        return record

    def _live_pull(self, options: dict[str, object]) -> JobRecord | None:
        """The queued or running pull of the same repo and revision, if there is one."""
        for job_id in self._pulls:
            record = self.peek(job_id)
            if record is None or record.job_state.terminal:
                continue
            if (record.options.get("repo"), record.options.get("revision")) == (options["repo"], options["revision"]):
                return record
        return None

    def watch_download(self, job_id: str, watcher: Callable[[ModelDownload], None]) -> None:
        """Tell `watcher` of every `model.download` the pull `job_id` publishes."""
        self._download_watchers.setdefault(job_id, []).append(watcher)

    def _cannot_record(self, exc: OSError | StoreFailed) -> CannotRecord:
        if isinstance(exc, StoreFailed):
            self.records.failed(exc)
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
            f"the state directory {self.state_dir} cannot be written: {excerpt(why, MESSAGE_CHARS)}",
            full=False,
        )

    def get(self, job_id: str) -> JobRecord:
        """The job's record; UnknownJob, or StoreFailed when the store cannot be read."""
        record = self.records.find(job_id)
        if record is None:
            raise UnknownJob(job_id)
        return record

    def peek(self, job_id: str) -> JobRecord | None:
        """The job's record as best known, for a reader that must not fail (a tail): the store, or memory."""
        return self.records.peek(job_id)

    def all(self) -> list[JobRecord]:
        """Newest first; StoreFailed when the store cannot be read."""
        return self.records.all()

    def recent(self) -> list[JobRecord]:
        """The newest few, for the state snapshot: what memory knows when the store cannot be read."""
        return self.records.recent()

    def log_path(self, job_id: str) -> Path:
        return self._folder(job_id).log

    def cancel(self, job_id: str) -> JobRecord:
        record = self.get(job_id)
        if record.job_state.terminal:
            raise JobConflict(f"job '{job_id}' has already ended ({record.state})")
        if job_id in self._pulls:
            execution = self._pulls[job_id]
            if execution is not None:
                execution.cancel()
                return record
            return self.records.finish(job_id, JobState.CANCELLED, "cancelled before it started")
        if self._current is None or job_id != self._current.job_id:
            # Still in line: it leaves it (and its slot), and never runs.
            with contextlib.suppress(ValueError):
                self._line.remove(job_id)
            return self.records.finish(job_id, JobState.CANCELLED, "cancelled before it started")
        self._current.cancel()
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
            self._current = JobExecution(
                record,
                self._folder(job_id),
                self.records,
                self.pool,
                self.coordinator,
                self.events,
                self.settings.stop_timeout,
            )
            try:
                await self._current.run()
                self._prune()
            except OSError as exc:
                # The state directory failing under a job (a full disk) ends the job, not the host.
                logger.warning("job %s: %s", job_id, exc)
                if not self.records.record_of(job_id).job_state.terminal:
                    self.records.finish(
                        job_id, JobState.FAILED, f"the host could not run it: {excerpt(exc, MESSAGE_CHARS)}"
                    )
            finally:
                self._current = None

    async def _run_pull(self, job_id: str) -> None:
        """One pull's turn: it waits for a pull slot (not the lease), runs, and then its quantize job."""
        try:
            async with self._pull_turns:
                record = self.peek(job_id)
                if record is None or record.job_state is not JobState.QUEUED:
                    return  # cancelled while it waited
                execution = JobExecution(
                    record, self._folder(job_id), self.records, self.pool, self.coordinator, self.events,
                    self.settings.stop_timeout, exclusive=False,
                )  # fmt: skip
                execution.on_download = self._tell_watchers
                self._pulls[job_id] = execution
                try:
                    await execution.run()
                except OSError as exc:
                    logger.warning("job %s: %s", job_id, exc)
                    if not self.records.record_of(job_id).job_state.terminal:
                        self.records.finish(
                            job_id, JobState.FAILED, f"the host could not run it: {excerpt(exc, MESSAGE_CHARS)}"
                        )
            await self._after_pull(job_id)
            self._prune()
        finally:
            self._pulls.pop(job_id, None)
            self._download_watchers.pop(job_id, None)

    def _tell_watchers(self, download: ModelDownload) -> None:
        for watcher in self._download_watchers.get(download.job or "", ()):
            watcher(download)

    async def _after_pull(self, job_id: str) -> None:
        """A pull asked to quantize what it pulled: that job joins the line now."""
        record = self.peek(job_id)
        if record is None or record.job_state is not JobState.SUCCEEDED or record.result is None:
            return
        bits = record.options.get("quantize")
        if bits is None:
            return
        try:
            queued = await self.submit(QuantizeRequest(kind="quantize", model=record.result.model, bits=bits))
        except (InvalidRequest, AdmissionRefused, CannotRecord) as exc:
            logger.warning("job %s: the quantize job after the pull was refused: %s", job_id, exc)
            return
        logger.info("job %s: pulled %s; quantize job %s queued", job_id, record.model, queued.id)

    def _find_model(self, name: str) -> tuple[ModelSpec, Path] | None:
        spec = self.pool.resolve_exact(name)
        return None if spec is None else (spec, self.pool.path_of(spec.id))

    def _folder(self, job_id: str) -> JobFolder:
        return JobFolder(self._jobs_dir / job_id)

    # -- start and housekeeping --------------------------------------------------------------------

    def _recover(self) -> None:
        """The previous host's jobs (see `recovery.recover`); pruned once they could be read back."""
        if recover(self.records, self.pool, self._jobs_dir):
            self._recovered = True
            self._prune()

    def _prune(self) -> None:
        """The oldest jobs beyond `jobs_keep` go: their models, their folders, their records."""
        store = self.records.store
        try:
            for record in store.beyond(self.settings.jobs_keep):
                if record.id in self.records.unsaved:
                    continue
                if record.result is not None:
                    self.pool.unregister(record.result.model)
                self._folder(record.id).delete()
                store.delete(record.id)
        except StoreFailed as exc:
            self.records.failed(exc)  # pruned another time

    async def _watch_store(self) -> None:
        """Read the previous host's jobs back once the store can be read; see `JobRecords.check`."""
        while True:
            await anyio.sleep(STORE_CHECK)
            if not self._recovered:
                self._recover()
            self.records.check()


def _new_id() -> str:
    return secrets.token_hex(4)
