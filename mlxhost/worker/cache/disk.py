"""The prompt cache's disk tier: KV caches that outlive the worker, and the host.

Every KV cache the memory tier keeps (cache/memory.py) is also written to the model's folder under
the state directory (`cache/folder.py`), one file each (`cache/files.py`: what a file holds, when
one is this model's). The index of the folder (cache/disk_index.py) is rebuilt at start from the
files' headers alone: no tensor is read until one is used.

Writes go through a writer thread, loads through a loader thread, so the generation thread never
waits for the disk. What MLX allows across threads (mlx 0.32): an array whose graph was built on
another thread's stream cannot be evaluated here ("There is no Stream(cpu, N) in current
thread"), but an evaluated array can be read by any thread, and arrays this thread loads and
evaluates can be used by the generation thread. So `spill` evaluates the state in the generation
thread before handing it over, and `load_soon` evaluates what it read before handing it back.

A file is never trusted: one that is not a regular file, cannot be read, is cut short, does not
match its checksum, holds NaN or infinite values, or holds another model's cache (layer classes,
shapes, dtypes) is removed and logged, and the request just prefills. A cache with NaN or infinite
values is never written either.

One worker owns a folder at a time (an advisory lock). A worker that finds its folder taken (by
the worker it replaces, still draining) serves from memory and tries again in its writer thread,
never blocking: a SIGTERM (`close`) ends the wait. The bound is the whole prompt-cache
directory's, across models, least recently used out first, with a file's mtime as its last use so
the order survives restarts; and the filesystem keeps a floor of free space (cache/directory.py). A
write that fails (a full disk) costs that entry only, is logged once and leaves no file behind.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import ctypes
import ctypes.util
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from mlxhost.worker.cache.directory import (
    FolderLock,
    Others,
    TierStopped,
    free_floor,
    others,
    sweep,
    tier_locked,
)
from mlxhost.worker.cache.disk_index import DiskIndex
from mlxhost.worker.cache.files import (
    Entry,
    Namespace,
    NonFinite,
    Signature,
    cache_arrays,
    check_finite,
    entry_name,
    namespace_digest,
    read_cache,
    write_cache,
)

__all__ = ["PromptStore", "StoreStatistics"]

logger = logging.getLogger("mlxhost.engine")

WRITE_QUEUE = 8  # caches waiting for the writer
# What a file holds besides its arrays (the header: tokens as JSON, layer classes), over-estimated
# so that the room made before a write is enough.
HEADER_ALLOWANCE = 64 << 10
HEADER_PER_TOKEN = 12


@dataclass(frozen=True)
class StoreStatistics:
    entries: int
    bytes: int
    hits: int  # loads used
    cached_tokens: int  # prompt tokens loaded rather than prefilled
    writes: int
    dropped_writes: int  # the writer was behind, or the cache alone was over the bound
    removed_files: int  # unreadable or foreign files removed


def _libc_trim() -> Callable[[], object]:
    """glibc's malloc_trim(0), or nothing where there is none (macOS, musl)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


# A write serialises megabytes in this thread's malloc arena; glibc keeps what a thread freed
# there for the thread to reuse, and the worker's RSS grew by it, file after file: handed back
# after each write.
trim_heap = _libc_trim()


