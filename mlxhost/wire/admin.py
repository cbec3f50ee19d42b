"""The admin API's documents as records: the host's state snapshot and the events that follow it.

GET /admin/state answers a `HostState`; GET /admin/events streams events, each a frozen record
with the number (`seq`) and time (`at`, unix ms) the host's event hub gave it. Every record turns
into the JSON the host sends (`to_json`) and back (`from_json`); the JSON keeps today's shape key
for key, so a client of an older or newer host still reads it. A client turns an event it got into
a record with `parse_event`: a type it does not know, or a known type it cannot read, comes back
as an `UnknownEvent` holding the dict, never an exception. A malformed snapshot raises
`BadRecord` (a `ValueError`, like the JSON error a client already handles).

Strings in these records may come from a client (a model name, an error message): the host's hub
bounds them as it publishes (see `mlxhost.host.events`); the records themselves only carry data.

The module is longer than most (one catalogue, mostly field lists): the state and the events are
one contract that a client reads together, they share their parts (`ExitRecord`, `MemoryReading`,
`Outcome`) and one encoding, and a reader looking up a key finds every record in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self, TypeVar

from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.launch import MemoryReading

__all__ = [
    "END_HOST_STOPPING",
    "END_LAGGED",
    "EVENT_TYPES",
    "AdminEvent",
    "AdmissionRecord",
    "AdmissionRejected",
    "BadRecord",
    "ExitRecord",
    "HostRecord",
    "HostStarted",
    "HostState",
    "HostStopping",
    "MemoryReading",
    "ModelEvicted",
    "ModelRecord",
    "Outcome",
    "SessionClosed",
    "SessionOpened",
    "SessionProgressed",
    "SessionRecord",
    "SessionsRecord",
    "StreamLagged",
    "StreamReset",
    "UnknownEvent",
    "WorkerExhausted",
    "WorkerExited",
    "WorkerMemory",
    "WorkerReady",
    "WorkerRecord",
    "WorkerRestarting",
    "WorkerSpawned",
    "parse_event",
]

# Why the host ended an event stream on purpose: the reason in its last frame, `event: end`.
END_HOST_STOPPING = "host_stopping"
END_LAGGED = "lagged"

JSON = dict[str, Any]


class BadRecord(ValueError):
    """A document that does not have the fields of the record it should be."""


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """A record's field names, in order (looked up once per class)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return names


class _Record:
    """A frozen dataclass whose fields are its JSON keys, in order; nested records override
    `_encode` and `_decode`."""

    def _encode(self) -> JSON:
        return {name: getattr(self, name) for name in _names(type(self))}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return {name: data[name] for name in _names(cls)}

    def to_json(self) -> JSON:
        return self._encode()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        try:
            return cls(**cls._decode(data))
        except (KeyError, TypeError, AttributeError) as exc:  # a missing key, or not an object
            raise BadRecord(f"not a {cls.__name__}: {excerpt(exc)}") from None


_R = TypeVar("_R", bound=_Record)


def _optional(record: type[_R], data: Any) -> _R | None:
    return None if data is None else record.from_json(data)


# -- the parts of a snapshot -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ExitRecord(_Record):
    """How a worker process last ended."""

    pid: int | None  # None: no process was ever started
    code: int | None  # exit status, or None when a signal ended it (or it never started)
    signal: str | None
    uptime_s: float
    ready: bool  # whether it had become ready
    reason: str | None


@dataclass(frozen=True)
class Outcome(_Record):
    """How a session ended: only the fields its kind uses are set, and only those are sent."""

    kind: str  # "completed", "cancelled" or "failed"
    finish_reason: str | None = None  # completed
    reason: str | None = None  # cancelled
    code: str | None = None  # failed
    message: str | None = None  # failed

    # Text that may come from a client or a worker is kept as a short, inert excerpt.
    @classmethod
    def completed(cls, finish_reason: str | None) -> Outcome:
        return cls("completed", finish_reason=None if finish_reason is None else excerpt(finish_reason))

    @classmethod
    def cancelled(cls, reason: str) -> Outcome:
        return cls("cancelled", reason=str(reason))  # a StrEnum's value, as a plain str

    @classmethod
    def failed(cls, code: str, message: str) -> Outcome:
        return cls("failed", code=excerpt(code), message=excerpt(message, MESSAGE_CHARS))

    def _encode(self) -> JSON:
        return {k: v for k, v in super()._encode().items() if v is not None}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return {name: data.get(name) for name in _names(cls)} | {"kind": data["kind"]}


