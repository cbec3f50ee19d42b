"""One job's turn: it waits for the exclusive lease, runs its process while the workers are paused, ends.

A job waits in line (FIFO) for the execution coordinator's exclusive lease: sessions already
running finish first, later ones wait behind it. Holding it, the job pauses every resident worker
(each through a lease on the worker's own socket, so a host that dies releases it), runs the job's
process (`JobProcess`), follows its log for progress, and on success its output is served as a
model at once (`serve_output`). Then the workers resume and the lease goes back.

A pull is the exception: it reads the network and writes the cache, and costs the workers nothing,
so it takes no lease and pauses nothing (`exclusive` False): it runs beside serving, and its
progress is also a `model.download` event.

How the job ended comes from its log's terminal line; when the job could not write one (it was
killed, it crashed, the host stopped), the host writes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AsyncExitStack

import anyio

from mlxhost.host.events import EventHub
from mlxhost.host.jobs.folder import JobFolder, fold_progress
from mlxhost.host.jobs.models import serve_output
from mlxhost.host.jobs.process import JobProcess
from mlxhost.host.jobs.records import JobRecords
from mlxhost.host.jobs.store import now_ms
from mlxhost.host.jobs.tail import tail
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.workers.pool import ModelPool
from mlxhost.host.workers.status import WorkerUnavailable
from mlxhost.wire.admin import ExecutionChanged, JobProgressed, JobStarted, ModelDownload
from mlxhost.wire.admin.jobs import JobKind, JobLogEvent, JobProgress, JobRecord, JobState
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

__all__ = ["JobExecution"]

logger = logging.getLogger("mlxhost.jobs")

PROGRESS_EVERY = 1.0  # seconds between progress writes to the store and the event stream
LOG_POLL = 0.5  # seconds between looks at a running job's log for progress
HOST_STOPPED = "the host stopped while the job ran"


class JobExecution:
    """The job the runner took from its line, from its wait for the lease to its end."""

    def __init__(
        self,
        record: JobRecord,
        folder: JobFolder,
        records: JobRecords,
        pool: ModelPool,
        coordinator: ExecutionCoordinator,
        events: EventHub,
        stop_timeout: float,
        exclusive: bool = True,
    ) -> None:
        self.exclusive = exclusive
        # Told of every `model.download` this job publishes (the pool's pending model follows it).
        self.on_download: Callable[[ModelDownload], None] | None = None
        self.record = record
        self.job_id = record.id
        self.folder = folder
        self.records = records
        self.pool = pool
        self.coordinator = coordinator
        self.events = events
        self.stop_timeout = stop_timeout
        self._waiting_scope: anyio.CancelScope | None = None  # its wait for the lease
        self._cancel = anyio.Event()  # it was asked to stop

    def cancel(self) -> None:
        """Stop it: waiting for the lease, it leaves the line; running, its process is stopped."""
        if self._waiting_scope is not None:
            self._waiting_scope.cancel()
        self._cancel.set()

    async def run(self) -> None:
        job_id = self.job_id
        if not self.exclusive:
            await self._execute()
            return
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
                        await self._execute()
                finally:
                    self.coordinator.paused = ()
        self._waiting_scope = None
        if waiting.cancelled_caught:
            self.records.finish(job_id, JobState.CANCELLED, "cancelled before it started")
        self.events.publish(ExecutionChanged(owner=job_id, change="released"))

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

    async def _execute(self) -> None:
        record, job_id, folder = self.record, self.job_id, self.folder
        try:
            process = await JobProcess.spawn(folder.spec, folder.stderr)
        except OSError as exc:
            self.records.finish(
                job_id, JobState.FAILED, f"cannot start the job process: {excerpt(exc, MESSAGE_CHARS)}"
            )
            return
        self.records.update(
            job_id, state=JobState.RUNNING, pid=process.pid, pid_started=process.started, started_at=now_ms()
        )
        self.events.publish(JobStarted(job=job_id, pid=process.pid))
        logger.info("job %s (%s of %s): started, pid %d", job_id, record.kind, record.model, process.pid)
        stopped_by_host = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._follow_progress)

                async def cancel_on_request() -> None:
                    await self._cancel.wait()
                    await process.cancel(self.stop_timeout)

                tg.start_soon(cancel_on_request)
                await process.wait()
                tg.cancel_scope.cancel()
        except BaseException:
            # The host is stopping: the job ends itself when its stdin closes, logging why.
            stopped_by_host = True
            with anyio.CancelScope(shield=True):
                await process.abandon(self.stop_timeout)
                self._conclude(process.returncode, stopped_by_host)
                await process.aclose()
            raise
        await process.aclose()
        self._conclude(process.returncode, stopped_by_host)

    def _publish_download(self, state: str, progress: JobProgress | None, error: str | None = None) -> None:
        if progress is None:
            progress = self.records.record_of(self.job_id).progress or JobProgress(iteration=0, total=0)
        download = ModelDownload(
            model=self.record.model,
            repo=str(self.record.options.get("repo", self.record.model)),
            state=state,
            done_bytes=progress.iteration,
            total_bytes=progress.total,
            bytes_per_s=progress.bytes_per_s or 0.0,
            file=progress.file,
            job=self.job_id,
            error=error,
        )
        self.events.publish(download)
        if self.on_download is not None:
            self.on_download(download)

    def _conclude(self, code: int | None, stopped_by_host: bool) -> None:
        """The job's state from its log's terminal line; the host writes that line when the job could not."""
        job_id, folder = self.job_id, self.folder
        terminal, progress = folder.read_log()
        if progress is not None:
            # The last word, which the follower (throttled) may not have passed on.
            self.records.update(job_id, progress=progress)
            self._publish_progress(progress)
        error: str | None
        if terminal is None:
            if stopped_by_host:
                state, error = JobState.INTERRUPTED, HOST_STOPPED
            elif self._cancel.is_set():
                state, error = JobState.CANCELLED, "cancelled"
            else:
                state, error = JobState.FAILED, _exit_error(code, folder.last_words())
            try:
                folder.append(JobLogEvent(state.value, now_ms(), {"error": error}))
            except OSError as exc:  # a full disk: the record (and a tail, from it) still says how it ended
                logger.warning("job %s: cannot write its log's last line: %s", job_id, exc)
        else:
            state = JobState(terminal.type)
            said = terminal.data.get("error")
            error = None if state is JobState.SUCCEEDED or said is None else str(said)
        if state is JobState.SUCCEEDED:
            try:
                serve_output(self.records.record_of(job_id), folder.output, self.pool, self.records)
            except (OSError, ValueError) as exc:
                # The job said it succeeded; its output is unusable: the log keeps its word, the record not.
                self.records.finish(
                    job_id, JobState.FAILED, f"its output cannot be served: {excerpt(exc, MESSAGE_CHARS)}"
                )
                return
            self.records.finish(job_id, JobState.SUCCEEDED, None)
            if self.record.kind == JobKind.PULL:
                self._publish_download("done", None)
            return
        folder.discard_output()
        self.records.finish(job_id, state, str(error) if error else state.value)
        if self.record.kind == JobKind.PULL:
            ended = "cancelled" if state is JobState.CANCELLED else "failed"
            self._publish_download(ended, None, str(error) if error else state.value)

    async def _follow_progress(self) -> None:
        """Fold the log's progress lines into the store and the event stream, at most once a second."""
        job_id = self.job_id
        latest: JobProgress | None = None
        written: JobProgress | None = None
        last_write = 0.0
        following = tail(self.folder.log, lambda: self.records.peek(job_id), follow=True, quiet=LOG_POLL)
        async for item in following:
            if item is not None:
                latest = fold_progress(latest, item[1])
            now = anyio.current_time()
            if latest is not None and latest is not written and now - last_write >= PROGRESS_EVERY:
                self.records.update(job_id, progress=latest)
                self._publish_progress(latest)
                written, last_write = latest, now

    def _publish_progress(self, progress: JobProgress) -> None:
        if self.record.kind == JobKind.PULL:
            self._publish_download("downloading", progress)
        self.events.publish(
            JobProgressed(
                job=self.job_id,
                iteration=progress.iteration,
                total=progress.total,
                train_loss=progress.train_loss,
                val_loss=progress.val_loss,
            )
        )


def _exit_error(code: int | None, last_words: str) -> str:
    how = (
        f"exited with status {code}"
        if code is not None and code >= 0
        else f"was killed by signal {-(code or 0)}"
    )
    return f"the job process {how}" + (f": {last_words}" if last_words else "")
