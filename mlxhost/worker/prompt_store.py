"""The prompt cache's disk tier: KV caches that outlive the worker, and the host.

Every KV cache the memory tier keeps (prompt_cache.py) is also written here, in mlx-lm's own
format (`save_prompt_cache`: safetensors, with our metadata beside the layer classes), under
`<state_dir>/prompt-cache/<model folder>-<fingerprint>/`. The fingerprint digests every file of
the model and adapter directories (name, size, mtime), so other weights, another tokenizer or
another adapter never find these entries. A file's metadata holds the tokens its KV holds and a
digest of the namespace it was kept under (never the caller's scope or salt themselves), so the
index is rebuilt at start from the safetensors headers alone: no tensor is read until one is used.

Writes go through a writer thread, loads through a loader thread, so the generation thread never
waits for the disk. What MLX allows across threads (mlx 0.32): an array whose graph was built on
another thread's stream cannot be evaluated here ("There is no Stream(cpu, N) in current
thread"), but an evaluated array can be read by any thread, and arrays this thread loads and
evaluates can be used by the generation thread. So `spill` evaluates the state in the generation
thread before handing it over, and `load_soon` evaluates what it read before handing it back.

A file is never trusted: one that cannot be read, is cut short, or holds another model's cache
(layer classes, shapes, dtypes) is removed and logged, and the request just prefills. One worker
owns a folder at a time (an advisory lock); the disk is bounded, least recently used out first,
with a file's mtime as its last use so the order survives restarts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.models.cache import PromptTrie, can_trim_prompt_cache, load_prompt_cache, save_prompt_cache

__all__ = [
    "Entry",
    "PromptStore",
    "Signature",
    "StoreBusy",
    "StoreStatistics",
    "cache_signature",
    "keep_signature",
    "kept_signature",
    "model_fingerprint",
    "namespace_digest",
    "store_folder",
    "worth_loading",
]

logger = logging.getLogger("mlxhost.engine")

FORMAT = 1  # of our files and of the fingerprint: bump it and older folders are never matched
# A load must save at least this many prompt tokens, and this share of what it reads (see
# `worth_loading`).
LOAD_MIN_TOKENS = 2
LOAD_MIN_SHARE = 4
WRITE_QUEUE = 8  # caches waiting for the writer
LOCK_FILE = ".lock"
SIGNATURE_FILE = ".signature.json"
LOCK_RETRY = 0.5  # seconds between tries for a folder another worker holds...
LOCK_PATIENCE = 60.0  # ...for this long: a worker being replaced lets go as it exits
_SUFFIX = ".safetensors"
_HEADER_MAX = 64 << 20  # a header longer than this is not one of ours

Namespace = tuple[str, str]
# Per layer: its class, the (shape, dtype) of each array of its state (None on the sequence axis)
# and the fixed sizes (window, kept tokens) that must match.
Signature = tuple[tuple[str, tuple[tuple[tuple[int | None, ...], str], ...], tuple[int | None, ...]], ...]


class StoreBusy(Exception):
    """Another worker owns the model's folder."""


class _BadFile(Exception):
    """A file that is not a cache of this model."""


@dataclass(frozen=True)
class Entry:
    name: str  # the file's name in the folder
    namespace: str  # digest of the namespace it was kept under
    tokens: tuple[int, ...]  # what its KV holds
    trimmable: bool
    size: int  # bytes on disk


@dataclass(frozen=True)
class StoreStatistics:
    entries: int
    bytes: int
    hits: int  # loads used
    cached_tokens: int  # prompt tokens loaded rather than prefilled
    writes: int
    dropped_writes: int  # the writer was behind, or the cache alone was over the bound
    removed_files: int  # unreadable or foreign files removed


def model_fingerprint(model_path: Path, adapter_path: Path | None = None) -> str:
    """A digest of our format and every file of the model (and adapter) directory."""
    files: list[list[Any]] = []
    for root in (model_path, adapter_path):
        if root is None:
            files.append([])
            continue
        listed = []
        for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
            info = path.stat()
            listed.append([str(path.relative_to(root)), info.st_size, info.st_mtime_ns])
        files.append(listed)
    return hashlib.sha256(json.dumps([FORMAT, files]).encode()).hexdigest()


def store_folder(state_dir: Path, model_path: Path, fingerprint: str) -> Path:
    from mlxhost.wire.layout import PROMPT_CACHE_DIR

    return state_dir / PROMPT_CACHE_DIR / f"{model_path.name}-{fingerprint[:16]}"


