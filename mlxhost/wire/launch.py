"""What the parent and a worker say to each other over the worker's stdin and stdout.

    worker → parent stdout:  `MLXHOST-STANDBY {json}` once its imports are done, before it
                             reads stdin: from here a model load is all a launch costs.
    parent → worker stdin:   one JSON launch record line; then nothing. End of stdin means the
                             parent is gone, and the worker stops (before a record: at once,
                             with status 0, since it made nothing).
    worker → parent stdout:  `MLXHOST-READY {json}` once serving, then `MLXHOST-EVENT {json}`
                             lines (memory readings, speculative decoding's totals, session
                             progress). Any other line, on stdout or stderr, is the worker's log.

The parent may write the record at once (a plain spawn), or keep the process as a warm standby and
write it when a worker is needed (`mlxhost.host.workers.standby`): the worker behaves the same either way.

The parent checks the ready line against the launch record (socket, protocol version) and kills
a worker whose line does not match. Each session's last progress report says `done`: by then the
worker has dropped the session's sequence (and its KV cache) from its batch.

A launch record of another protocol version, or one that does not parse, makes the worker exit
with status 2 (`EXIT_BAD_LAUNCH`) and the reason on stderr; the parent does not try such a worker
again, since every try would end the same way. Data only: the parent and the worker both import it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = [
    "WORKER_EVENT",
    "EXIT_BAD_LAUNCH",
    "EXIT_GROUP_BROKEN",
    "HOST_PID",
    "PAUSE_LEASE_PATH",
    "PROTOCOL_VERSION",
    "TASKS",
    "WORKER_READY",
    "WORKER_STANDBY",
    "WORKER_OPTIONS",
    "BadLaunchRecord",
    "LaunchRecord",
    "MemoryReading",
    "ReadyLine",
    "SessionProgress",
    "SpeculationReading",
    "StandbyLine",
    "WorkerOptions",
    "parse_line",
]

PROTOCOL_VERSION = 1
# The worker's private route that pauses it for a managed job for as long as the request's
# connection lasts; the first line of its answer, once paused, is {"paused": true, "memory": {...}}.
PAUSE_LEASE_PATH = "/admin/lease"
WORKER_READY = "MLXHOST-READY "
WORKER_EVENT = "MLXHOST-EVENT "
WORKER_STANDBY = "MLXHOST-STANDBY "
EXIT_BAD_LAUNCH = 2
# A worker group's rank 0 whose collectives failed (a rank died or its link broke): it exits at
# once, and the host tells the group's clients and log which rank ended first, and how.
EXIT_GROUP_BROKEN = 3
# The host's pid, in the environment of a worker group's processes: mlx.launch, between rank 0
# and the host, never closes the ranks' stdin, so rank 0 watches this pid instead.
HOST_PID = "MLXHOST_HOST_PID"


# What a model serves (mlxhost.catalog.tasks): generation, embeddings, reranking.
TASKS = ("generate", "embed", "rerank")


class BadLaunchRecord(Exception):
    pass


@dataclass(frozen=True)
class WorkerOptions:
    """The settings a worker reads, by their `Settings` names: exactly those, and no others.

    The parent fills every one from its own settings (a model's own `max_batch`, `max_tokens_limit`,
    `kv_bits`, `kv_group_size`, `speculate` and `draft_tokens` over the host's); None is the
    setting's default, for a record written by hand (tests). `tests/unit/test_launch.py` fails when
    worker code reads a setting this record does not carry: such a setting would silently keep its
    default in every worker. Not carried: what only a worker that is its own host (`--in-process`)
    reads, its front door's settings.
    """

    max_body_bytes: int | None = None
    body_timeout: float | None = None
    default_max_tokens: int | None = None
    max_tokens_limit: int | None = None
    max_batch: int | None = None
    prefill_batch: int | None = None
    prefill_step: int | None = None
    kv_layout: str | None = None
    kv_bits: int | None = None
    kv_group_size: int | None = None
    speculate: str | None = None
    draft_tokens: int | None = None
    prefill_chunk_ms: float | None = None
    prompt_cache_size: int | None = None
    prompt_cache_mb: int | None = None
    prompt_cache_disk_mb: int | None = None
    keepalive_seconds: float | None = None
    stream_interval: float | None = None
    shutdown_grace: float | None = None
    stall_timeout: float | None = None
    log_level: str | None = None
    state_dir: str | None = None  # resolved by the parent: every worker files its caches in one place

    def given(self) -> dict[str, Any]:
        """The options the record sets (not None), by name."""
        return {name: value for name, value in asdict(self).items() if value is not None}


WORKER_OPTIONS = tuple(f.name for f in fields(WorkerOptions))


@dataclass(frozen=True)
class LaunchRecord:
    worker_id: str
    socket: str
    model_path: str
    model_id: str
    options: WorkerOptions = field(default_factory=WorkerOptions)
    version: int = PROTOCOL_VERSION
    adapter_path: str | None = None  # LoRA adapters loaded over the model
    draft_path: str | None = None  # a draft model for speculative decoding (its directory)
    # A worker group's rank (MLX_RANK set by mlx.launch): how the model is split, "tensor" or
    # "pipeline" (mlxhost.catalog.ranks); None: a single worker.
    sharding: str | None = None
    # What the worker serves (mlxhost.catalog.tasks.TASKS), as its [[model]] or its files say.
    tasks: list[str] = field(default_factory=lambda: ["generate"])

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode() + b"\n"

    @classmethod
    def decode(cls, line: bytes | str) -> LaunchRecord:
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise BadLaunchRecord(f"the launch record is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadLaunchRecord("the launch record is not a JSON object")
        version = data.get("version")
        if version != PROTOCOL_VERSION:
            raise BadLaunchRecord(
                f"launch record protocol version {version!r}, this worker speaks "
                f"{PROTOCOL_VERSION}: parent and worker come from different mlxhost versions"
            )
        options = data.get("options", {})
        if not isinstance(options, dict):
            raise BadLaunchRecord("malformed launch record: 'options' must be an object")
        unknown = sorted(set(options) - set(WORKER_OPTIONS))
        if unknown:
            raise BadLaunchRecord(f"malformed launch record: unknown options {', '.join(map(repr, unknown))}")
        try:
            record = cls(**{**data, "options": WorkerOptions(**options)})
        except TypeError as exc:
            raise BadLaunchRecord(f"malformed launch record: {exc}") from None
        for name in ("worker_id", "socket", "model_path", "model_id"):
            if not isinstance(getattr(record, name), str) or not getattr(record, name):
                raise BadLaunchRecord(f"malformed launch record: '{name}' must be a non-empty string")
        for name in ("adapter_path", "draft_path"):
            value = getattr(record, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise BadLaunchRecord(f"malformed launch record: '{name}' must be a non-empty string or null")
        if not isinstance(record.tasks, list) or not record.tasks or any(
            t not in TASKS for t in record.tasks
        ):
            raise BadLaunchRecord("malformed launch record: 'tasks' must list generate, embed or rerank")
        if record.sharding not in (None, "tensor", "pipeline"):
            raise BadLaunchRecord("malformed launch record: 'sharding' must be tensor, pipeline or null")
        return record


@dataclass(frozen=True)
class ReadyLine:
    pid: int
    socket: str
    model_id: str
    version: int
    load_seconds: float
    # A group's ranks, each {"rank", "host", "pid"}, every one loaded; empty for a single worker.
    ranks: list[dict[str, Any]] = field(default_factory=list)

    def encode(self) -> str:
        return WORKER_READY + json.dumps(asdict(self))


@dataclass(frozen=True)
class StandbyLine:
    pid: int

    def encode(self) -> str:
        return WORKER_STANDBY + json.dumps(asdict(self))


@dataclass(frozen=True)
class MemoryReading:
    active_bytes: int
    cache_bytes: int
    peak_bytes: int
    rss_bytes: int

    def encode(self) -> str:
        return WORKER_EVENT + json.dumps({"type": "worker.memory", **asdict(self)})


@dataclass(frozen=True)
class SpeculationReading:
    """A worker's speculative decoding since it started (its engine's totals): draft tokens
    verified, those the model kept, a row's steps that verified drafts, and the tokens those
    steps produced (the kept drafts and the model's own next token each)."""

    drafted_tokens: int
    accepted_tokens: int
    verifications: int
    verified_tokens: int

    @property
    def acceptance(self) -> float | None:
        """The share of the drafts the model kept; None before any draft was verified."""
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else None

    @property
    def tokens_per_verification(self) -> float | None:
        return self.verified_tokens / self.verifications if self.verifications else None

    def encode(self) -> str:
        return WORKER_EVENT + json.dumps({"type": "worker.speculation", **asdict(self)})


@dataclass(frozen=True)
class SessionProgress:
    session: str  # the host's session id
    tokens: int
    tokens_per_s: float
    prompt_tokens: int = 0
    done: bool = False  # the session ended and the worker no longer holds its sequence
    inputs: int = 0  # an embed or rerank request's inputs, pooled (none for a generation)
    # Speculative decoding's draft tokens verified, and those the model kept: said when `done`.
    drafted_tokens: int = 0
    accepted_tokens: int = 0

    def encode(self) -> str:
        return WORKER_EVENT + json.dumps({"type": "session.progress", **asdict(self)})


def parse_line(
    line: str,
) -> ReadyLine | StandbyLine | MemoryReading | SpeculationReading | SessionProgress | None:
    """A protocol line from a worker's stdout, or None for a log line."""
    try:
        if line.startswith(WORKER_READY):
            return ReadyLine(**json.loads(line[len(WORKER_READY) :]))
        if line.startswith(WORKER_STANDBY):
            return StandbyLine(**json.loads(line[len(WORKER_STANDBY) :]))
        if line.startswith(WORKER_EVENT):
            data = json.loads(line[len(WORKER_EVENT) :])
            kind = data.pop("type", None)
            if kind == "worker.memory":
                return MemoryReading(**data)
            if kind == "worker.speculation":
                return SpeculationReading(**data)
            if kind == "session.progress":
                return SessionProgress(**data)
    except (ValueError, TypeError):
        pass
    return None
