"""What the host knows about a worker's condition: its state, how it last ended, why it can't serve."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mlxhost.wire.admin import ExitRecord

__all__ = ["WorkerExit", "WorkerState", "WorkerUnavailable"]


class WorkerState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    RESTARTING = "restarting"
    EXHAUSTED = "exhausted"
    CLOSED = "closed"


class WorkerUnavailable(Exception):
    """The worker cannot take a request now; `retry_after` says when to try again, if ever."""

    def __init__(self, message: str, code: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retry_after = retry_after


@dataclass(frozen=True)
class WorkerExit:
    pid: int | None  # None: no process was ever started
    code: int | None  # exit status, or None when a signal ended it (or it never started)
    signal: str | None
    uptime: float  # seconds from spawn to exit
    ready: bool  # whether it had become ready
    reason: str | None = None  # why, when the worker said so on stderr or never became ready
    permanent: bool = False  # trying again cannot help (a launch or protocol mismatch)

    def describe(self) -> str:
        if self.signal:
            how = f"signal {self.signal}"
        elif self.code is not None:
            how = f"exit code {self.code}"
        else:
            return self.reason or "unknown"
        return f"{how}: {self.reason}" if self.reason else how

    def record(self) -> ExitRecord:
        """What the admin API says of it."""
        return ExitRecord(
            pid=self.pid,
            code=self.code,
            signal=self.signal,
            uptime_s=round(self.uptime, 3),
            ready=self.ready,
            reason=self.reason,
        )