@dataclass(frozen=True, kw_only=True)
class WorkerRecord(_Record):
    id: str
    model: str
    state: str  # starting, ready, restarting, exhausted, closed
    pid: int | None
    socket: str
    restarts: int
    in_flight: int
    uptime_s: float | None  # since it became ready; None while it is not
    ready_s: float | None  # spawn to ready, last time
    last_exit: ExitRecord | None
    memory: MemoryReading | None  # its latest reading

    def _encode(self) -> JSON:
        data = super()._encode()
        data["last_exit"] = None if self.last_exit is None else self.last_exit.to_json()
        data["memory"] = None if self.memory is None else self.memory.__dict__.copy()
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        memory = data["memory"]
        return super()._decode(data) | {
            "last_exit": _optional(ExitRecord, data["last_exit"]),
            "memory": None if memory is None else MemoryReading(**memory),
        }


@dataclass(frozen=True, kw_only=True)
class ModelRecord(_Record):
    id: str
    aliases: tuple[str, ...]
    path: str
    resident: bool
    default: bool

    def _encode(self) -> JSON:
        return super()._encode() | {"aliases": list(self.aliases)}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode(data) | {"aliases": tuple(data["aliases"])}


@dataclass(frozen=True, kw_only=True)
class SessionRecord(_Record):
    id: str
    model: str
    stream: bool
    state: str  # queued, preparing, running, settling, closed
    opened_at: float  # unix seconds
    age_s: float  # until now, or until it closed
    tokens: int
    tokens_per_s: float
    outcome: Outcome | None

    def _encode(self) -> JSON:
        return super()._encode() | {"outcome": None if self.outcome is None else self.outcome.to_json()}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode(data) | {"outcome": _optional(Outcome, data["outcome"])}


@dataclass(frozen=True, kw_only=True)
class SessionsRecord(_Record):
    """GET /admin/sessions, and the state's `sessions`: counts, live ones, recently closed ones."""

    opened: int
    closed: int
    live: tuple[SessionRecord, ...]
    recent: tuple[SessionRecord, ...]

    def _encode(self) -> JSON:
        return super()._encode() | {
            "live": [s.to_json() for s in self.live],
            "recent": [s.to_json() for s in self.recent],
        }

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode(data) | {
            "live": tuple(SessionRecord.from_json(s) for s in data["live"]),
            "recent": tuple(SessionRecord.from_json(s) for s in data["recent"]),
        }


@dataclass(frozen=True, kw_only=True)
class AdmissionRecord(_Record):
    """One model's admission gauges and counters."""

    max_active: int
    max_queued: int
    active: int
    queued: int
    admitted: int
    rejected: int


@dataclass(frozen=True, kw_only=True)
class HostRecord(_Record):
    pid: int
    started: float  # unix seconds
    uptime_s: float
    accepting: bool  # false once the host is stopping


