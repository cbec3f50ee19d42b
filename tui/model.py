"""What the console shows of a host, and the fold that keeps it: `ConsoleModel`.

The admin API's state snapshot and its events, as the records of `mlxhost.wire.admin`, fold into
one `ConsoleModel` (`load` a snapshot, `apply` an event, or `ingest` both as the network loop
receives them) that holds the host, its workers, sessions, admission gauges, managed jobs and the
models' downloads (mlxhost_tui.parts) and tells the event log what to add. The widgets only draw
it. Nothing here does I/O or imports Textual, so the fold is tested on its own.

Times are wall-clock seconds: a snapshot's ages count back from `now`, an event's times come from
its `at` (so events replayed after a reconnect keep their own times).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar, cast

from mlxhost.wire.admin import (
    AdminEvent,
    AdmissionRejected,
    ExecutionChanged,
    HostState,
    JobFinished,
    JobProgressed,
    JobQueued,
    JobStarted,
    ModelDownload,
    ModelEvicted,
    SessionClosed,
    SessionOpened,
    SessionProgressed,
    SessionRecord,
    StandbyRecord,
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRestarting,
    WorkerSpawned,
)
from mlxhost.wire.inert import CONTROLS  # the same characters the host escapes: none reach the terminal
from mlxhost.wire.admin.jobs import TERMINAL_STATES
from mlxhost_tui.parts import DownloadRow, Gauge, HostInfo, JobRow, SessionRow, WorkerRow, event_time

__all__ = ["QUIET_EVENTS", "ConsoleModel", "LogEntry", "Note", "host_identity", "strip_controls"]

# Frequent events that only update the tables; the log would be nothing else.
QUIET_EVENTS = (SessionProgressed, WorkerMemory, JobProgressed)
WORKER_EVENTS = (WorkerSpawned, WorkerReady, WorkerExited, WorkerRestarting, WorkerExhausted, WorkerMemory)
JOB_EVENTS = (JobStarted, JobProgressed, JobFinished)
DOWNLOADING = "downloading"  # a download's state until it ends

_T = TypeVar("_T")


def strip_controls(value: _T) -> _T:
    """`value`, as the host sent it, with control characters removed from every string in it.

    The host escapes them already; the console does not rely on that, since what it draws goes
    straight to the operator's terminal (an ESC sequence could retitle it or clear it). Records
    and containers with nothing to strip come back as they are.
    """
    return cast(_T, _strip(value))


def _strip(value: Any) -> Any:
    if isinstance(value, str):
        # `isprintable` is false for every character the pattern matches: most strings pass as is.
        if value.isprintable():
            return value
        stripped = CONTROLS.sub("", value)
        return value if len(stripped) == len(value) else stripped
    if is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in fields(value):
            old = getattr(value, f.name)
            if (new := _strip(old)) is not old:
                changes[f.name] = new
        return replace(value, **changes) if changes else value
    if isinstance(value, Mapping):
        pairs = [(_strip(k), _strip(v)) for k, v in value.items()]
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    if isinstance(value, (list, tuple)):
        items = [_strip(v) for v in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return tuple(items) if isinstance(value, tuple) else items
    return value


def host_identity(state: HostState) -> tuple[int, float]:
    """Tells one host run from the next: a new host on the same address starts its `seq` again."""
    return state.host.pid, state.host.started


@dataclass(frozen=True)
class Note:
    """A line the console itself adds to the event log (the host did not send it)."""

    message: str


LogEntry = AdminEvent | Note


class ConsoleModel:
    """Everything the screens show of one host, folded from snapshots and events in `seq` order.

    A snapshot as new as what the model holds replaces it; an older one (a poll that crossed
    events on the way) only refreshes what no event reports: admission counts, session states.
    Each event is folded once: one the snapshot already holds, or a replay, changes nothing.
    """

    def __init__(self) -> None:
        self.identity: tuple[int, float] | None = None  # which run of the host this is
        self.host: HostInfo | None = None
        self.seq = 0  # the last event folded in
        self.logged = 0  # the last event handed to the log
        self.workers: dict[str, WorkerRow] = {}
        self.sessions: dict[str, SessionRow] = {}
        self.gauges: dict[str, Gauge] = {}
        self.jobs: dict[str, JobRow] = {}  # newest first, as the host lists them
        self.standby: tuple[StandbyRecord, ...] = ()  # warm interpreters; only snapshots report them
        self.downloads: dict[str, DownloadRow] = {}  # by model: files coming from the hub, or why not
        self._downloads_logged: set[tuple[str, str | None]] = set()  # (model, job): started, not ended

    @classmethod
    def from_snapshot(cls, state: HostState, now: float) -> ConsoleModel:
        model = cls()
        model.ingest(now, state=state)
        return model

    def ingest(
        self, now: float, state: HostState | None = None, events: Iterable[AdminEvent] = ()
    ) -> list[LogEntry]:
        """Fold a snapshot, then events, as the host sent them; returns what the event log gains.

        Everything is stripped of control characters first: nothing the host said reaches the
        terminal raw.
        """
        log: list[LogEntry] = []
        if state is not None:
            note = self.load(strip_controls(state), now)
            if note is not None:
                log.append(note)
        for event in events:
            event = strip_controls(event)
            if self.apply(event):
                log.append(event)
        return log

    def load(self, state: HostState, now: float) -> Note | None:
        """Fold a state snapshot; says so in a note when it comes from another host than before."""
        note = None
        identity = host_identity(state)
        if identity != self.identity:
            if self.identity is not None:
                note = Note(f"a new host, pid {identity[0]}")
                self.workers.clear()  # its workers' history is not theirs
                self.downloads.clear()
                self._downloads_logged.clear()
            self.identity, self.seq, self.logged = identity, 0, 0
        stale = state.seq < self.seq
        self._load_workers(state, now, stale)
        self._load_sessions(state, now, stale)
        self._load_gauges(state)
        if not stale:
            self._load_jobs(state)  # events report all a job does: an older snapshot has nothing new
            self._load_downloads(state)  # and all a download does
            self.standby = state.standby
            self.host = HostInfo.from_state(state, now)
            self.seq = state.seq
        elif self.host is not None:
            self.host.accepting = state.host.accepting
        return note

    def apply(self, event: AdminEvent) -> bool:
        """Fold one event, unless the model holds it already; True when the event log shows it."""
        if event.type.startswith("stream."):
            return True  # about the stream, not the host: it moves no seq
        new_to_log = event.seq > self.logged
        if new_to_log:
            self.logged = event.seq
        if event.seq > self.seq:  # else the snapshot already holds it
            self.seq = event.seq
            self._apply_worker(event)
            self._apply_session(event)
            self._apply_job(event)
            self._apply_download(event)
            if isinstance(event, AdmissionRejected):
                self.gauges.setdefault(event.model, Gauge(event.model)).on_event(event)
            if self.host is not None:
                self.host.on_event(event)
        if new_to_log and isinstance(event, ModelDownload):
            return self._download_news(event)
        return new_to_log and not isinstance(event, QUIET_EVENTS)

    def expire(self, now: float) -> None:
        """Forget the sessions that closed long enough ago."""
        for key in [k for k, s in self.sessions.items() if s.expired(now)]:
            del self.sessions[key]

    def download_of(self, model: str, repo: str, job: str | None) -> DownloadRow | None:
        """The download `model`'s name, or `repo` by `job`, is shown as: a serve-time pull's events
        may name the repo where the snapshot names the configured model it is for."""
        if (download := self.downloads.get(model)) is not None:
            return download
        return next((d for d in self.downloads.values() if d.same(repo, job)), None)

    def session_of(self, entry: LogEntry) -> SessionRow | None:
        """The row of the session a log entry is about, if it is about one still shown."""
        if isinstance(entry, (SessionOpened, SessionProgressed, SessionClosed)):
            return self.sessions.get(entry.session)
        return None

    @property
    def live(self) -> int:
        return sum(not s.closed for s in self.sessions.values())

    # -- the snapshot, part by part --------------------------------------------------------

    def _load_workers(self, state: HostState, now: float, stale: bool) -> None:
        if stale:
            for record in state.workers:
                if (worker := self.workers.get(record.id)) is not None:
                    worker.in_flight = record.in_flight
            return
        workers: dict[str, WorkerRow] = {}
        for record in state.workers:
            worker = self.workers.get(record.id)
            if worker is None:
                worker = WorkerRow.from_snapshot(record, now)
            else:
                worker.update(record, now)
            workers[worker.id] = worker
        self.workers = workers

    def _load_sessions(self, state: HostState, now: float, stale: bool) -> None:
        live = state.sessions.live
        if stale:
            for record in live:
                session = self.sessions.get(record.id)
                if session is not None and not session.closed:
                    session.state = record.state
            self._read_work(state.sessions.recent + live)
            return
        sessions = {record.id: SessionRow.from_snapshot(record, now) for record in live}
        # Sessions that closed a moment ago keep their place a few seconds, with their outcome.
        host_now = state.host.started + state.host.uptime_s
        for record in state.sessions.recent:
            if record.id not in self.sessions:
                session = SessionRow.recent(record, host_now, now)
                if not session.expired(now):
                    sessions[session.id] = session
        for session in self.sessions.values():
            if session.closed and session.id not in sessions and not session.expired(now):
                sessions[session.id] = session
        self.sessions = sessions
        self._read_work(state.sessions.recent)

    def _read_work(self, records: Iterable[SessionRecord]) -> None:
        """Prompt tokens, which no event reports: an embed or rerank session shows them once a
        snapshot has them (most are over before one lists them live)."""
        for record in records:
            if (session := self.sessions.get(record.id)) is not None:
                session.read_work(record)

    def _load_gauges(self, state: HostState) -> None:
        gauges = {m.id: self.gauges.get(m.id) or Gauge(m.id) for m in state.models}
        for model, record in state.admission.items():
            gauges.setdefault(model, Gauge(model)).update(record)
        self.gauges = gauges

    def _load_jobs(self, state: HostState) -> None:
        jobs: dict[str, JobRow] = {}
        for record in state.jobs:
            job = self.jobs.get(record.id)
            if job is None:
                job = JobRow.from_record(record)
            else:
                job.update(record)
            job.read_execution(state.execution)
            jobs[job.id] = job
        # The host lists the latest jobs: one it no longer lists is gone from here too.
        self.jobs = jobs

    def _load_downloads(self, state: HostState) -> None:
        """The snapshot's downloads, as the host has them; a finished one is gone from it.

        A download that ended well stays, shown done, until this (the next) snapshot: its
        worker spawns after the event, and until then the row keeps the model's place rather than
        vanish short of its end. One that failed stays while the host says so of its model. A pull
        job's download of a repo that no configured model names is only in the events: it stays
        while its job runs, and once it ends the jobs pane keeps its outcome.
        """
        downloads: dict[str, DownloadRow] = {}
        for record in state.models:
            if (pulled := record.download) is None:
                continue
            download = self.download_of(record.id, pulled.repo, pulled.job)
            if download is None:
                download = DownloadRow.from_record(record.id, pulled)
            else:
                download.model = record.id  # the configured model's name, rather than its repo
                download.update(pulled)
            downloads[record.id] = download
        configured = {record.id for record in state.models}
        running = {job.id for job in state.jobs if job.state not in TERMINAL_STATES}
        kept = {id(download) for download in downloads.values()}
        for name, download in self.downloads.items():
            if name in configured or id(download) in kept or download.ended:
                continue
            if download.job is None or download.job in running:
                downloads[name] = download
        self.downloads = downloads

    # -- events, by what they are about ----------------------------------------------------

    def _apply_worker(self, event: AdminEvent) -> None:
        if isinstance(event, WORKER_EVENTS):
            name = event.worker
        elif isinstance(event, ModelEvicted):
            name = event.model
        else:
            return
        worker = self.workers.get(name)
        if worker is None and isinstance(event, WorkerSpawned):
            worker = self.workers[name] = WorkerRow(name, event.model)
        if worker is not None:
            worker.on_event(event)

    def _apply_session(self, event: AdminEvent) -> None:
        match event:
            case SessionOpened():
                self.sessions[event.session] = SessionRow(
                    event.session, event.model, event.stream, opened_at=event_time(event), kind=event.kind
                )
            case SessionProgressed() | SessionClosed():
                if (session := self.sessions.get(event.session)) is not None:
                    session.on_event(event)

    def _apply_job(self, event: AdminEvent) -> None:
        if isinstance(event, JobQueued):
            queued = JobRow(event.job, event.kind, event.model, created_at=event_time(event))
            self.jobs = {queued.id: queued, **{k: v for k, v in self.jobs.items() if k != queued.id}}
            return
        if isinstance(event, JOB_EVENTS):
            job = self.jobs.get(event.job)
        elif isinstance(event, ModelDownload) and event.job is not None:
            job = self.jobs.get(event.job)  # a pull's rate and file
        elif isinstance(event, ExecutionChanged):
            job = self.jobs.get(event.owner)
        else:
            return
        if job is not None:
            job.on_event(event)

    def _apply_download(self, event: AdminEvent) -> None:
        match event:
            case ModelDownload(model=model, repo=repo, job=job):
                download = self.download_of(model, repo, job)
                if download is None:
                    download = self.downloads[model] = DownloadRow(model, repo)
                download.on_event(event)
            case WorkerSpawned(model=model):
                self.downloads.pop(model, None)  # its files are in: the model is being served

    def _download_news(self, event: ModelDownload) -> bool:
        """Whether the log shows a download's event: its start and its end, not each second's
        progress (as a session's). One first seen mid-way (the console started late) counts as its
        start."""
        key = (event.model, event.job)
        if event.state != DOWNLOADING:
            self._downloads_logged.discard(key)
            return True
        if key in self._downloads_logged:
            return False
        self._downloads_logged.add(key)
        return True
