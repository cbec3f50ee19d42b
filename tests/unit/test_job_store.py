"""The job store: records that outlive the host, and a bounded history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxhost.host.jobs.store import JobStore, StoreFailed
from mlxhost.wire.admin.jobs import JobState
from tests.filesystems import fill, small_tmpfs
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


def test_a_deleted_database_is_written_again_from_the_open_connection(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.create(record(JobState.SUCCEEDED, id="kept"))
    for leftover in tmp_path.glob("jobs.db*"):
        leftover.unlink()  # an operator's `rm jobs.db*`
    store.create(record(JobState.QUEUED, id="new", created_at=9))
    assert path.exists()
    store.close()
    again = JobStore(path)
    assert [r.id for r in again.newest()] == ["new", "kept"]
    again.close()


def test_a_replaced_database_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.create(record(JobState.SUCCEEDED, id="kept"))
    path.rename(tmp_path / "moved.db")
    path.write_bytes(b"someone else's file")
    with pytest.raises(StoreFailed, match="was replaced by another file"):
        store.update("kept", error="x")
    assert path.read_bytes() == b"someone else's file"


def test_a_full_disk_is_a_store_failure_that_passes_once_there_is_room(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", 1024) as small:
        store = JobStore(small / "jobs.db")
        store.create(record(JobState.RUNNING, id="j1"))
        filler = fill(small)
        with pytest.raises(StoreFailed, match="cannot be written: the disk is full") as failed:
            for i in range(50):  # a few may fit in what the WAL already holds
                store.create(record(JobState.QUEUED, id=f"q{i}", options={"pad": "x" * 8000}))
        assert failed.value.full
        assert store.get("j1") is not None  # reads go on
        with pytest.raises(StoreFailed):
            store.probe()
        filler.unlink()
        store.probe()
        store.update("j1", state=JobState.FAILED, error="disk full")
        assert store.get("j1").error == "disk full"  # type: ignore[union-attr]
        store.close()


def test_a_store_that_cannot_open_fails_its_calls_and_opens_later(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "jobs.db"
    store = JobStore(path)  # opening is lazy: the host starts whatever the store's state
    with pytest.raises(StoreFailed, match="cannot be read"):
        store.newest()
    path.parent.mkdir()
    assert store.newest() == []
    store.close()
