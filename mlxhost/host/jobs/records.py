"""Every job's record as this host knows it: the store, and what the store could not take.

The store failing (a full disk, mostly) never ends the host: a change it cannot take is kept in
memory (the API shows it) and written once the store takes writes again; `problem` says why
meanwhile. The jobs not yet ended are kept in memory too (`live`), as last known: what a record
falls back on when the store cannot be read.

A job's end goes through `finish`, which records it and announces it on the event stream.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from mlxhost.host.events import EventHub
from mlxhost.host.jobs.store import JobStore, StoreFailed, now_ms
from mlxhost.wire.admin import JobFinished
from mlxhost.wire.admin.jobs import JobRecord, JobState

__all__ = ["JobRecords"]

logger = logging.getLogger("mlxhost.jobs")

RECENT = 20  # jobs the state snapshot carries


class JobRecords:
    def __init__(self, store: JobStore, state_dir: Path, events: EventHub) -> None:
        self.store = store
        self.state_dir = state_dir
        self.events = events
        self.problem: str | None = None  # why jobs cannot be recorded now; None when they can
        # Jobs not yet ended, as last known: what a record falls back on when the store cannot be read.
        self.live: dict[str, JobRecord] = {}
        # Records the store could not take: (the record as it is now, the changes still to write).
        self.unsaved: dict[str, tuple[JobRecord, dict[str, Any]]] = {}

    # -- reading -------------------------------------------------------------------------------

    def find(self, job_id: str) -> JobRecord | None:
        """The job's record, None when there is none; StoreFailed when the store cannot be read."""
        if job_id in self.unsaved:
            return self.unsaved[job_id][0]
        return self.store.get(job_id)

    def peek(self, job_id: str) -> JobRecord | None:
        """The job's record as best known, for a reader that must not fail (a tail): the store, or memory."""
        try:
            return self.find(job_id)
        except StoreFailed:
            return self.live.get(job_id)

    def record_of(self, job_id: str) -> JobRecord:
        """A job the runner works on, as best known; never fails."""
        record = self.peek(job_id)
        assert record is not None, job_id  # a job in line or running is in memory (live)
        return record

    def all(self) -> list[JobRecord]:
        """Newest first; StoreFailed when the store cannot be read."""
        return self._overlaid(self.store.newest())

    def recent(self) -> list[JobRecord]:
        """The newest few, for the state snapshot: what memory knows when the store cannot be read."""
        try:
            return self._overlaid(self.store.newest(RECENT))
        except StoreFailed:
            known = {**self.live, **{job_id: record for job_id, (record, _) in self.unsaved.items()}}
            return sorted(known.values(), key=lambda r: r.created_at, reverse=True)[:RECENT]

    def _overlaid(self, records: list[JobRecord]) -> list[JobRecord]:
        return [self.unsaved[r.id][0] if r.id in self.unsaved else r for r in records]

    # -- writing -------------------------------------------------------------------------------

    def create(self, record: JobRecord) -> None:
        """Record a new job; StoreFailed (and nothing recorded) when the store cannot take it."""
        self.flush()  # what earlier jobs could not write goes first
        self.store.create(record)
        self.saved()
        self.live[record.id] = record

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        """The store's update; when it cannot take it, the change is kept in memory and written later."""
        try:
            self.flush()
            record = self.store.update(job_id, **changes)
        except StoreFailed as exc:
            self.failed(exc)
            return self._keep(job_id, changes)
        self.saved()
        if job_id in self.live:
            self.live[job_id] = record
        return record

    def finish(self, job_id: str, state: JobState, error: str | None) -> JobRecord:
        """Record how the job ended, and announce it."""
        record = self.update(job_id, state=state, error=error, pid=None, pid_started=None, ended_at=now_ms())
        if job_id not in self.unsaved:
            self.live.pop(job_id, None)
        model = record.result.model if record.result else None
        self.events.publish(JobFinished(job=job_id, state=state.value, error=error, model=model))
        log = logger.info if state is JobState.SUCCEEDED else logger.warning
        log(
            "job %s: %s%s",
            job_id,
            state.value,
            f" ({error})" if error else f", serving {model}" if model else "",
        )
        return record

    def _keep(self, job_id: str, changes: dict[str, Any]) -> JobRecord:
        before, pending = self.unsaved.get(job_id) or (self.record_of(job_id), {})
        shown = {name: str(value) if name == "state" else value for name, value in changes.items()}
        shown.pop("pid_started", None)
        record = dataclasses.replace(before, **shown)
        self.unsaved[job_id] = (record, {**pending, **changes})
        if job_id in self.live:
            self.live[job_id] = record
        return record

    # -- the store's health ----------------------------------------------------------------------

    def flush(self) -> None:
        """Write what the store could not take before; StoreFailed while it still cannot."""
        for job_id, (record, changes) in list(self.unsaved.items()):
            if self.store.get(job_id) is not None:
                self.store.update(job_id, **changes)
            del self.unsaved[job_id]
            if record.job_state.terminal:
                self.live.pop(job_id, None)

    def check(self) -> None:
        """Notice a store deleted under the host (and write it again), and one that takes writes again."""
        try:
            self.store.check()
            if self.problem is not None or self.unsaved:
                self.flush()
                self.store.probe()
        except StoreFailed as exc:
            self.failed(exc)
            return
        self.saved()

    def failed(self, exc: StoreFailed) -> None:
        """The store could not take a write: `problem` says why."""
        problem = (
            f"the state directory {self.state_dir} is full: jobs cannot be recorded"
            if exc.full
            else f"jobs cannot be recorded: {exc}"
        )
        if problem != self.problem:
            logger.warning("%s", problem)
        self.problem = problem

    def saved(self) -> None:
        """The store took a write: the problem, if any, is over."""
        if self.problem is not None:
            logger.info("the job store %s takes writes again", self.store.path)
            self.problem = None
