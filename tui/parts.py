"""The parts of what the console shows: the host, each worker, each session, each model's
admission gauge, each managed job and each model's download, as plain data that the snapshot's
records and the events update in place.

`ConsoleModel` (mlxhost_tui.model) holds them and decides which record reaches which part.
Times are wall-clock seconds, as in the model.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from mlxhost.client.human import count, drafts
from mlxhost.wire.admin import (
    AdminEvent,
    AdmissionRecord,
    AdmissionRejected,
    ExecutionChanged,
    ExecutionRecord,
    ExitRecord,
    HostState,
    HostStopping,
    JobFinished,
    JobProgressed,
    JobStarted,
    MemoryReading,
    ModelDownload,
    ModelEvicted,
    Outcome,
    RankRecord,
    SessionClosed,
    SessionOpened,
    SessionProgressed,
    SessionRecord,
    SpeculationReading,
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRecord,
    WorkerRestarting,
    WorkerSpawned,
)
from mlxhost.wire.admin.jobs import TERMINAL_STATES, JobKind, JobProgress, JobRecord, JobState
from mlxhost.wire.admin.state import DownloadRecord

__all__ = [
    "FADE_S", "LINGER_S", "DownloadRow", "Gauge", "HostInfo", "JobRow", "SessionRow", "WorkerRow",
    "event_time",
]  # fmt: skip

LINGER_S = 5.0  # how long a closed session stays in the table with its outcome
FADE_S = 2.0  # its last seconds there, it is drawn dim
MEMORY_READINGS = 24
LOSS_READINGS = 24


def event_time(event: AdminEvent) -> float:
    return event.at / 1000


@dataclass
class HostInfo:
    pid: int
    started: float  # wall clock, as this side counts it
    accepting: bool = True
    opened: int = 0
    closed: int = 0

    @classmethod
    def from_state(cls, state: HostState, now: float) -> HostInfo:
        host, sessions = state.host, state.sessions
        return cls(host.pid, now - host.uptime_s, host.accepting, sessions.opened, sessions.closed)

    def on_event(self, event: AdminEvent) -> None:
        match event:
            case SessionOpened():
                self.opened += 1
            case SessionClosed():
                self.closed += 1
            case HostStopping():
                self.accepting = False


@dataclass
class WorkerRow:
    id: str
    model: str
    state: str = "starting"
    pid: int | None = None
    restarts: int = 0
    in_flight: int = 0
    ready_at: float | None = None
    memory: int | None = None  # MLX active + cache bytes
    rss: int | None = None
    readings: collections.deque[int] = field(
        default_factory=lambda: collections.deque(maxlen=MEMORY_READINGS)
    )
    last_exit: ExitRecord | None = None
    ranks: tuple[RankRecord, ...] = ()  # a worker group's ranks, as the last snapshot had them
    speculation: SpeculationReading | None = None  # its draft totals, as the last snapshot had them

    @classmethod
    def from_snapshot(cls, record: WorkerRecord, now: float) -> WorkerRow:
        worker = cls(record.id, record.model)
        worker.update(record, now)
        return worker

    def update(self, record: WorkerRecord, now: float) -> None:
        self.model = record.model
        self.state = record.state
        self.pid = record.pid
        self.restarts = record.restarts
        self.in_flight = record.in_flight
        self.ready_at = now - record.uptime_s if record.uptime_s is not None else None
        self.last_exit = record.last_exit
        self.ranks = record.ranks
        self.speculation = record.speculation  # no event reports it: each snapshot brings it
        if record.memory is not None and not self.readings:
            # Later readings come as events; a snapshot only starts the series.
            self.read_memory(record.memory)

    def read_memory(self, reading: MemoryReading) -> None:
        self.memory = int(reading.active_bytes) + int(reading.cache_bytes)
        self.rss = reading.rss_bytes
        self.readings.append(self.memory)

    def on_event(self, event: AdminEvent) -> None:
        match event:
            case WorkerSpawned(pid=pid):
                self.state, self.pid, self.ready_at, self.ranks = "starting", pid, None, ()
            case WorkerReady(pid=pid, ranks=ranks):
                self.state, self.pid, self.ready_at, self.ranks = "ready", pid, event_time(event), ranks
            case WorkerExited(exit=exit):
                self.state, self.ready_at, self.in_flight, self.ranks = "exited", None, 0, ()
                self.last_exit = exit
            case WorkerRestarting():
                self.state = "restarting"
                self.restarts += 1
            case WorkerExhausted():
                self.state = "exhausted"
            case WorkerMemory(memory=reading):
                self.read_memory(reading)
            case ModelEvicted():
                self.state = "unloading"

    def uptime(self, now: float) -> float | None:
        return max(0.0, now - self.ready_at) if self.ready_at is not None else None

    def drafts_text(self) -> str:
        """The DRAFTS cell: the share of its drafts the model accepted, and the tokens each
        verification produced (`75% ×3.5`); `-` before it verified any."""
        return drafts(self.speculation)

    def exit_text(self) -> str:
        last = self.last_exit
        if last is None:
            return "-"
        how = last.signal or _code(last.code)
        if how is None:  # it never ran: a failed spawn says only why
            return str(last.reason or "-")
        return f"{how}: {last.reason}" if last.reason else str(how)


@dataclass
class SessionRow:
    id: str
    model: str
    stream: bool = True
    state: str = "queued"
    opened_at: float = 0.0
    tokens: int = 0
    tokens_per_s: float = 0.0
    outcome: Outcome | None = None
    closed_at: float | None = None
    kind: str = "generate"  # or embed, rerank: a pooled session
    inputs: int = 0  # a pooled session's texts or documents, once its worker is done with them
    prompt_tokens: int = 0  # a pooled session's, from its progress or a snapshot

    @classmethod
    def from_snapshot(cls, record: SessionRecord, now: float) -> SessionRow:
        session = cls(record.id, record.model, record.stream, record.state, now - record.age_s)
        session.tokens, session.tokens_per_s = record.tokens, record.tokens_per_s
        session.read_work(record)
        if record.outcome is not None:
            session.outcome, session.closed_at = record.outcome, now
        return session

    @classmethod
    def recent(cls, record: SessionRecord, host_now: float, now: float) -> SessionRow:
        """A session the snapshot lists as recently closed, closed as long ago as the host says."""
        session = cls.from_snapshot(record, now)
        closed_ago = host_now - (record.opened_at + record.age_s)
        session.closed_at = now - max(0.0, closed_ago)
        session.opened_at = session.closed_at - record.age_s
        return session

    def read_work(self, record: SessionRecord) -> None:
        """What a snapshot says the session was and did (its kind; its events may have come first)."""
        self.kind = record.kind
        self.inputs = max(self.inputs, record.inputs)
        self.prompt_tokens = max(self.prompt_tokens, record.prompt_tokens)

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    @property
    def pooled(self) -> bool:
        """An embed or rerank session: inputs in, vectors or scores out, no tokens generated."""
        return self.kind != "generate"

    def on_event(self, event: AdminEvent) -> None:
        match event:
            case SessionProgressed() if not self.closed:
                self.state = "running"
                self.tokens, self.tokens_per_s = event.tokens, event.tokens_per_s
                self.inputs = max(self.inputs, event.inputs)
                self.prompt_tokens = max(self.prompt_tokens, event.prompt_tokens)
            case SessionClosed():
                self.state = "closed"
                self.tokens = event.tokens
                self.closed_at = event_time(event)
                self.opened_at = self.closed_at - event.age_ms / 1000
                self.outcome = event.outcome

    def age(self, now: float) -> float:
        return max(0.0, (self.closed_at if self.closed_at is not None else now) - self.opened_at)

    def expired(self, now: float) -> bool:
        return self.closed_at is not None and now - self.closed_at >= LINGER_S

    def fading(self, now: float) -> bool:
        return self.closed_at is not None and now - self.closed_at >= LINGER_S - FADE_S

    def shown_state(self) -> str:
        return self.outcome.kind if self.outcome is not None else self.state

    def work_text(self) -> tuple[str, str]:
        """The TOKENS and TOK/S cells: a generation's tokens and rate; a pooled session's prompt
        tokens and its inputs (`12.3k`, `64 in`), `-` until its worker reports them."""
        if not self.pooled:
            return str(self.tokens), f"{self.tokens_per_s:.1f}"
        tokens = count(self.prompt_tokens) if self.prompt_tokens else "-"
        return tokens, f"{self.inputs} in" if self.inputs else "-"

    def drafts_text(self) -> str:
        """`11/18 drafts`: of the draft tokens verified, those the model accepted; "" for none."""
        outcome = self.outcome
        if outcome is None or not outcome.drafted_tokens:
            return ""
        return f"{outcome.accepted_tokens or 0}/{outcome.drafted_tokens} drafts"

    def outcome_text(self) -> str:
        outcome = self.outcome
        if outcome is None:
            return ""
        if outcome.kind == "completed":
            skipped = self.skipped_text()
            return f"{outcome.finish_reason or ''} {skipped}".strip()
        if outcome.kind == "cancelled":
            return outcome.reason or ""
        code, message = outcome.code or "", outcome.message or ""
        return f"{code}: {message}" if message else code

    def skipped_text(self) -> str:
        """`(2 skipped)`: the request's fields the host skipped. The names are in the event log's
        line for the session's end: a cell has no room."""
        ignored = self.outcome.ignored if self.outcome is not None else None
        return f"({len(ignored)} skipped)" if ignored else ""

    def outcome_cell(self) -> str:
        """The OUTCOME cell: an embed or rerank session's kind, then its outcome (`embed`,
        `rerank · client_disconnected`), since at 80 columns the table has no room for a column
        of its own; a generation's outcome, then its drafts if it verified any (`length 11/18
        drafts`)."""
        if not self.pooled:
            drafts = self.drafts_text()
            return f"{self.outcome_text()} {drafts}".strip()  # no room for a ` · ` at 80 columns
        completed = self.outcome is not None and self.outcome.kind == "completed"
        # Its finish reason is always `stop`: only what was skipped is worth the room.
        outcome = self.skipped_text() if completed else self.outcome_text()
        return f"{self.kind} · {outcome}" if outcome else self.kind

    def text(self) -> str:
        """Everything a filter may match."""
        return f"{self.id} {self.model} {self.shown_state()} {self.outcome_cell()}"


