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

    # What a request for a model is told while its worker is not ready and cannot be waited for.

    @classmethod
    def unloaded(cls, model: str) -> WorkerUnavailable:
        return cls(f"the model '{model}' was unloaded", code="model_unloaded", retry_after=1.0)

    @classmethod
    def restarting(cls, model: str, eta: float) -> WorkerUnavailable:
        """Held back by the crash-loop backoff; back in about `eta` seconds."""
        return cls(
            f"the model '{model}' is restarting after its worker exited; try again in about {eta:.0f}s",
            code="model_restarting",
            retry_after=eta,
        )

    @classmethod
    def exhausted(cls, model: str, why: str, code: str) -> WorkerUnavailable:
        """Given up on until an operator's restart."""
        return cls(
            f"the model '{model}' is not available: {why}. "
            f"Fix the cause, then POST /admin/workers/{model}/restart or restart the host.",
            code=code,
        )


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
