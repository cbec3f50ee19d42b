"""The job's log: JSON Lines appended to the file the spec names, one whole line per write.

The parent tails this file while the job runs, so every line goes out in a single `os.write` on a
descriptor opened with O_APPEND: a reader never sees half a line followed by another line, and a
signal handler that stops the job between two events cannot split one.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mlxhost.wire.admin.jobs import JobLogEvent, JobProgress

__all__ = ["JobLog"]


class JobLog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def write(self, type: str, **data: Any) -> JobLogEvent:
        event = JobLogEvent(type, time.time_ns() // 1_000_000, data)
        line = event.line().encode()
        while line:  # a regular file takes it whole; the loop only guards the contract
            line = line[os.write(self._fd, line) :]
        return event

    def started(self, kind: str) -> None:
        self.write("started", kind=kind, pid=os.getpid())

    def progress(self, progress: JobProgress) -> None:
        # What a report lacks is left out rather than written as null: the lines stay short.
        self.write("progress", **{k: v for k, v in progress.to_json().items() if v is not None})

    def message(self, text: str) -> None:
        self.write("message", text=text)

    def close(self) -> None:
        os.close(self._fd)