@dataclass
class Gauge:
    model: str
    max_active: int | None = None
    max_queued: int | None = None
    active: int = 0
    queued: int = 0
    admitted: int = 0
    rejected: int = 0

    def update(self, record: AdmissionRecord) -> None:
        self.max_active, self.max_queued = record.max_active, record.max_queued
        self.active, self.queued = record.active, record.queued
        self.admitted, self.rejected = record.admitted, record.rejected

    def on_event(self, event: AdminEvent) -> None:
        if isinstance(event, AdmissionRejected):
            self.active, self.queued = event.active, event.queued
            self.rejected += 1


@dataclass
class JobRow:
    """A managed job: where it is, and the train losses it reported, for a sparkline."""

    id: str
    kind: str
    model: str
    state: str = JobState.QUEUED.value
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    iteration: int = 0
    total: int = 0
    train_loss: float | None = None
    val_loss: float | None = None
    losses: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=LOSS_READINGS))
    # The iteration of the last loss kept: a snapshot repeats what an event said, and each poll repeats it.
    loss_iteration: int = -1
    execution: str | None = None  # "waiting" or "held": where it stands for the exclusive lease
    error: str | None = None
    result: str | None = None  # the model a succeeded job registered
    # A pull's: its `iteration` and `total` count bytes.
    bytes_per_s: float | None = None
    file: str | None = None

    @classmethod
    def from_record(cls, record: JobRecord) -> JobRow:
        job = cls(record.id, record.kind, record.model)
        job.update(record)
        return job

    def update(self, record: JobRecord) -> None:
        self.kind, self.model, self.state = record.kind, record.model, record.state
        self.created_at = record.created_at / 1000
        self.started_at = None if record.started_at is None else record.started_at / 1000
        self.ended_at = None if record.ended_at is None else record.ended_at / 1000
        self.error = record.error
        self.result = record.result.model if record.result is not None else None
        if record.progress is not None:
            self.progress(record.progress)
        if self.terminal:
            self.execution = None

    def progress(self, progress: JobProgress | JobProgressed) -> None:
        if progress.iteration < self.iteration:
            return  # older news than what we have
        self.iteration, self.total = progress.iteration, progress.total
        if isinstance(progress, JobProgress) and progress.bytes_per_s is not None:
            # A pull's; job.progress events carry neither (its model.download events do).
            self.bytes_per_s, self.file = progress.bytes_per_s, progress.file
        if progress.train_loss is not None:
            self.train_loss = progress.train_loss
            if progress.iteration > self.loss_iteration:
                self.losses.append(progress.train_loss)
                self.loss_iteration = progress.iteration
        if progress.val_loss is not None:
            self.val_loss = progress.val_loss

    def read_execution(self, record: ExecutionRecord) -> None:
        if record.exclusive == self.id:
            self.execution = "held"
        else:
            self.execution = "waiting" if self.id in record.waiting else None

    def on_event(self, event: AdminEvent) -> None:
        match event:
            case JobStarted():
                self.state, self.started_at = JobState.RUNNING.value, event_time(event)
            case JobProgressed() if not self.terminal:
                self.state = JobState.RUNNING.value
                self.progress(event)
            case ModelDownload(state="downloading", done_bytes=done) if not self.terminal:
                # A pull's rate and file come with its downloads' events (its job.progress has neither).
                if done >= self.iteration:  # else older news than what we have
                    self.iteration, self.total = done, event.total_bytes
                    self.bytes_per_s, self.file = event.bytes_per_s, event.file
            case JobFinished(state=state, error=error, model=model):
                self.state, self.error, self.result = state, error, model
                self.ended_at, self.execution = event_time(event), None
            case ExecutionChanged(change=change) if not self.terminal:
                self.execution = None if change == "released" else change

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def fraction(self) -> float:
        return min(1.0, self.iteration / self.total) if self.total > 0 else 0.0

    @property
    def pulls(self) -> bool:
        """A pull: its progress counts bytes, not iterations, and it reports no loss."""
        return self.kind == JobKind.PULL

    def shown_state(self) -> str:
        """Its state; a queued job says whether it waits for running sessions, or pauses the workers."""
        if self.state == JobState.QUEUED and self.execution == "waiting":
            return "waiting"
        if self.state == JobState.QUEUED and self.execution == "held":
            return "starting"
        return self.state

    def age(self, now: float) -> float:
        """How long it ran, or has been running, or waiting."""
        start = self.started_at if self.started_at is not None else self.created_at
        end = self.ended_at if self.ended_at is not None else now
        return max(0.0, end - start)

    def text(self) -> str:
        """Everything a filter may match."""
        words = (self.id, self.kind, self.model, self.shown_state(), self.result or "", self.error or "")
        return " ".join(words)


