"""The parts of what the console shows: the host, each worker, each session, each model's
admission gauge, as plain data that the snapshot's records and the events update in place.

`ConsoleModel` (mlxhost_tui.model) holds them and decides which record reaches which part.
Times are wall-clock seconds, as in the model.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from mlxhost.wire.admin import (
    AdminEvent,
    AdmissionRecord,
    AdmissionRejected,
    ExitRecord,
    HostState,
    HostStopping,
    MemoryReading,
    ModelEvicted,
    Outcome,
    SessionClosed,
    SessionOpened,
    SessionProgressed,
    SessionRecord,
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRecord,
    WorkerRestarting,
    WorkerSpawned,
)

__all__ = ["FADE_S", "LINGER_S", "Gauge", "HostInfo", "SessionRow", "WorkerRow", "event_time"]

LINGER_S = 5.0  # how long a closed session stays in the table with its outcome
FADE_S = 2.0  # its last seconds there, it is drawn dim
MEMORY_READINGS = 24


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
    readings: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=MEMORY_READINGS))
    last_exit: ExitRecord | None = None

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
                self.state, self.pid, self.ready_at = "starting", pid, None
            case WorkerReady(pid=pid):
                self.state, self.pid, self.ready_at = "ready", pid, event_time(event)
            case WorkerExited(exit=exit):
                self.state, self.ready_at, self.in_flight = "exited", None, 0
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

    @classmethod
    def from_snapshot(cls, record: SessionRecord, now: float) -> SessionRow:
        session = cls(record.id, record.model, record.stream, record.state, now - record.age_s)
        session.tokens, session.tokens_per_s = record.tokens, record.tokens_per_s
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

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def on_event(self, event: AdminEvent) -> None:
        match event:
            case SessionProgressed() if not self.closed:
                self.state = "running"
                self.tokens, self.tokens_per_s = event.tokens, event.tokens_per_s
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

    def outcome_text(self) -> str:
        outcome = self.outcome
        if outcome is None:
            return ""
        if outcome.kind == "completed":
            return outcome.finish_reason or ""
        if outcome.kind == "cancelled":
            return outcome.reason or ""
        code, message = outcome.code or "", outcome.message or ""
        return f"{code}: {message}" if message else code

    def text(self) -> str:
        """Everything a filter may match."""
        return f"{self.id} {self.model} {self.shown_state()} {self.outcome_text()}"


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


def _code(code: object) -> str | None:
    return None if code is None else f"code {code}"
