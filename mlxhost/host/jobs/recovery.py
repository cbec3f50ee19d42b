"""What a host takes over with its state directory: the directory itself, and the jobs a previous host left.

One host owns a state directory at a time (an advisory lock on the directory itself, which no
one deletes by accident as they might a lock file); a second host on the same one runs without
jobs rather than let two runners mark each other's jobs interrupted.

At start, a job the store says is queued or running belongs to a host that is gone: it becomes
`interrupted` (its process, if one is somehow still alive, is killed first). Never resumed. A job
that succeeded serves its model again.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

from mlxhost.host.jobs.folder import JobFolder
from mlxhost.host.jobs.models import serve_output
from mlxhost.host.jobs.process import process_alive
from mlxhost.host.jobs.records import JobRecords
from mlxhost.host.jobs.store import StoreFailed
from mlxhost.host.workers.pool import ModelPool, UnknownModel
from mlxhost.wire.admin.jobs import INTERRUPTED_BY_EXIT, JobState

__all__ = ["owned", "recover"]

logger = logging.getLogger("mlxhost.jobs")


@contextlib.contextmanager
def owned(state_dir: Path) -> Iterator[bool]:
    """Hold the state directory's lock for the block; False when another process holds it.

    The lock is on the directory itself: a lock file can be deleted (a tidy-up, an `rm` of old
    state), and the next host would lock a new file and take over a directory still in use.
    """
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def recover(records: JobRecords, pool: ModelPool, jobs_dir: Path) -> bool:
    """The previous host's jobs: those it left unfinished end interrupted, those it made serve again.

    A store that cannot be read leaves them as they are, logged (the host serves meanwhile), and
    answers False: try again later. One that cannot be written keeps the interruptions in memory
    until it can.
    """
    store = records.store
    try:
        unfinished = store.in_states([JobState.QUEUED, JobState.RUNNING])
        succeeded = store.in_states([JobState.SUCCEEDED])
        processes = {record.id: store.process_of(record.id) for record in unfinished}
    except StoreFailed as exc:
        records.failed(exc)
        logger.warning("jobs: the previous host's jobs cannot be read back yet: %s", exc)
        return False
    for record in unfinished:
        if record.id in records.live:
            continue  # this host's own (recovery came late, once the store could be read)
        process = processes[record.id]
        if process is not None and process_alive(*process):
            # Its host died without it noticing (it ends itself when its stdin closes): end it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process[0], signal.SIGKILL)
        JobFolder(jobs_dir / record.id).discard_output()
        records.live[record.id] = record
        records.finish(record.id, JobState.INTERRUPTED, INTERRUPTED_BY_EXIT)
    for record in succeeded:
        try:
            serve_output(record, JobFolder(jobs_dir / record.id).output, pool, records)
        except (OSError, ValueError, KeyError, UnknownModel) as exc:
            logger.warning("job %s: its model cannot be served: %s", record.id, exc)
    return True