@dataclass
class DownloadRow:
    """A model's files coming from the Hugging Face Hub: how far, how fast, which file; or how it
    ended. `model` is the configured model it is for, or the repo (a pull job's, which no
    configured model names)."""

    model: str
    repo: str
    state: str = "downloading"  # then done, failed or cancelled
    done_bytes: int = 0
    total_bytes: int = 0
    bytes_per_s: float = 0.0
    file: str | None = None  # the file being fetched (only events say)
    job: str | None = None  # the pull job fetching it
    error: str | None = None

    @classmethod
    def from_record(cls, model: str, record: DownloadRecord) -> DownloadRow:
        download = cls(model, record.repo)
        download.update(record)
        return download

    def update(self, record: DownloadRecord) -> None:
        """What a snapshot says of it; the file it fetches stays as the last event said."""
        self.repo, self.state, self.error = record.repo, record.state, record.error
        self.job = record.job or self.job
        self.done_bytes, self.total_bytes = record.done_bytes, record.total_bytes
        self.bytes_per_s = record.bytes_per_s
        if self.ended:
            self.bytes_per_s, self.file = 0.0, None

    def on_event(self, event: ModelDownload) -> None:
        self.repo, self.state, self.error = event.repo, event.state, event.error
        self.job = event.job or self.job
        self.done_bytes, self.total_bytes = event.done_bytes, event.total_bytes
        self.bytes_per_s = 0.0 if self.ended else event.bytes_per_s
        self.file = None if self.ended else event.file

    def same(self, repo: str, job: str | None) -> bool:
        """Whether a download of `repo` by `job` is this one: the job, where both name one."""
        if job is not None and self.job is not None:
            return job == self.job
        return repo == self.repo

    @property
    def ended(self) -> bool:
        return self.state != "downloading"

    @property
    def fraction(self) -> float:
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes > 0 else 0.0


def _code(code: object) -> str | None:
    return None if code is None else f"code {code}"
