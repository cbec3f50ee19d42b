"""The restart budget: after a worker exits, whether to respawn it, after how long, or to give up.

At most `limit` respawns in a rolling `window` seconds, and at most `limit` failed starts in a
row (exits before ready: a load that keeps timing out outlasts any window). Two early exits in a
row (within `early_exit` seconds of their spawn) wait `crash_backoff` before the next try, so a
model that cannot load does not spin. An exit marked permanent (a launch mismatch) is never
retried: every try would end the same way.

Pure: no I/O, no waiting; the clock is injectable, so tests drive time by hand. The supervisor
asks after every unplanned exit, and resets the budget on an operator's restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mlxhost.config import Settings
from mlxhost.host.workers.status import WorkerExit

__all__ = ["GiveUp", "Respawn", "RestartBudget"]


@dataclass(frozen=True)
class Respawn:
    delay: float  # seconds to wait before spawning again (the crash-loop backoff), or 0
    attempt: int  # respawns within the window, this one included


@dataclass(frozen=True)
class GiveUp:
    why: str  # for the log, the event and the requests refused meanwhile
    code: str  # the error code requests get: worker_cannot_start or restart_limit_reached


class RestartBudget:
    def __init__(
        self,
        limit: int,
        window: float,
        early_exit: float,
        crash_backoff: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.window = window
        self.early_exit = early_exit
        self.crash_backoff = crash_backoff
        self._clock = clock
        self._respawns: list[float] = []  # when each respawn within the window was granted
        self._failed_starts = 0  # exits in a row without having become ready
        self._early_exits = 0  # exits in a row within `early_exit` of their spawn

    @classmethod
    def from_settings(cls, settings: Settings, clock: Callable[[], float] = time.monotonic) -> RestartBudget:
        return cls(settings.restart_limit, settings.restart_window, settings.early_exit, settings.crash_backoff, clock)

    def after_exit(self, exit: WorkerExit) -> Respawn | GiveUp:
        """Count an unplanned exit; say whether to respawn (and after what delay) or to give up."""
        self._early_exits = self._early_exits + 1 if exit.uptime < self.early_exit else 0
        self._failed_starts = 0 if exit.ready else self._failed_starts + 1
        now = self._clock()
        self._respawns = [t for t in self._respawns if now - t < self.window]
        gave_up = self._gives_up(exit)
        if gave_up is not None:
            # The crash-loop counters start over; the window keeps its respawns until a reset.
            self._early_exits = self._failed_starts = 0
            return gave_up
        self._respawns.append(now)
        return Respawn(self.crash_backoff if self._early_exits >= 2 else 0.0, len(self._respawns))

    def reset(self) -> None:
        """An operator's restart: the window's respawns and the failed starts are forgotten."""
        self._respawns.clear()
        self._failed_starts = 0

    def _gives_up(self, exit: WorkerExit) -> GiveUp | None:
        last = exit.describe()
        if exit.permanent:
            return GiveUp(
                f"its worker cannot start ({last}); another try would end the same way", "worker_cannot_start"
            )
        if len(self._respawns) >= self.limit:
            why = f"its worker exited {len(self._respawns) + 1} times within {self.window:g}s (last: {last})"
        elif self._failed_starts > self.limit:
            why = f"its worker failed to start {self._failed_starts} times in a row (last: {last})"
        else:
            return None
        return GiveUp(why, "restart_limit_reached")
