"""The job process: `python -m mlxhost.job SPEC.json` runs one managed job with mlx-lm and ends.

The parent writes a `LaunchedJob` (mlxhost.wire.admin.jobs) to SPEC.json, starts this process with
a pipe on its stdin and its stdout and stderr in a file, and tails the JSONL log the spec names.
The job does one thing, with mlx-lm's own machinery: a LoRA fine-tune (`finetune`), a quantized
copy (`quantize`) or a fine-tune fused into its base model (`fuse`).

    log          `started`, then `progress` and `message` lines, then exactly one terminal line
    output       written into `<output>.partial`, renamed to `<output>` only on success
    SIGTERM/INT  stop at the next safe point: `cancelled`, exit 3
    stdin EOF    the parent is gone: `interrupted` ("the host exited"), exit 4

Exit statuses: 0 succeeded, 1 failed, 2 a spec it cannot read (or of another version), 3
cancelled, 4 the parent gone. Only this package's kind modules import MLX; importing the package
itself does not.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BAD_SPEC",
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_PARENT_GONE",
    "EXIT_SUCCEEDED",
    "PARENT_GONE",
    "PARTIAL_SUFFIX",
    "JobError",
]

# One definition of each, shared with the parent (which never imports this package).
from mlxhost.wire.admin.jobs import (  # noqa: E402
    EXIT_BAD_SPEC,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_PARENT_GONE,
    EXIT_SUCCEEDED,
    PARENT_GONE,
    PARTIAL_SUFFIX,
)


class JobError(Exception):
    """A job that cannot go on, with a message an operator can act on (which file, which line)."""