def _entry_name(namespace: str, tokens: Sequence[int]) -> str:
    """The file of the entry for `tokens` under the namespace digest `namespace`."""
    return f"{namespace}-{hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:32]}{_SUFFIX}"


def namespace_digest(namespace: Namespace) -> str:
    # Files and their metadata can be read by whoever reads the state directory: they carry
    # this digest, never a caller's scope or salt.
    return hashlib.sha256(json.dumps(list(namespace)).encode()).hexdigest()[:32]


def cache_signature(cache: Sequence[Any]) -> Signature:
    """What a cache of this model looks like, less its length: compared with every loaded cache."""
    layers = []
    for layer in cache:
        name = type(layer).__name__
        arrays = []
        for value in _arrays([layer]):
            shape: tuple[int | None, ...] = tuple(value.shape)
            if name.endswith("KVCache") and len(shape) == 4:
                shape = (*shape[:2], None, *shape[3:])  # (batch, heads, tokens, dims)
            arrays.append((shape, str(value.dtype)))
        fixed = (getattr(layer, "max_size", None), getattr(layer, "keep", None))
        layers.append((name, tuple(arrays), fixed))
    return tuple(layers)


def worth_loading(covered: int, in_memory: int) -> bool:
    """Whether to load an entry that starts a prompt `covered` tokens in, where memory has `in_memory`.

    Reading a cache costs its bytes, in proportion to all it covers; it saves the prefill of what
    memory lacks. Reading runs at disk speed, a prefill at the model's, many times slower per
    token (a 16-token prefill of the 32M-parameter bench model took 0.5 s on a CPU; its file
    read in milliseconds), so any real saving is worth it, except a few tokens on top of a long
    prefix that memory already has.
    """
    saved = covered - in_memory
    return saved >= LOAD_MIN_TOKENS and saved * LOAD_MIN_SHARE >= covered


def kept_signature(folder: Path) -> Signature | None:
    """The signature a worker kept in `folder`, if these versions of MLX and mlx-lm computed it.

    Computing it takes a forward pass at every start, and a respawned worker's first request
    waits for it: tens of milliseconds on a small model, more on a large one. The folder is
    already this model's (its name is the model's fingerprint), and the layer classes and dtypes
    can change only with the libraries.
    """
    try:
        kept = json.loads((folder / SIGNATURE_FILE).read_text())
        if kept["versions"] != _versions():
            return None
        return _tuples(kept["signature"])  # type: ignore[no-any-return]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep_signature(folder: Path, signature: Signature) -> None:
    """Keep `signature` for the next worker of `folder` (see `kept_signature`); best effort."""
    path = folder / SIGNATURE_FILE
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        temporary.write_text(json.dumps({"versions": _versions(), "signature": signature}))
        os.replace(temporary, path)
    with contextlib.suppress(OSError):
        temporary.unlink(missing_ok=True)


