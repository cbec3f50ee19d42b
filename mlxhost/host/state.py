"""What the parent's routes share: the model pool, the sessions, the event hub, admission, the
execution coordinator, the job runner, metrics.

One `ParentState` per running parent, kept on the Starlette app (`app.state.parent`); the admin
routes and the generation routes read it through `parent_state(request)`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.serving.admission import Admission
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.serving.sessions import SessionRegistry
from mlxhost.host.workers.pool import ModelPool
from mlxhost.catalog.spec import ModelSpec

if TYPE_CHECKING:
    # Types only: the routes stand on this state, and the runner is built after it.
    from mlxhost.host.jobs.runner import JobRunner
    from mlxhost.host.routes.metrics import HostMetrics

__all__ = ["ParentState", "parent_state"]


@dataclass
class ParentState:
    pool: ModelPool
    settings: Settings
    started: int = field(default_factory=lambda: int(time.time()))
    sessions: SessionRegistry = field(default_factory=SessionRegistry)
    events: EventHub = field(default_factory=EventHub)
    admissions: dict[str, Admission] = field(default_factory=dict)
    coordinator: ExecutionCoordinator = field(default_factory=ExecutionCoordinator)
    jobs: JobRunner | None = None  # None: jobs are off (another host owns the state directory)
    admin_token: str | None = None
    metrics: HostMetrics | None = None
    accepting: bool = True

    def admission(self, spec: ModelSpec) -> Admission:
        admission = self.admissions.get(spec.id)
        if admission is None:
            admission = Admission(
                spec.max_active or self.settings.max_active,
                self.settings.max_queued if spec.max_queued is None else spec.max_queued,
            )
            self.admissions[spec.id] = admission
        return admission


def parent_state(request: Request) -> ParentState:
    # Credentials (the admin token among them) were checked at the front door (runtime/guard.py).
    return request.app.state.parent  # type: ignore[no-any-return]