@dataclass(frozen=True, kw_only=True)
class HostState(_Record):
    """GET /admin/state: one consistent snapshot, including exactly the events up to `seq`."""

    seq: int
    host: HostRecord
    workers: tuple[WorkerRecord, ...]
    models: tuple[ModelRecord, ...]
    sessions: SessionsRecord
    admission: Mapping[str, AdmissionRecord]  # by model id

    def _encode(self) -> JSON:
        return {
            "seq": self.seq,
            "host": self.host.to_json(),
            "workers": [w.to_json() for w in self.workers],
            "models": [m.to_json() for m in self.models],
            "sessions": self.sessions.to_json(),
            "admission": {model: a.to_json() for model, a in self.admission.items()},
        }

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return {
            "seq": data["seq"],
            "host": HostRecord.from_json(data["host"]),
            "workers": tuple(WorkerRecord.from_json(w) for w in data["workers"]),
            "models": tuple(ModelRecord.from_json(m) for m in data["models"]),
            "sessions": SessionsRecord.from_json(data["sessions"]),
            "admission": {model: AdmissionRecord.from_json(a) for model, a in data["admission"].items()},
        }


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AdminEvent(_Record):
    """An event: `{"seq": n, "at": unix_ms, "type": TYPE, ...payload}` on the wire.

    A producer builds one without `seq` and `at` (0 until the hub numbers it, when it publishes).
    """

    TYPE: ClassVar[str] = ""
    seq: int = 0
    at: int = 0  # unix milliseconds

    def payload(self) -> JSON:
        """The fields after `type`, as JSON values: what the hub bounds and publishes."""
        data = self._encode()
        del data["seq"], data["at"]
        return data

    def to_json(self) -> JSON:
        return {"seq": self.seq, "at": self.at, "type": self.type, **self.payload()}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"seq": 0, "at": 0, **data})

    @property
    def type(self) -> str:
        return self.TYPE


@dataclass(frozen=True, kw_only=True)
class HostStarted(AdminEvent):
    TYPE: ClassVar[str] = "host.started"
    pid: int
    models: tuple[str, ...]  # model ids

    def _encode(self) -> JSON:
        return super()._encode() | {"models": list(self.models)}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode(data) | {"models": tuple(data["models"])}


@dataclass(frozen=True, kw_only=True)
class HostStopping(AdminEvent):
    TYPE: ClassVar[str] = "host.stopping"
    reason: str  # what asked it to stop (a signal's name)
    grace_s: float  # how long running requests may take to finish


@dataclass(frozen=True, kw_only=True)
class WorkerSpawned(AdminEvent):
    TYPE: ClassVar[str] = "worker.spawned"
    worker: str
    model: str
    pid: int


@dataclass(frozen=True, kw_only=True)
class WorkerReady(AdminEvent):
    TYPE: ClassVar[str] = "worker.ready"
    worker: str
    pid: int
    ready_ms: int  # spawn to ready


@dataclass(frozen=True, kw_only=True)
class WorkerExited(AdminEvent):
    """A worker process ended; `planned` when the host stopped or restarted it. The exit's fields
    are sent flat, after `planned`."""

    TYPE: ClassVar[str] = "worker.exited"
    worker: str
    planned: bool
    exit: ExitRecord

    def _encode(self) -> JSON:
        return {"seq": self.seq, "at": self.at, "worker": self.worker, "planned": self.planned, **self.exit.to_json()}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({**data, "exit": ExitRecord.from_json(data)})


@dataclass(frozen=True, kw_only=True)
class WorkerRestarting(AdminEvent):
    TYPE: ClassVar[str] = "worker.restarting"
    worker: str
    attempt: int  # respawns within the restart window, this one included
    max: int  # the restart limit
    delay_ms: int  # the crash-loop backoff before this try


@dataclass(frozen=True, kw_only=True)
class WorkerExhausted(AdminEvent):
    """The host gave up on a worker until an operator restarts it."""

    TYPE: ClassVar[str] = "worker.exhausted"
    worker: str
    reason: str
    last_exit: ExitRecord

    def _encode(self) -> JSON:
        return super()._encode() | {"last_exit": self.last_exit.to_json()}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode(data) | {"last_exit": ExitRecord.from_json(data["last_exit"])}


@dataclass(frozen=True, kw_only=True)
class WorkerMemory(AdminEvent):
    """A worker's memory reading; its fields are sent flat, after `worker`."""

    TYPE: ClassVar[str] = "worker.memory"
    worker: str
    memory: MemoryReading

    def _encode(self) -> JSON:
        return {"seq": self.seq, "at": self.at, "worker": self.worker, **self.memory.__dict__}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        reading = MemoryReading(**{name: data[name] for name in _names(MemoryReading)})
        return super()._decode({**data, "memory": reading})


