"""GET /admin/jobs and job logs, as data: the record the host keeps, and the log a job writes.

Three parties read these shapes: the parent (which stores and tails jobs), the job process (which
writes the log) and the clients (`mlxhost jobs`, the console). Nothing here does I/O.

A job's log is JSON Lines, one `JobLogEvent` per line, appended by the job process as it runs:
`started`, then `progress` (and `message`) lines, then exactly one terminal line: `succeeded`,
`failed`, `cancelled` or `interrupted`. The parent writes the terminal line itself when the process
could not (it was killed, or the host died under it): a reader always finds exactly one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from mlxhost.wire.admin.record import JSON, BadRecord, Record

__all__ = [
    "EXIT_BAD_SPEC",
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_PARENT_GONE",
    "EXIT_SUCCEEDED",
    "INTERRUPTED_BY_EXIT",
    "PARENT_GONE",
    "PARTIAL_SUFFIX",
    "JobKind",
    "JobLogEvent",
    "JobProgress",
    "JobRecord",
    "JobResult",
    "JobState",
    "LaunchedJob",
    "TERMINAL_STATES",
    "parse_log_line",
]

INTERRUPTED_BY_EXIT = "job interrupted by a previous process exit"

# The job process's exit statuses (`python -m mlxhost.job SPEC`); its log's terminal line says more.
EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_BAD_SPEC = 2  # a spec it cannot read, or of another version: no retry would do better
EXIT_CANCELLED = 3  # SIGTERM or SIGINT
EXIT_PARENT_GONE = 4  # its stdin ended: the host is gone
PARENT_GONE = "the host exited"  # the `interrupted` line's error when the job's stdin ends
PARTIAL_SUFFIX = ".partial"  # a job makes `<output>.partial`, renamed to `<output>` on success


class JobKind(StrEnum):
    FINETUNE = "finetune"  # LoRA adapters for a model, from a dataset directory
    QUANTIZE = "quantize"  # a quantized copy of a model
    FUSE = "fuse"  # a finished fine-tune's adapters fused into its base model
    PULL = "pull"  # a model's files from the Hugging Face Hub into the local cache (no lease)


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the host stopped (or died) while it ran

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.INTERRUPTED})


_OPTIONAL = (
    "train_loss", "val_loss", "learning_rate", "iterations_per_s", "tokens_per_s", "peak_memory_bytes",
    "bytes_per_s", "file",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class JobProgress(Record):
    """Where a running job is: the latest `progress` line of its log, folded.

    A pull counts bytes: `iteration` of `total` bytes, at `bytes_per_s`, fetching `file`.
    """

    iteration: int
    total: int
    train_loss: float | None = None
    val_loss: float | None = None
    learning_rate: float | None = None
    iterations_per_s: float | None = None
    tokens_per_s: float | None = None
    peak_memory_bytes: int | None = None
    bytes_per_s: float | None = None  # a pull's rate
    file: str | None = None  # the file a pull fetches

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return {"iteration": data["iteration"], "total": data["total"], **{k: data.get(k) for k in _OPTIONAL}}

    @property
    def fraction(self) -> float:
        return min(1.0, self.iteration / self.total) if self.total > 0 else 0.0


@dataclass(frozen=True, kw_only=True)
class JobResult(Record):
    """What a succeeded job made: the model it registered, and where its files are."""

    model: str  # the new model's id, servable at once
    path: str  # the output directory (adapters for a fine-tune, a model otherwise)


@dataclass(frozen=True, kw_only=True)
class JobRecord(Record):
    """GET /admin/jobs/{id}: one job as the store keeps it."""

    id: str
    kind: str  # a JobKind
    model: str  # the model it works on (for a fuse: the fine-tune's base model)
    state: str  # a JobState
    options: Mapping[str, Any]  # what was asked, validated (kind-specific)
    progress: JobProgress | None
    result: JobResult | None  # once succeeded
    error: str | None  # why it failed, was cancelled or was interrupted
    pid: int | None  # while running
    created_at: int  # unix milliseconds
    started_at: int | None
    ended_at: int | None

    def _encode(self) -> JSON:
        return super()._encode() | {
            "options": dict(self.options),
            "progress": None if self.progress is None else self.progress.to_json(),
            "result": None if self.result is None else self.result.to_json(),
        }

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        progress, result = data["progress"], data["result"]
        return super()._decode(data) | {
            "options": dict(data["options"]),
            "progress": None if progress is None else JobProgress.from_json(progress),
            "result": None if result is None else JobResult.from_json(result),
        }

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)


@dataclass(frozen=True, kw_only=True)
class LaunchedJob(Record):
    """What the parent hands a job process (as JSON, the file named on its command line)."""

    VERSION: ClassVar[int] = 1
    version: int
    id: str
    kind: str  # a JobKind
    model_path: str  # the model it works on
    output: str  # the directory it writes its result into (created by the job)
    log: str  # the JSONL log it appends to
    options: Mapping[str, Any]  # kind-specific, validated by the parent; paths resolved
    adapter_path: str | None = None  # fuse: the fine-tune's adapter directory

    def _encode(self) -> JSON:
        return super()._encode() | {"options": dict(self.options)}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return {**{k: data[k] for k in ("version", "id", "kind", "model_path", "output", "log", "options")},
                "adapter_path": data.get("adapter_path")}  # fmt: skip


@dataclass(frozen=True)
class JobLogEvent:
    """One line of a job's log: `{"type": ..., "ts": unix_ms, ...}`.

    Types: `started`; `progress` (the fields of JobProgress); `message` (`text`); and the terminal
    ones, `succeeded` (`output`), `failed`, `cancelled` and `interrupted` (`error`).
    """

    type: str
    ts: int
    data: Mapping[str, Any] = field(default_factory=dict)  # the other keys

    TERMINAL: ClassVar[frozenset[str]] = frozenset(s.value for s in TERMINAL_STATES)

    @property
    def terminal(self) -> bool:
        return self.type in self.TERMINAL

    def to_json(self) -> JSON:
        return {"type": self.type, "ts": self.ts, **self.data}

    def line(self) -> str:
        """The log line, newline included; non-finite numbers (a diverged loss) become null."""
        return json.dumps(_finite(self.to_json()), separators=(",", ":")) + "\n"

    def progress(self) -> JobProgress | None:
        if self.type != "progress":
            return None
        try:
            return JobProgress.from_json(self.data)
        except BadRecord:
            return None


def parse_log_line(line: str | bytes) -> JobLogEvent:
    """A log line as an event; ValueError for a line that is not one (a half-written last line)."""
    data = json.loads(line)
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError("a job log line is an object with a 'type'")
    ts = data.get("ts")
    rest = {k: v for k, v in data.items() if k not in ("type", "ts")}
    return JobLogEvent(data["type"], ts if isinstance(ts, int) else 0, rest)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
