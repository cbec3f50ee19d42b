"""GET /admin/events: one record per event type, and `parse_event` to read one a host sent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from mlxhost.wire.admin.record import JSON, Record, field_names
from mlxhost.wire.admin.state import ExitRecord, Outcome, RankRecord
from mlxhost.wire.launch import MemoryReading
from mlxhost.wire.sse import END_HOST_STOPPING, END_LAGGED  # why a stream ended: here too, for the console

__all__ = ["AdminEvent", "AdmissionRejected", "END_HOST_STOPPING", "END_LAGGED", "EVENT_TYPES", "ExecutionChanged", "HostStarted", "HostStopping", "JobFinished", "JobProgressed", "JobQueued", "JobStarted", "ModelDownload", "ModelEvicted", "SessionClosed", "SessionOpened", "SessionProgressed", "StreamLagged", "StreamReset", "UnknownEvent", "WorkerExhausted", "WorkerExited", "WorkerMemory", "WorkerReady", "WorkerRestarting", "WorkerSpawned", "parse_event"]



@dataclass(frozen=True, kw_only=True)
class AdminEvent(Record):
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
    ranks: tuple[RankRecord, ...] = ()  # a worker group's ranks, every one loaded

    def _encode(self) -> JSON:
        return super()._encode() | {"ranks": [rank.to_json() for rank in self.ranks]}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        ranks = tuple(RankRecord.from_json(rank) for rank in data.get("ranks", []))
        return super()._decode({**data, "ranks": []}) | {"ranks": ranks}


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
        reading = MemoryReading(**{name: data[name] for name in field_names(MemoryReading)})
        return super()._decode({**data, "memory": reading})


@dataclass(frozen=True, kw_only=True)
class ModelEvicted(AdminEvent):
    TYPE: ClassVar[str] = "model.evicted"
    model: str
    reason: str  # max_resident, memory_budget or idle_ttl


@dataclass(frozen=True, kw_only=True)
class ModelDownload(AdminEvent):
    """A model's files coming from the Hugging Face Hub: at start, about once a second, and at the end.

    `model` is the name it is served by once here (the repo id; a configured model that names the
    repo says so in /admin/state's `download`); `state` is "downloading" until it is "done",
    "failed" or "cancelled" (with `error`).
    """

    TYPE: ClassVar[str] = "model.download"
    model: str
    repo: str
    state: str
    done_bytes: int
    total_bytes: int
    bytes_per_s: float = 0.0
    file: str | None = None  # the file being fetched
    job: str | None = None  # the pull job that fetches it
    error: str | None = None

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"bytes_per_s": 0.0, "file": None, "job": None, "error": None, **data})

    @property
    def fraction(self) -> float:
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class SessionOpened(AdminEvent):
    TYPE: ClassVar[str] = "session.opened"
    session: str
    model: str
    stream: bool
    client: dict[str, str] | None = None  # what its client said of itself (state.client_entries)
    kind: str = "generate"  # or embed, rerank

    def _encode(self) -> JSON:
        data = super()._encode()
        if data["client"] is None:
            del data["client"]
        if data["kind"] == "generate":  # as before embeddings had sessions
            del data["kind"]
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"client": None, "kind": "generate", **data})


@dataclass(frozen=True, kw_only=True)
class SessionProgressed(AdminEvent):
    """A session's progress, as its worker reported it (throttled)."""

    TYPE: ClassVar[str] = "session.progress"
    session: str
    model: str
    tokens: int
    tokens_per_s: float
    inputs: int = 0  # an embed or rerank session's, once its worker finished them
    prompt_tokens: int = 0  # the tokens of those inputs (sent with them)

    def _encode(self) -> JSON:
        data = super()._encode()
        if not data["inputs"]:  # a generation's progress reads as it did before pooled routes
            del data["inputs"], data["prompt_tokens"]
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"inputs": 0, "prompt_tokens": 0, **data})


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
class JobQueued(AdminEvent):
    TYPE: ClassVar[str] = "job.queued"
    job: str
    kind: str
    model: str


@dataclass(frozen=True, kw_only=True)
class JobStarted(AdminEvent):
    TYPE: ClassVar[str] = "job.started"
    job: str
    pid: int


@dataclass(frozen=True, kw_only=True)
class JobProgressed(AdminEvent):
    """A job's progress line, at most about once a second per job."""

    TYPE: ClassVar[str] = "job.progress"
    job: str
    iteration: int
    total: int
    train_loss: float | None = None
    val_loss: float | None = None

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"train_loss": None, "val_loss": None, **data})


@dataclass(frozen=True, kw_only=True)
class JobFinished(AdminEvent):
    """A job reached its terminal state; `model` is the model it registered, if it succeeded."""

    TYPE: ClassVar[str] = "job.finished"
    job: str
    state: str  # succeeded, failed, cancelled or interrupted
    error: str | None = None
    model: str | None = None

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"error": None, "model": None, **data})


@dataclass(frozen=True, kw_only=True)
class ExecutionChanged(AdminEvent):
    """The exclusive execution lease changed hands: a job waits for it, holds it, or let it go."""

    TYPE: ClassVar[str] = "execution.changed"
    owner: str  # the job's id
    change: str  # "waiting", "held" or "released"
    paused: tuple[str, ...] = ()  # while held: the workers paused for it

    def _encode(self) -> JSON:
        return super()._encode() | {"paused": list(self.paused)}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode({"paused": (), **data}) | {"paused": tuple(data.get("paused", ()))}


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
        ModelEvicted, ModelDownload,
        SessionOpened, SessionProgressed, SessionClosed,
        AdmissionRejected,
        JobQueued, JobStarted, JobProgressed, JobFinished, ExecutionChanged,
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