@dataclass(frozen=True, kw_only=True)
class ModelEvicted(AdminEvent):
    TYPE: ClassVar[str] = "model.evicted"
    model: str
    reason: str  # max_resident, memory_budget or idle_ttl


@dataclass(frozen=True, kw_only=True)
class SessionOpened(AdminEvent):
    TYPE: ClassVar[str] = "session.opened"
    session: str
    model: str
    stream: bool


@dataclass(frozen=True, kw_only=True)
class SessionProgressed(AdminEvent):
    """A session's progress, as its worker reported it (throttled)."""

    TYPE: ClassVar[str] = "session.progress"
    session: str
    model: str
    tokens: int
    tokens_per_s: float


@dataclass(frozen=True, kw_only=True)
class SessionClosed(AdminEvent):
    """A session's end; its outcome's fields are sent flat, after `age_ms`."""

    TYPE: ClassVar[str] = "session.closed"
    session: str
    model: str
    tokens: int
    age_ms: int
    outcome: Outcome

    def _encode(self) -> JSON:
        data = super()._encode()
        del data["outcome"]
        return data | self.outcome.to_json()

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({**data, "outcome": Outcome.from_json(data)})


@dataclass(frozen=True, kw_only=True)
class AdmissionRejected(AdminEvent):
    """A request turned away with 429; `session` is absent when none had opened for it."""

    TYPE: ClassVar[str] = "admission.rejected"
    session: str | None = None
    model: str
    active: int
    queued: int

    def _encode(self) -> JSON:
        data = super()._encode()
        if self.session is None:
            del data["session"]
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"session": None, **data})


@dataclass(frozen=True, kw_only=True)
class StreamReset(AdminEvent):
    """The client asked to resume before the oldest event the host keeps: re-read the state."""

    TYPE: ClassVar[str] = "stream.reset"


@dataclass(frozen=True, kw_only=True)
class StreamLagged(AdminEvent):
    """The host dropped this subscriber for reading too slowly; numbered as the last event it got."""

    TYPE: ClassVar[str] = "stream.lagged"


@dataclass(frozen=True, kw_only=True)
class UnknownEvent(AdminEvent):
    """An event this client cannot read (a newer host's type, or a malformed one), kept whole."""

    data: Mapping[str, Any]

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> UnknownEvent:
        seq, at = data.get("seq", 0), data.get("at", 0)
        return cls(data=dict(data), seq=seq if isinstance(seq, int) else 0, at=at if isinstance(at, int) else 0)

    def payload(self) -> JSON:
        return {k: v for k, v in self.data.items() if k not in ("seq", "at", "type")}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        event = cls.of(data)
        return {"data": event.data, "seq": event.seq, "at": event.at}

    @property
    def type(self) -> str:
        return str(self.data.get("type", ""))


EVENT_TYPES: Mapping[str, type[AdminEvent]] = {
    cls.TYPE: cls
    for cls in (
        HostStarted, HostStopping,
        WorkerSpawned, WorkerReady, WorkerExited, WorkerRestarting, WorkerExhausted, WorkerMemory,
        ModelEvicted,
        SessionOpened, SessionProgressed, SessionClosed,
        AdmissionRejected,
        StreamReset, StreamLagged,
    )
}  # fmt: skip


def parse_event(data: Mapping[str, Any]) -> AdminEvent:
    """The record for an event as the host sent it; `UnknownEvent` for one this client cannot read."""
    kind = EVENT_TYPES.get(str(data.get("type"))) if isinstance(data, Mapping) else None
    if kind is not None:
        try:
            return kind.from_json(data)
        except ValueError:  # a field missing, or of another shape (BadRecord)
            pass
    return UnknownEvent.of(data if isinstance(data, Mapping) else {"data": data})
