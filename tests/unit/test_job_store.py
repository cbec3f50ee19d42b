"""The job store: records that outlive the host, and a bounded history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxhost.host.jobs.store import JobStore
from mlxhost.wire.admin.jobs import JobState
from tests.unit.test_job_tail import record


def test_the_store_keeps_jobs_across_connections(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.create(record(JobState.QUEUED, ended_at=None, started_at=None, options={"iters": 5}))
    store.update("j1", state=JobState.RUNNING, pid=4242, pid_started=123.5, started_at=10)
    store.close()
    again = JobStore(path)
    kept = again.get("j1")
    assert kept is not None and kept.state == "running" and kept.pid == 4242 and kept.options == {"iters": 5}
    assert again.process_of("j1") == (4242, 123.5)
    assert [r.id for r in again.in_states([JobState.RUNNING])] == ["j1"]
    with pytest.raises(ValueError):
        again.update("j1", kind="quantize")
    again.close()


def test_the_history_is_bounded_to_the_newest_finished_jobs(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    for i in range(5):
        state = JobState.RUNNING if i == 4 else JobState.SUCCEEDED
        store.create(record(state, id=f"j{i}", created_at=i))
    assert [r.id for r in store.beyond(2)] == ["j0", "j1"]  # oldest first; the running one never counts
    store.delete("j0")
    assert [r.id for r in store.newest()] == ["j4", "j3", "j2", "j1"]
    assert json.loads(json.dumps(store.newest(1)[0].to_json()))["id"] == "j4"
