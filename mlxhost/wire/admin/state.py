"""GET /admin/state: the host's state snapshot (`HostState`) and the parts it shares with events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mlxhost.wire.admin.jobs import JobRecord
from mlxhost.wire.admin.record import JSON, Record, field_names, optional
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt
from mlxhost.wire.launch import MemoryReading, SpeculationReading

__all__ = ["AdmissionRecord", "DownloadRecord", "ExecutionRecord", "ExitRecord", "HostRecord", "HostState", "ModelRecord", "Outcome", "RankRecord", "SessionRecord", "SessionsRecord", "StandbyRecord", "WorkerRecord"]


@dataclass(frozen=True, kw_only=True)
class ExitRecord(Record):
    """How a worker process last ended."""

    pid: int | None  # None: no process was ever started
    code: int | None  # exit status, or None when a signal ended it (or it never started)
    signal: str | None
    uptime_s: float
    ready: bool  # whether it had become ready
    reason: str | None


MAX_IGNORED = 32  # skipped field names an outcome keeps (as fields.MAX_NAMED)
MAX_CLIENT_ENTRIES = 8  # what a session keeps of its client's own metadata
CLIENT_VALUE_CHARS = 128


def client_entries(pairs: Mapping[str, Any]) -> dict[str, str]:
    """A client's metadata (Anthropic's metadata.user_id, Codex's client_metadata), bounded and
    inert: the first few entries, each an excerpt."""
    return {
        excerpt(k): excerpt(v if isinstance(v, str) else str(v), CLIENT_VALUE_CHARS)
        for k, v in list(pairs.items())[:MAX_CLIENT_ENTRIES]
    }


@dataclass(frozen=True)
class Outcome(Record):
    """How a session ended: only the fields its kind uses are set, and only those are sent."""

    kind: str  # "completed", "cancelled" or "failed"
    finish_reason: str | None = None  # completed
    reason: str | None = None  # cancelled
    code: str | None = None  # failed
    message: str | None = None  # failed
    # Request fields the host skipped (an SDK defines them, mlxhost does not do them), by name.
    ignored: tuple[str, ...] | None = None
    # Speculative decoding: draft tokens verified, and those the model kept (part of its tokens);
    # None for a session that verified none (speculate off, nothing to draft, or no generation).
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None

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

    def with_ignored(self, names: tuple[str, ...]) -> Outcome:
        return replace(self, ignored=tuple(excerpt(n, 128) for n in names[:MAX_IGNORED])) if names else self

    def with_drafts(self, drafted: int, accepted: int) -> Outcome:
        return replace(self, drafted_tokens=drafted, accepted_tokens=accepted) if drafted else self

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        decoded = {name: data.get(name) for name in field_names(cls)} | {"kind": data["kind"]}
        ignored = data.get("ignored")
        return decoded | {"ignored": None if ignored is None else tuple(str(n) for n in ignored)}


@dataclass(frozen=True, kw_only=True)
class WorkerRecord(Record):
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
    memory: MemoryReading | None  # its latest reading (rank 0's, for a group)
    ranks: tuple[RankRecord, ...] = ()  # a worker group's ranks, once ready; empty for one process
    # Its process's speculative decoding totals; None until it verified a draft (or with it off).
    speculation: SpeculationReading | None = None

    def _encode(self) -> JSON:
        data = super()._encode()
        data["last_exit"] = None if self.last_exit is None else self.last_exit.to_json()
        data["memory"] = None if self.memory is None else self.memory.__dict__.copy()
        data["ranks"] = [rank.to_json() for rank in self.ranks]
        if self.speculation is None:  # a worker that never drafted reads as before speculation
            del data["speculation"]
        else:
            data["speculation"] = self.speculation.__dict__.copy()
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        memory, speculation = data["memory"], data.get("speculation")
        return super()._decode({"ranks": [], "speculation": None, **data}) | {
            "last_exit": optional(ExitRecord, data["last_exit"]),
            "memory": None if memory is None else MemoryReading(**memory),
            "ranks": tuple(RankRecord.from_json(rank) for rank in data.get("ranks", [])),
            "speculation": None if speculation is None else SpeculationReading(**speculation),
        }


@dataclass(frozen=True, kw_only=True)
class RankRecord(Record):
    """One rank of a worker group: where it runs and, when on this machine, its memory."""

    rank: int
    host: str
    pid: int
    rss_bytes: int | None  # None: on another machine, or gone


@dataclass(frozen=True, kw_only=True)
class StandbyRecord(Record):
    """A warm interpreter waiting to become the next worker: MLX imported, no model loaded."""

    pid: int
    state: str  # warming (still importing), ready (can be taken)
    rss_bytes: int  # what keeping it costs


@dataclass(frozen=True, kw_only=True)
class DownloadRecord(Record):
    """A configured model's files still coming from the hub (a serve-time pull), or why they did not."""

    repo: str
    state: str  # "downloading" or "failed"
    done_bytes: int = 0
    total_bytes: int = 0
    bytes_per_s: float = 0.0
    job: str | None = None  # the pull job fetching it
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class ModelRecord(Record):
    id: str
    aliases: tuple[str, ...]
    path: str
    resident: bool
    default: bool
    download: DownloadRecord | None = None  # while its files are being pulled (or failed to be)

    def _encode(self) -> JSON:
        data = super()._encode() | {"aliases": list(self.aliases)}
        if self.download is None:
            del data["download"]  # as before models could be pulled
        else:
            data["download"] = self.download.to_json()
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        download = data.get("download")
        return super()._decode({**data, "download": None}) | {
            "aliases": tuple(data["aliases"]),
            "download": None if download is None else DownloadRecord.from_json(download),
        }


