"""The job's spec: the `LaunchedJob` file named on the command line, and the options it carries.

The parent validated the options already; reading them again here, with the same defaults as the
admin API, keeps a hand-written spec (or a parent of another version) from failing deep inside
mlx-lm with a message about something else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from mlxhost.job import JobError
from mlxhost.wire.admin.jobs import JobKind, LaunchedJob
from mlxhost.wire.admin.record import BadRecord
from mlxhost.wire.inert import excerpt

__all__ = ["BadSpec", "load_spec", "model_directory", "option"]

T = TypeVar("T", int, float, str)


class BadSpec(Exception):
    """A spec this job cannot run: unreadable, not a LaunchedJob, or of another version."""

    def __init__(self, message: str, log: str | None) -> None:
        super().__init__(message)
        self.log = log  # where to say so, if the spec got that far


def load_spec(path: str | Path) -> LaunchedJob:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadSpec(f"cannot read the job spec {path}: {excerpt(exc, 200)}", None) from None
    log = data.get("log") if isinstance(data, dict) and isinstance(data.get("log"), str) else None
    try:
        spec = LaunchedJob.from_json(data)
    except BadRecord as exc:
        raise BadSpec(f"the job spec {path} is {exc}", log) from None
    if spec.version != LaunchedJob.VERSION:
        raise BadSpec(f"job spec version {spec.version!r}; this job process reads {LaunchedJob.VERSION}", log)
    if spec.kind not in JobKind.__members__.values():
        raise BadSpec(f"unknown job kind {excerpt(spec.kind)!r}", log)
    if spec.kind == JobKind.FUSE and not spec.adapter_path:
        raise BadSpec("a fuse job needs an adapter_path", log)
    return spec


def option(options: Mapping[str, Any], name: str, kind: type[T], default: T) -> T:
    """`options[name]` as a `kind` (an int for a float is fine), or `default` when it is absent or null."""
    value = options.get(name)
    if value is None:
        return default
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        article = "an" if kind is int else "a"
        raise JobError(f"option {name!r} must be {article} {kind.__name__}, not {excerpt(value)}")
    return value


def model_directory(spec: LaunchedJob) -> Path:
    """The spec's model, which must be a local directory: mlx-lm would take any other name for a
    Hugging Face repository to download."""
    path = Path(spec.model_path)
    if not path.is_dir():
        raise JobError(f"the model directory {path} does not exist")
    return path