def _versions() -> list[str]:
    return [str(mx.__version__), str(mlx_lm.__version__)]  # type: ignore[attr-defined]


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class PromptStore:
    """The disk tier of one model: an index of its folder, a writer thread and a loader thread."""

    def __init__(self, folder: Path, max_bytes: int, signature: Signature) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._signature = signature
        self._lock = threading.Lock()  # the index and counters: generation, writer and loader threads
        self._trie = PromptTrie()
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # by name, least recently used first
        self._bytes = 0
        self._hits = 0
        self._cached_tokens = 0
        self._writes = 0
        self._dropped = 0
        self._removed = 0
        self.ready = False  # the folder's lock is held and its index read
        self._lock_fd: int | None = None
        folder.mkdir(parents=True, exist_ok=True)
        if self._acquire():
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
        """The entry that gives `prompt` the longest start, and how many of its tokens it covers.

        As mlx-lm's LRUPromptCache: an entry that is a prefix of the prompt, or a longer one
        (the same prompt, a longer conversation) trimmed back to the common prefix if its cache
        can be trimmed. At least one prompt token is always left to compute.
        """
        if not self.ready:
            return None, 0
        key = namespace_digest(namespace)
        with self._lock:
            found = self._trie.search(key, prompt)
            best: tuple[Entry | None, int] = (None, 0)
            if found.exact is not None:
                entry = self._trie.get(key, found.exact)
                if entry.trimmable:
                    best = (entry, len(prompt) - 1)
            if found.shorter is not None:
                best = max(best, (self._trie.get(key, found.shorter), len(found.shorter)), key=lambda b: b[1])
            if found.longer is not None:
                entry = self._trie.get(key, found.longer)
                if entry.trimmable:
                    covered = min(len(prompt) - 1, found.common_prefix)
                    best = max(best, (entry, covered), key=lambda b: b[1])
        return best

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
            known = self._entries.get(_entry_name(digest, tokens))
            if known is not None:
                self._entries.move_to_end(known.name)
                return
        # Evaluated here, in the thread whose stream built it: the writer could not.
        mx.eval(_arrays(cache))
        try:
            self._writes_queue.put_nowait((tuple(tokens), cache, digest))
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def load_soon(self, entry: Entry, done: Callable[[list[Any] | None], None]) -> None:
        """Read `entry` in the loader thread, then call `done` there with its cache (None: unusable)."""
        self._loads_queue.put((entry, done))

    def note_hit(self, tokens: int) -> None:
        with self._lock:
            self._hits += 1
            self._cached_tokens += tokens

    def statistics(self) -> StoreStatistics:
        with self._lock:
            return StoreStatistics(
                entries=len(self._entries),
                bytes=self._bytes,
                hits=self._hits,
                cached_tokens=self._cached_tokens,
                writes=self._writes,
                dropped_writes=self._dropped,
                removed_files=self._removed,
            )

    def close(self) -> None:
        """Finish the queued writes, stop both threads, let go of the folder."""
        self._writes_queue.put(None)
        self._loads_queue.put(None)
        self._writer.join()
        self._loader.join()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # -- reading and writing files (any thread) -----------------------------------------------

    def read(self, entry: Entry) -> list[Any] | None:
        """The cache `entry` names, checked and evaluated; None if it is gone or bad (then removed)."""
        path = self.folder / entry.name
        try:
            cache, metadata = load_prompt_cache(str(path), return_metadata=True)
            if metadata.get("tokens") != json.dumps(list(entry.tokens)):
                raise _BadFile("its tokens are not the ones in its header")
            self._check(cache, len(entry.tokens))
            mx.eval(_arrays(cache))
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
            if entry.name in self._entries:
                self._entries.move_to_end(entry.name)
        return cache

    def write(self, tokens: tuple[int, ...], cache: list[Any], namespace: str) -> Entry:
        """Write one cache (evaluated arrays only), then keep the folder under its bound."""
        name = _entry_name(namespace, tokens)
        trimmable = can_trim_prompt_cache(cache)
        metadata = {
            "mlxhost": str(FORMAT),
            "namespace": namespace,
            "tokens": json.dumps(list(tokens)),
            "trimmable": "1" if trimmable else "0",
        }
        # A temporary name first: a crash mid-write never leaves a torn file under a real name
        # (the next owner removes the leftovers).
        temporary = self.folder / f".{uuid.uuid4().hex}.tmp{_SUFFIX}"
        try:
            save_prompt_cache(str(temporary), cache, metadata)
            os.replace(temporary, self.folder / name)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        entry = Entry(name, namespace, tokens, trimmable, (self.folder / name).stat().st_size)
        with self._lock:
            self._writes += 1
            self._add(entry)
            gone = []
            if trimmable:  # its prefixes are covered by trimming it, as in the memory tier
                for _, prefix in self._trie.pop_prefixes(namespace, list(tokens)):
                    self._drop_from_index(prefix, in_trie=False)
                    gone.append(prefix)
            while self._bytes > self.max_bytes and self._entries:
                oldest = next(iter(self._entries.values()))
                self._drop_from_index(oldest)
                gone.append(oldest)
        for e in gone:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / e.name).unlink()
        return entry

    # -- internals ----------------------------------------------------------------------------

    def _check(self, cache: list[Any], tokens: int) -> None:
        # A cache that reached the batch with a wrong shape would fail the step of every session.
        if cache_signature(cache) != self._signature:
            raise _BadFile("not a cache of this model (layers, shapes or dtypes differ)")
        for layer in cache:
            offset = getattr(layer, "offset", None)
            if offset is None:
                continue
            if not isinstance(offset, int) or offset != tokens:
                raise _BadFile(f"it holds {offset} tokens, its header says {tokens}")
            keys = getattr(layer, "keys", None)
            size = min(offset, getattr(layer, "max_size", None) or offset)
            if keys is None or keys.shape[2] < size:
                raise _BadFile("its keys are shorter than its length")

    def _add(self, entry: Entry) -> None:
        # Under self._lock. The same tokens in the same namespace have the same file name: an
        # entry written again replaced its file.
        previous = self._trie.add(entry.namespace, list(entry.tokens), entry)
        if previous is not None and previous.name in self._entries:
            self._bytes -= self._entries.pop(previous.name).size
        self._entries[entry.name] = entry
        self._bytes += entry.size

    def _drop_from_index(self, entry: Entry, in_trie: bool = True) -> None:
        # Under self._lock.
        if entry.name not in self._entries:
            return
        del self._entries[entry.name]
        self._bytes -= entry.size
        if in_trie:
            with contextlib.suppress(KeyError):
                self._trie.pop(entry.namespace, list(entry.tokens))
        roots = self._trie._trie
        if entry.namespace in roots and not roots[entry.namespace]:
            del roots[entry.namespace]  # no trie root left behind per namespace ever seen

    def _forget(self, entries: list[Entry], unlink: bool, bad: bool = False) -> None:
        with self._lock:
            for entry in entries:
                self._drop_from_index(entry)
                if bad:
                    self._removed += 1
        if unlink:
            for entry in entries:
                with contextlib.suppress(OSError):
                    (self.folder / entry.name).unlink()

    def _acquire(self) -> bool:
        fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def _scan(self) -> None:
        """Rebuild the index from the files' headers; remove leftovers and foreign files."""
        found = []
        for path in self.folder.iterdir():
            if path.name.startswith("."):
                if path.name.endswith(f".tmp{_SUFFIX}"):  # a write that a crash cut short
                    with contextlib.suppress(OSError):
                        path.unlink()
                continue
            if not path.name.endswith(_SUFFIX):
                continue
            try:
                info = path.stat()
                entry = _read_header(path, info.st_size)
            except Exception as exc:  # noqa: BLE001 - an unreadable file is removed, never fatal
                logger.warning("prompt cache: removing %s: %s: %s", path.name, type(exc).__name__, exc)
                with contextlib.suppress(OSError):
                    path.unlink()
                self._removed += 1
                continue
            found.append((info.st_mtime_ns, entry))
        for _, entry in sorted(found, key=lambda f: f[0]):
            self._add(entry)
        evicted = []
        while self._bytes > self.max_bytes and self._entries:  # the bound may have been lowered
            oldest = next(iter(self._entries.values()))
            self._drop_from_index(oldest)
            evicted.append(oldest)
        for entry in evicted:
            with contextlib.suppress(OSError):
                (self.folder / entry.name).unlink()
        self.ready = True
        logger.info(
            "prompt cache: %d entries (%d bytes) on disk in %s", len(self._entries), self._bytes, self.folder
        )

    def _write_loop(self) -> None:
        if not self.ready:
            deadline = time.monotonic() + LOCK_PATIENCE
            while not self._acquire():
                if time.monotonic() > deadline:
                    logger.warning(
                        "prompt cache: %s stays taken; this worker keeps caches in memory only", self.folder
                    )
                    self._drain_writes()
                    return
                time.sleep(LOCK_RETRY)
            with self._lock:
                self._scan()
        while (item := self._writes_queue.get()) is not None:
            tokens, cache, namespace = item
            try:
                self.write(tokens, cache, namespace)
            except Exception as exc:  # noqa: BLE001 - a full disk costs the entry, not the worker
                logger.warning("prompt cache: could not write an entry: %s: %s", type(exc).__name__, exc)
                with self._lock:
                    self._dropped += 1
            # Its arrays go back to MLX before the write counts as done (see `wait_written`).
            del item, tokens, cache
            self._writes_queue.task_done()

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


def _arrays(cache: Sequence[Any]) -> list[mx.array]:
    flat: list[tuple[str, Any]] = tree_flatten([layer.state for layer in cache])  # type: ignore[assignment]
    return [value for _, value in flat if isinstance(value, mx.array)]


def _read_header(path: Path, size: int) -> Entry:
    """An entry from a file's safetensors header (8-byte little-endian length, then JSON)."""
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) != 8:
            raise _BadFile("shorter than a header")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(_HEADER_MAX, size - 8):
            raise _BadFile("its header runs past its end")
        header = json.loads(file.read(length))
    metadata = header.get("__metadata__") or {}
    if metadata.get("0.mlxhost") != str(FORMAT):
        raise _BadFile("not one of our files, or an older format")
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end > size:
        raise _BadFile("cut short")
    tokens = json.loads(metadata["0.tokens"])
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        raise _BadFile("no tokens in its header")
    namespace = metadata["0.namespace"]
    if not path.name.startswith(f"{namespace}-"):
        raise _BadFile("its name and header disagree")
    return Entry(path.name, namespace, tuple(tokens), metadata.get("0.trimmable") == "1", size)