# A session record's fields left out of its JSON when they hold these.
_SESSION_DEFAULTS: dict[str, Any] = {"kind": "generate", "inputs": 0, "prompt_tokens": 0}


@dataclass(frozen=True, kw_only=True)
class SessionRecord(Record):
    id: str
    model: str
    stream: bool
    state: str  # queued, preparing, running, settling, closed
    opened_at: float  # unix seconds
    age_s: float  # until now, or until it closed
    tokens: int
    tokens_per_s: float
    outcome: Outcome | None
    client: dict[str, str] | None = None  # what its client said of itself (client_entries)
    kind: str = "generate"  # or embed, rerank
    inputs: int = 0  # an embed or rerank session's inputs (texts, documents)
    prompt_tokens: int = 0

    def _encode(self) -> JSON:
        data = super()._encode() | {"outcome": None if self.outcome is None else self.outcome.to_json()}
        if data["client"] is None:
            del data["client"]
        for name, default in _SESSION_DEFAULTS.items():  # a generation's record reads as before
            if data[name] == default:
                del data[name]
        return data

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        data = {**_SESSION_DEFAULTS, **data}
        kept = {name: data[name] for name in field_names(cls) if name != "client"}
        client = data.get("client")
        outcome = optional(Outcome, data["outcome"])
        return kept | {"outcome": outcome, "client": None if client is None else dict(client)}


@dataclass(frozen=True, kw_only=True)
class SessionsRecord(Record):
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
class AdmissionRecord(Record):
    """One model's admission gauges and counters."""

    max_active: int
    max_queued: int
    active: int
    queued: int
    admitted: int
    rejected: int


@dataclass(frozen=True, kw_only=True)
class ExecutionRecord(Record):
    """The execution coordinator: sessions share it; a job holds it alone, pausing the workers."""

    shared: int  # sessions holding a shared lease (running on a worker)
    exclusive: str | None  # the job holding the exclusive lease
    waiting: tuple[str, ...]  # who waits, in order: job ids, or "session" for each waiting session
    paused: tuple[str, ...]  # workers paused for the exclusive holder

    def _encode(self) -> JSON:
        return super()._encode() | {"waiting": list(self.waiting), "paused": list(self.paused)}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return super()._decode(data) | {"waiting": tuple(data["waiting"]), "paused": tuple(data["paused"])}


IDLE_EXECUTION = ExecutionRecord(shared=0, exclusive=None, waiting=(), paused=())


@dataclass(frozen=True, kw_only=True)
class HostRecord(Record):
    pid: int
    started: float  # unix seconds
    uptime_s: float
    accepting: bool  # false once the host is stopping


@dataclass(frozen=True, kw_only=True)
class HostState(Record):
    """GET /admin/state: one consistent snapshot, including exactly the events up to `seq`."""

    seq: int
    host: HostRecord
    workers: tuple[WorkerRecord, ...]
    models: tuple[ModelRecord, ...]
    sessions: SessionsRecord
    admission: Mapping[str, AdmissionRecord]  # by model id
    # Added with managed jobs; a host from before them sends neither.
    execution: ExecutionRecord = IDLE_EXECUTION
    jobs: tuple[JobRecord, ...] = ()  # the latest jobs, newest first
    standby: tuple[StandbyRecord, ...] = ()  # added with standby workers

    def _encode(self) -> JSON:
        return {
            "seq": self.seq,
            "host": self.host.to_json(),
            "workers": [w.to_json() for w in self.workers],
            "models": [m.to_json() for m in self.models],
            "sessions": self.sessions.to_json(),
            "admission": {model: a.to_json() for model, a in self.admission.items()},
            "execution": self.execution.to_json(),
            "jobs": [j.to_json() for j in self.jobs],
            "standby": [s.to_json() for s in self.standby],
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
            "execution": optional(ExecutionRecord, data.get("execution")) or IDLE_EXECUTION,
            "jobs": tuple(JobRecord.from_json(j) for j in data.get("jobs", ())),
            "standby": tuple(StandbyRecord.from_json(s) for s in data.get("standby", ())),
        }
