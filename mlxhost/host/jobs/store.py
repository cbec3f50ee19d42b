"""The job store: every job's record, durable across host restarts (SQLite in WAL mode, stdlib).

One row per job, holding what `GET /admin/jobs/{id}` shows (`JobRecord`) plus the start time of
its process, which tells that process from a later one given the same pid. The job's log, spec and
output live in its own folder beside the database (`mlxhost.host.jobs.runner`).

Calls run on the event loop, synchronously: a job writes a handful of rows in its life (progress
at most about once a second), each a sub-millisecond local transaction; a thread hop per call
would cost more than it saves. WAL lets a reader (another `mlxhost` command) read while it writes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlxhost.wire.admin.jobs import JobProgress, JobRecord, JobResult, JobState

__all__ = ["JobStore", "now_ms"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    state TEXT NOT NULL,
    options TEXT NOT NULL,
    progress TEXT,
    result TEXT,
    error TEXT,
    pid INTEGER,
    pid_started REAL,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    ended_at INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_by_age ON jobs (created_at);
"""
_COLUMNS = (
    "id", "kind", "model", "state", "options", "progress", "result", "error", "pid", "pid_started",
    "created_at", "started_at", "ended_at",
)  # fmt: skip
_UPDATABLE = frozenset(
    {"state", "progress", "result", "error", "pid", "pid_started", "started_at", "ended_at"}
)


def now_ms() -> int:
    return int(time.time() * 1000)


class JobStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        # The host's one connection; the event loop is its only user (see the module's note).
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def create(self, record: JobRecord) -> None:
        row = self._row(record)
        with self._transaction():
            self._db.execute(
                f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                [row[c] for c in _COLUMNS],
            )

    def get(self, job_id: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def process_of(self, job_id: str) -> tuple[int, float] | None:
        """The pid of the job's process and that process's start time, while it runs."""
        row = self._db.execute("SELECT pid, pid_started FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None or row["pid"] is None or row["pid_started"] is None:
            return None
        return int(row["pid"]), float(row["pid_started"])

    def newest(self, limit: int | None = None) -> list[JobRecord]:
        """Newest first."""
        sql = "SELECT * FROM jobs ORDER BY created_at DESC, rowid DESC"
        rows = self._db.execute(sql + (" LIMIT ?" if limit else ""), (limit,) if limit else ()).fetchall()
        return [_record(row) for row in rows]

    def in_states(self, states: Sequence[JobState]) -> list[JobRecord]:
        marks = ", ".join("?" * len(states))
        rows = self._db.execute(
            f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY created_at, rowid",
            [s.value for s in states],
        ).fetchall()
        return [_record(row) for row in rows]

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        values = {name: _column_value(name, value) for name, value in changes.items()}
        with self._transaction():
            self._db.execute(
                f"UPDATE jobs SET {', '.join(f'{n} = ?' for n in values)} WHERE id = ?",
                [*values.values(), job_id],
            )
        record = self.get(job_id)
        assert record is not None, job_id
        return record

    def beyond(self, keep: int) -> list[JobRecord]:
        """Finished jobs past the newest `keep` finished ones: the history's overflow, oldest first."""
        finished = [r for r in self.newest() if r.job_state.terminal]
        return list(reversed(finished[keep:]))

    def delete(self, job_id: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @staticmethod
    def _row(record: JobRecord) -> dict[str, Any]:
        row = {name: _column_value(name, getattr(record, name)) for name in _COLUMNS if name != "pid_started"}
        row["pid_started"] = None
        return row


def _column_value(name: str, value: Any) -> Any:
    if name in ("options", "progress", "result"):
        if value is None:
            return None
        data = value.to_json() if hasattr(value, "to_json") else dict(value)
        return json.dumps(data)
    if name == "state":
        return str(value)
    return value


def _record(row: sqlite3.Row) -> JobRecord:
    progress, result = row["progress"], row["result"]
    return JobRecord(
        id=row["id"],
        kind=row["kind"],
        model=row["model"],
        state=row["state"],
        options=json.loads(row["options"]),
        progress=None if progress is None else JobProgress.from_json(json.loads(progress)),
        result=None if result is None else JobResult.from_json(json.loads(result)),
        error=row["error"],
        pid=row["pid"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
    )
