"""The job store: every job's record, durable across host restarts (SQLite in WAL mode, stdlib).

One row per job, holding what `GET /admin/jobs/{id}` shows (`JobRecord`) plus the start time of
its process, which tells that process from a later one given the same pid. The job's log, spec and
output live in its own folder beside the database (`mlxhost.host.jobs.folder`).

Calls run on the event loop, synchronously: a job writes a handful of rows in its life (progress
at most about once a second), each a sub-millisecond local transaction; a thread hop per call
would cost more than it saves. WAL lets a reader (another `mlxhost` command) read while it writes.

Every SQLite error comes out as `StoreFailed` (a full disk, a read-only or vanished file): the
runner keeps serving without the store rather than end the host over it. The connection opens
lazily and again after a failed open, so a store on a full disk starts working once there is room.
The database file deleted under the host (its inode gone from the path) is recreated from the
connection, which still holds the old one open: `check` does that, and every write calls it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlxhost.wire.admin.jobs import JobProgress, JobRecord, JobResult, JobState

__all__ = ["JobStore", "StoreFailed", "now_ms"]

logger = logging.getLogger("mlxhost.jobs")

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


class StoreFailed(Exception):
    """The store cannot be read or written; `full` when for want of space."""

    def __init__(self, message: str, *, full: bool = False) -> None:
        super().__init__(message)
        self.full = full


class JobStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        # The host's one connection; the event loop is its only user (see the module's note).
        self._db: sqlite3.Connection | None = None
        self._inode: tuple[int, int] | None = None  # (device, inode) of the file the connection opened
        self._rescued: sqlite3.Connection | None = None  # a deleted file's rows, until written again

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def create(self, record: JobRecord) -> None:
        row = self._row(record)
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                [row[c] for c in _COLUMNS],
            )

    def get(self, job_id: str) -> JobRecord | None:
        with self._failing("read"):
            row = self._connection().execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def process_of(self, job_id: str) -> tuple[int, float] | None:
        """The pid of the job's process and that process's start time, while it runs."""
        with self._failing("read"):
            sql = "SELECT pid, pid_started FROM jobs WHERE id = ?"
            row = self._connection().execute(sql, (job_id,)).fetchone()
        if row is None or row["pid"] is None or row["pid_started"] is None:
            return None
        return int(row["pid"]), float(row["pid_started"])

    def newest(self, limit: int | None = None) -> list[JobRecord]:
        """Newest first."""
        sql = "SELECT * FROM jobs ORDER BY created_at DESC, rowid DESC"
        with self._failing("read"):
            db = self._connection()
            rows = db.execute(sql + (" LIMIT ?" if limit else ""), (limit,) if limit else ()).fetchall()
        return [_record(row) for row in rows]

    def in_states(self, states: Sequence[JobState]) -> list[JobRecord]:
        marks = ", ".join("?" * len(states))
        with self._failing("read"):
            rows = self._connection().execute(
                f"SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY created_at, rowid",
                [s.value for s in states],
            ).fetchall()
        return [_record(row) for row in rows]

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        unknown = set(changes) - _UPDATABLE
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        values = {name: _column_value(name, value) for name, value in changes.items()}
        with self._transaction() as db:
            db.execute(
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
        with self._transaction() as db:
            db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def probe(self) -> None:
        """Write something small (a counter in the file's header): StoreFailed while the store cannot."""
        with self._transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            db.execute(f"PRAGMA user_version = {(int(version) + 1) % (1 << 30)}")

    def check(self) -> None:
        """Recreate the database file if it was deleted under the host, from the connection that holds it.

        A file replaced by another one is left alone: StoreFailed says so (and no write is made)
        until the host restarts and opens that one.
        """
        if self._db is None or self._inode is None:
            return
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreFailed(f"the job store {self.path} cannot be read: {exc.strerror}") from None
        else:
            if (found.st_dev, found.st_ino) == self._inode:
                return
            raise StoreFailed(f"the job store {self.path} was replaced by another file; restart the host")
        logger.warning("the job store %s was deleted: writing it again from the host's open copy", self.path)
        # The old file's -wal and -shm are still at the path: a new file must not open beside them.
        # Copy it out, close it (which checkpoints and removes them), then write the copy back.
        rescued = sqlite3.connect(":memory:", check_same_thread=False)
        with self._failing("read"):
            self._db.backup(rescued)
        self._db.close()
        self._db, self._inode, self._rescued = None, None, rescued
        with self._failing("written"):
            self._connection()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self.check()
        with self._failing("written"):
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:  # SQLite has already rolled back after SQLITE_FULL
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            db, inode = self._open()
            if self._rescued is not None:
                try:
                    self._rescued.backup(db)
                    db.execute("PRAGMA journal_mode=WAL")
                except BaseException:
                    db.close()
                    raise
                self._rescued.close()
                self._rescued = None
            self._db, self._inode = db, inode
        return self._db

    def _open(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable at checkpoints, never corrupt
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
            found = os.stat(self.path)
        except BaseException:
            db.close()
            raise
        return db, (found.st_dev, found.st_ino)

    @contextmanager
    def _failing(self, done: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as exc:
            full = _full(exc)
            what = (
                "the disk is full" if full else str(exc) if isinstance(exc, sqlite3.Error) else exc.strerror
            )
            raise StoreFailed(f"the job store {self.path} cannot be {done}: {what}", full=full) from exc

    @staticmethod
    def _row(record: JobRecord) -> dict[str, Any]:
        row = {name: _column_value(name, getattr(record, name)) for name in _COLUMNS if name != "pid_started"}
        row["pid_started"] = None
        return row


def _full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return getattr(exc, "sqlite_errorname", None) == "SQLITE_FULL" or "disk is full" in str(exc)


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