class PromptStore:
    """The disk tier of one model: an index of its folder, a writer thread and a loader thread."""

    def __init__(self, folder: Path, max_bytes: int, signature: Signature) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._signature = signature
        self._lock = threading.Lock()  # the index and counters: generation, writer and loader threads
        self._index = DiskIndex()
        self._hits = 0
        self._cached_tokens = 0
        self._writes = 0
        self._dropped = 0
        self._removed = 0
        self._warned: set[str] = set()  # what was logged already: a full disk is said once
        self.ready = False  # the folder's lock is held and its index read
        self._closing = threading.Event()  # ends the writer's waits for locks
        self._folder_lock = FolderLock(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self._folder_lock.take():
            self._scan()
        else:
            logger.warning("prompt cache: %s is used by another worker; waiting for it", folder)
        # Bounded: when the disk is slower than generations finish, a spill is dropped rather
        # than let queued caches pin memory without bound or make the generation thread wait;
        # the memory tier still has the entry, only its life after a restart is lost.
        self._writes_queue: queue.Queue[tuple[tuple[int, ...], list[Any], str] | None] = queue.Queue(
            WRITE_QUEUE
        )
        self._loads_queue: queue.SimpleQueue[tuple[Entry, Callable[[list[Any] | None], None]] | None]
        self._loads_queue = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="mlxhost-cache-writer", daemon=True)
        self._loader = threading.Thread(target=self._load_loop, name="mlxhost-cache-loader", daemon=True)
        self._writer.start()
        self._loader.start()

    # -- the generation thread's side -------------------------------------------------------

    def find(self, prompt: list[int], namespace: Namespace) -> tuple[Entry | None, int]:
        """The entry that gives `prompt` the longest start, and how many of its tokens it covers
        (see `DiskIndex.find`)."""
        if not self.ready:
            return None, 0
        key = namespace_digest(namespace)
        with self._lock:
            return self._index.find(prompt, key)

    def spill(self, tokens: Sequence[int], cache: list[Any], namespace: Namespace) -> None:
        """Queue `cache` (whose KV holds `tokens`) for writing; never waits."""
        if not self.ready or not tokens:
            return
        if sum(layer.nbytes for layer in cache) > self.max_bytes:
            with self._lock:
                self._dropped += 1
            return
        digest = namespace_digest(namespace)
        with self._lock:
            # Already on disk (a repeated prompt with a greedy reply ends in the same tokens): no
            # copy in this thread and no write in the other, only its place in the LRU order.
            if self._index.touch(entry_name(digest, tokens)):
                return
        # Evaluated here, in the thread whose stream built it: the writer could not.
        mx.eval(cache_arrays(cache))
        try:
            self._writes_queue.put_nowait((tuple(tokens), cache, digest))
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def load_soon(self, entry: Entry, done: Callable[[list[Any] | None], None]) -> None:
        """Read `entry` in the loader thread, then call `done` there with its cache (None: unusable)."""
        self._loads_queue.put((entry, done))

    def drop_path(self, namespace: Namespace, tokens: list[int]) -> int:
        """Remove the entries a prompt starting with `tokens` may have started from (see
        `DiskIndex.on_path`), files and all: a cache that started from one held NaN."""
        key = namespace_digest(namespace)
        with self._lock:
            entries = self._index.on_path(key, tokens)
        self._forget(entries, unlink=True, bad=True)
        return len(entries)

    def note_hit(self, tokens: int) -> None:
        with self._lock:
            self._hits += 1
            self._cached_tokens += tokens

    def statistics(self) -> StoreStatistics:
        with self._lock:
            return StoreStatistics(
                entries=len(self._index),
                bytes=self._index.bytes,
                hits=self._hits,
                cached_tokens=self._cached_tokens,
                writes=self._writes,
                dropped_writes=self._dropped,
                removed_files=self._removed,
            )

    def close(self) -> None:
        """Finish the queued writes, stop both threads, let go of the folder.

        A writer still waiting for the folder's lock (or the tier's) stops waiting at once.
        """
        self._closing.set()
        self._writes_queue.put(None)
        self._loads_queue.put(None)
        self._writer.join()
        self._loader.join()
        self._folder_lock.release()

    # -- reading and writing files (any thread) -----------------------------------------------

    def read(self, entry: Entry) -> list[Any] | None:
        """The cache `entry` names, checked and evaluated; None if it is gone or bad (then removed)."""
        path = self.folder / entry.name
        try:
            cache = read_cache(path, entry, self._signature)
        except FileNotFoundError:
            self._forget([entry], unlink=False)  # evicted meanwhile
            return None
        except Exception as exc:  # noqa: BLE001 - whatever a file does, the request just prefills
            logger.warning("prompt cache: removing %s: %s: %s", path.name, type(exc).__name__, exc)
            self._forget([entry], unlink=True, bad=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # its last use: the LRU order survives a restart
        with self._lock:
            self._index.touch(entry.name)
        return cache

    def write(self, tokens: tuple[int, ...], cache: list[Any], namespace: str) -> Entry | None:
        """Write one cache (evaluated arrays only) if there is room for it; None if not.

        Room: the whole directory within the bound, and the filesystem above its free-space
        floor, after the write (cache/directory.py). Raises NonFinite, writing nothing, for a cache
        holding NaN or infinite values, and OSError when the write itself fails (no file is left).
        """
        check_finite(cache_arrays(cache))  # before any room is made for it
        arrays = sum(a.nbytes for a in cache_arrays(cache))
        need = arrays + HEADER_ALLOWANCE + HEADER_PER_TOKEN * len(tokens)
        with tier_locked(self.folder.parent, self._closing):
            tier = others(self.folder.parent, self.folder)
            try:
                if not self._make_room(need, tier):
                    return None
                entry = write_cache(self.folder, namespace, tokens, cache)
                with self._lock:
                    self._writes += 1
                    self._index.add(entry, time.time_ns())
                    # Its prefixes are covered by trimming it, as in the memory tier.
                    gone = self._index.pop_prefixes(namespace, tokens) if entry.trimmable else []
                for e in gone:
                    with contextlib.suppress(FileNotFoundError):
                        (self.folder / e.name).unlink()
                self._make_room(0, tier)  # the header was shorter than allowed for, or the bound was
            finally:
                tier.release()
        return entry

    def _make_room(self, need: int, tier: Others) -> bool:
        """Remove least recently used files until `need` more bytes fit; False if they cannot.

        Under the tier's lock. The files of every folder are candidates, oldest use first (one
        LRU for the directory, cache/directory.py).
        """
        with self._lock:
            own = self._index.by_last_use()
        candidates = heapq.merge(own, tier.deletable, key=lambda c: c[0])
        while True:
            info = os.statvfs(self.folder)
            free = info.f_bavail * info.f_frsize
            floor = free_floor(info.f_blocks * info.f_frsize)
            rounded = -(-need // info.f_frsize) * info.f_frsize if need else 0
            over = max(self._index.bytes + tier.bytes + need - self.max_bytes, floor - (free - rounded))
            if over <= 0:
                return True
            oldest = next(candidates, None)
            if oldest is None:
                if need:
                    reason = "bound" if self._index.bytes + tier.bytes + need > self.max_bytes else "floor"
                    self._warn_once(
                        reason,
                        "prompt cache: not writing an entry of %d bytes: %s",
                        need,
                        f"it is larger than the prompt-cache directory's bound ({self.max_bytes} bytes)"
                        if reason == "bound"
                        else f"the filesystem would have less than {floor} bytes free ({free} now)",
                    )
                    with self._lock:
                        self._dropped += 1
                return False
            _, size, what = oldest
            if isinstance(what, Entry):
                with self._lock:
                    self._index.drop(what)
                path = self.folder / what.name
            else:
                tier.bytes -= size
                path = what
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message + " (said once)", *args)

    # -- internals ----------------------------------------------------------------------------

    def _forget(self, entries: list[Entry], unlink: bool, bad: bool = False) -> None:
        with self._lock:
            for entry in entries:
                self._index.drop(entry)
                if bad:
                    self._removed += 1
        if unlink:
            for entry in entries:
                with contextlib.suppress(OSError):
                    (self.folder / entry.name).unlink()

    def _scan(self) -> None:
        """Rebuild the index from the files' headers; remove leftovers and foreign files."""
        self._removed += self._index.scan(self.folder)
        self.ready = True
        logger.info(
            "prompt cache: %d entries (%d bytes) on disk in %s",
            len(self._index),
            self._index.bytes,
            self.folder,
        )

    def _write_loop(self) -> None:
        if not self.ready:
            if not self._folder_lock.wait(self._closing):
                self._drain_writes()
                return
            with self._lock:
                self._scan()
        self._tidy_tier()
        while (item := self._writes_queue.get()) is not None:
            tokens, cache, namespace = item
            try:
                self.write(tokens, cache, namespace)
            except TierStopped:
                with self._lock:
                    self._dropped += 1
            except NonFinite:
                logger.warning("prompt cache: not writing an entry that holds NaN or infinite values")
                with self._lock:
                    self._dropped += 1
            except Exception as exc:  # noqa: BLE001 - a full disk costs the entry, not the worker
                self._warn_once(
                    f"write {type(exc).__name__} {getattr(exc, 'errno', '')}",
                    "prompt cache: could not write an entry: %s: %s",
                    type(exc).__name__,
                    exc,
                )
                with self._lock:
                    self._dropped += 1
            # Its arrays go back to MLX before the write counts as done (see `wait_written`).
            del item, tokens, cache
            trim_heap()
            self._writes_queue.task_done()

    def _tidy_tier(self) -> None:
        """At the start: remove folders no worker will use again, then fit the tier to its bound."""
        try:
            with tier_locked(self.folder.parent, self._closing):
                sweep(self.folder.parent, self.folder)
                tier = others(self.folder.parent, self.folder)
                try:
                    self._make_room(0, tier)  # the bound may have been lowered
                finally:
                    tier.release()
        except TierStopped:
            pass
        except OSError as exc:
            logger.warning("prompt cache: could not tidy %s: %s", self.folder.parent, exc)

    def _drain_writes(self) -> None:
        while self._writes_queue.get() is not None:
            self._writes_queue.task_done()

    def wait_written(self, timeout: float) -> bool:
        """Until every queued write is done and its arrays released, or `timeout` seconds pass.

        The generation thread waits here only when nothing runs (a pause for a managed job), so
        that MLX's cache, freed next, is not refilled by a write finishing just after.
        """
        writes = self._writes_queue
        with writes.all_tasks_done:
            return writes.all_tasks_done.wait_for(lambda: not writes.unfinished_tasks, timeout)

    def _load_loop(self) -> None:
        while (item := self._loads_queue.get()) is not None:
            entry, done = item
            done(self.read(entry))
