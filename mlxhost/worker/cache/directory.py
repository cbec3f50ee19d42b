"""The prompt-cache directory as a whole: one bound across its models' folders, a free-space floor,
and the removal of folders no worker will use again.

<state_dir>/prompt-cache/ holds one folder per model fingerprint (cache/folder.py), each owned by
at most one worker at a time (an advisory lock on the folder's `.lock`, `FolderLock`). The
bound, `prompt_cache_disk_mb`, is the directory's, not each folder's: each fine-tune is a model of
its own, and a bound per folder let disk use grow by a whole bound per job.

How the workers share it: a worker changes the directory only while it holds the tier's own lock
(`prompt-cache/.lock`), and only briefly: to write one file and make room for it, and at its
start to sweep. Under that lock it counts every cache file of every folder, and makes room by
removing the least recently used ones, whichever folder they are in (a file's mtime is its last
use, in every folder): one LRU for the directory, so a model that filled the bound first does not
keep every other model's caches off the disk for as long as its worker lives. Removing a file of
a folder another worker owns is safe: no file is being written while the tier's lock is held, a
file that is being read stays readable once opened, and an owner that later looks for a removed
file takes it as evicted (a miss: the request prefills). So the directory is within the bound
after every write. Whole folders are removed only when no worker owns them (their lock is taken).

Room is also free space: a file is written only if the filesystem keeps `free_floor` bytes free
after it, whatever the bound says, so that the cache never takes the space the host's job store,
its logs and the jobs' outputs need.

At a worker's start, the sweep removes whole folders whose model or adapter is gone or changed
(`folder_is_orphan`: a pruned job's fine-tune, a re-downloaded model), unless a worker owns them,
and folders a crash left half made.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mlxhost.worker.cache.files import SUFFIX, is_leftover
from mlxhost.worker.cache.folder import folder_is_orphan

__all__ = [
    "LOCK_FILE",
    "FolderLock",
    "Others",
    "TierStopped",
    "free_floor",
    "lock_nowait",
    "others",
    "sweep",
    "tier_locked",
]

logger = logging.getLogger("mlxhost.engine")

LOCK_FILE = ".lock"  # in the tier's directory, and in each folder
# The free-space floor: 5% of the filesystem, at least 64 MiB, so that a full cache never starves
# the rest of the state directory (the job store, fine-tune outputs) or the system; but never more
# than a quarter of a small filesystem (a test's tmpfs, a small volume), which 64 MiB would fill
# on its own or more.
FLOOR_MIN = 64 << 20
FLOOR_SHARE = 0.05
FLOOR_SMALL_SHARE = 0.25
TIER_RETRY = 0.05  # seconds between tries for the tier's lock (held by another worker's write)
LOCK_RETRY = 0.5  # seconds between tries for a folder another worker holds...
LOCK_PATIENCE = 60.0  # ...for this long: a worker being replaced lets go as it exits
LEFTOVER_AGE = 3600.0  # seconds: a half-made folder older than this was left by a crash


class TierStopped(Exception):
    """The store closed while it waited for the tier's lock."""


def free_floor(total_bytes: int) -> int:
    """The bytes the cache leaves free on a filesystem of `total_bytes`."""
    return int(min(max(FLOOR_MIN, total_bytes * FLOOR_SHARE), total_bytes * FLOOR_SMALL_SHARE))


def lock_nowait(folder: Path) -> int | None:
    """The descriptor holding `folder`'s lock, or None if another process holds it or it is gone.

    The lock file must be a regular file (a FIFO opened here would hold the worker), and still
    the one at its path once locked: a sweep may have removed the folder meanwhile.
    """
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            logger.warning("prompt cache: removing %s: not a regular file", path)
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            return lock_nowait(folder) if not path.exists() else None
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path, follow_symlinks=False).st_ino != os.fstat(fd).st_ino:
            raise OSError("the folder was removed")
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def tier_locked(root: Path, stop: threading.Event) -> Iterator[None]:
    """Hold the tier's lock; raise TierStopped if `stop` is set first."""
    while (fd := lock_nowait(root)) is None:
        if stop.wait(TIER_RETRY):
            raise TierStopped
    try:
        yield
    finally:
        os.close(fd)


class FolderLock:
    """A worker's hold on its model's folder: one owner at a time."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = None

    def take(self) -> bool:
        """Take the lock now, unless another process holds it."""
        self._fd = lock_nowait(self.folder)
        return self._fd is not None

    def wait(self, stop: threading.Event) -> bool:
        """Take the lock, trying again for LOCK_PATIENCE seconds; False (and logged) if the folder
        stays taken or `stop` is set first."""
        deadline = time.monotonic() + LOCK_PATIENCE
        while not self.take():
            if time.monotonic() > deadline:
                logger.warning(
                    "prompt cache: %s stays taken; this worker keeps caches in memory only", self.folder
                )
                return False
            if stop.wait(LOCK_RETRY):
                logger.info("prompt cache: stopped waiting for %s: the worker is stopping", self.folder)
                return False
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None


@dataclass
class Others:
    """The other folders' cache files, as seen under the tier's lock."""

    deletable: list[tuple[int, int, Path]] = field(default_factory=list)  # (last use ns, size, path)
    bytes: int = 0  # of all of them
    locks: list[int] = field(default_factory=list)

    def release(self) -> None:
        for fd in self.locks:
            os.close(fd)
        self.locks.clear()


def others(root: Path, own: Path) -> Others:
    """Every other folder's cache files, oldest use first; all may be evicted (see the module).

    Folders no worker owns are locked meanwhile, so that a worker starting on one meanwhile
    indexes what is left of it, not what is being removed."""
    found = Others()
    for folder in _folders(root, own):
        fd = lock_nowait(folder)
        if fd is not None:
            found.locks.append(fd)
        for path, info in _cache_files(folder):
            found.bytes += info.st_size
            found.deletable.append((info.st_mtime_ns, info.st_size, path))
    found.deletable.sort()
    return found


def sweep(root: Path, own: Path) -> None:
    """Remove folders no worker will use again and folders a crash left half made (tier lock held)."""
    with contextlib.suppress(OSError):
        for path in root.iterdir():
            if path.name.startswith(".") and path.name.endswith(".tmp") and path.is_dir():
                with contextlib.suppress(OSError):
                    if time.time() - path.stat().st_mtime > LEFTOVER_AGE:
                        shutil.rmtree(path, ignore_errors=True)
    for folder in _folders(root, own):
        fd = lock_nowait(folder)
        if fd is None:
            continue  # a worker owns it: its model is being served
        try:
            reason = folder_is_orphan(folder)
            if reason is not None:
                logger.info("prompt cache: removing the folder %s: %s", folder.name, reason)
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)


def _folders(root: Path, own: Path) -> list[Path]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    return [
        Path(e.path)
        for e in entries
        if not e.name.startswith(".") and e.is_dir(follow_symlinks=False) and e.name != own.name
    ]


def _cache_files(folder: Path) -> list[tuple[Path, os.stat_result]]:
    files = []
    with contextlib.suppress(OSError):
        for e in os.scandir(folder):
            if not e.name.endswith(SUFFIX) or is_leftover(Path(e.path)):
                continue
            with contextlib.suppress(OSError):
                info = e.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode):
                    files.append((Path(e.path), info))
    return files
