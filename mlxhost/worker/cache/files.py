"""What a prompt-cache file is: what its name and header say, whether it is this model's, and how
one is written and read.

Each file is mlx-lm's own cache format (`save_prompt_cache`: safetensors, with our metadata beside
the layer classes): the tokens its KV holds and a digest of the namespace it was kept under (never
the caller's scope or salt themselves), so an index can be rebuilt from the headers alone.

A file is never trusted: `read_header` and `read_cache` raise BadFile for one that is not a
regular file, is cut short, is not ours, holds a cache of another shape than this model's
`Signature`, whose tensors no longer match the checksum written with them, or that holds a NaN or
an infinity (a cache like that turns every answer that starts from it into padding). Nothing is
opened before `lstat` says it is a regular file, and then without blocking: a FIFO under a cache's
name would otherwise hold the worker's start forever.

Where the files live, and the records kept beside them, are `cache/folder.py`'s. The index, its
bound and the threads that use these are `cache/disk.py`'s; the tier as a whole is
`cache/directory.py`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.cache import can_trim_prompt_cache, load_prompt_cache, save_prompt_cache

__all__ = [
    "FORMAT",
    "SUFFIX",
    "BadFile",
    "Entry",
    "Namespace",
    "NonFinite",
    "Signature",
    "cache_arrays",
    "cache_signature",
    "check_cache",
    "check_finite",
    "entry_name",
    "is_leftover",
    "namespace_digest",
    "read_cache",
    "read_header",
    "read_regular",
    "write_cache",
]

# Of our files and of the fingerprint: bump it and older folders are never matched (then removed
# as orphans, cache/folder.py's `folder_is_orphan`). 2: files carry a checksum of their tensors.
FORMAT = 2
SUFFIX = ".safetensors"
HEADER_MAX = 64 << 20  # a header longer than this is not one of ours
CHUNK = 1 << 20  # bytes read at a time while checking a file's checksum

Namespace = tuple[str, str]
# Per layer: its class, the (shape, dtype) of each array of its state (None on the sequence axis)
# and the fixed sizes (window, kept tokens) that must match.
Signature = tuple[tuple[str, tuple[tuple[tuple[int | None, ...], str], ...], tuple[int | None, ...]], ...]


class BadFile(Exception):
    """A file that is not a cache of this model."""


class NonFinite(BadFile):
    """A cache holding a NaN or an infinity: never written, never loaded."""


@dataclass(frozen=True)
class Entry:
    """One file of the disk tier, as its index keeps it: thousands of these live in a worker, so
    its tokens are kept packed (4 bytes each, not a tuple of Python ints at 36)."""

    name: str  # the file's name in the folder
    namespace: str  # digest of the namespace it was kept under
    packed: bytes  # what its KV holds: the tokens, as int32
    trimmable: bool
    size: int  # bytes on disk

    @classmethod
    def of(cls, name: str, namespace: str, tokens: Sequence[int], trimmable: bool, size: int) -> Entry:
        return cls(name, namespace, np.asarray(tokens, dtype=np.int32).tobytes(), trimmable, size)

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(np.frombuffer(self.packed, dtype=np.int32).tolist())

    @property
    def length(self) -> int:
        return len(self.packed) // 4


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of `path` (at most `limit`), if it is a regular file; BadFile otherwise.

    Opened without blocking and checked after opening too: a FIFO swapped in between the two
    would still never hold the reader.
    """
    with _open_regular(path) as file:
        return file.read(limit)


@contextlib.contextmanager
def _open_regular(path: Path) -> Any:
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise BadFile("not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadFile("not a regular file")
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield file


def entry_name(namespace: str, tokens: Sequence[int]) -> str:
    """The file of the entry for `tokens` under the namespace digest `namespace`."""
    return f"{namespace}-{hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:32]}{SUFFIX}"


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
        for value in cache_arrays([layer]):
            shape: tuple[int | None, ...] = tuple(value.shape)
            if name.endswith("KVCache") and len(shape) == 4:
                shape = (*shape[:2], None, *shape[3:])  # (batch, heads, tokens, dims)
            arrays.append((shape, str(value.dtype)))
        fixed = (getattr(layer, "max_size", None), getattr(layer, "keep", None))
        layers.append((name, tuple(arrays), fixed))
    return tuple(layers)


def check_cache(cache: list[Any], tokens: int, signature: Signature) -> None:
    """Raise BadFile unless `cache` is one of this model's (`signature`), holding `tokens` tokens."""
    # A cache that reached the batch with a wrong shape would fail the step of every session.
    if cache_signature(cache) != signature:
        raise BadFile("not a cache of this model (layers, shapes or dtypes differ)")
    for layer in cache:
        offset = getattr(layer, "offset", None)
        if offset is None:
            continue
        if not isinstance(offset, int) or offset != tokens:
            raise BadFile(f"it holds {offset} tokens, its header says {tokens}")
        keys = getattr(layer, "keys", None)
        size = min(offset, getattr(layer, "max_size", None) or offset)
        if keys is None or keys.shape[2] < size:
            raise BadFile("its keys are shorter than its length")


def cache_arrays(cache: Sequence[Any]) -> list[mx.array]:
    flat: list[tuple[str, Any]] = tree_flatten([layer.state for layer in cache])  # type: ignore[assignment]
    return [value for _, value in flat if isinstance(value, mx.array)]


def check_finite(arrays: Sequence[mx.array]) -> None:
    """Raise NonFinite if a floating-point array holds a NaN or an infinity."""
    floating = [a for a in arrays if mx.issubdtype(a.dtype, mx.floating)]
    if not floating:
        return
    # A plain sum is the fast test (NaN and infinity propagate), 2.5-5x faster than isfinite on
    # MLX's CPU backend (512 MiB of bf16 KV: 0.33 s against 1.6 s); a sum that is not finite
    # may only have overflowed (float16), so the exact test decides then.
    total = mx.sum(mx.stack([mx.sum(a).astype(mx.float32) for a in floating]))
    if math.isfinite(total.item()):
        return
    bad = mx.array(False)
    for array in floating:
        bad = bad | mx.any(~mx.isfinite(array))
    if bad.item():
        raise NonFinite("it holds NaN or infinite values")


def write_cache(folder: Path, namespace: str, tokens: tuple[int, ...], cache: list[Any]) -> Entry:
    """Write one cache (evaluated arrays only) into `folder`, under its entry's name.

    The caller has checked its values (`check_finite`): a checksum of NaN is no help.
    """
    name = entry_name(namespace, tokens)
    trimmable = can_trim_prompt_cache(cache)
    metadata = {
        "mlxhost": str(FORMAT),
        "namespace": namespace,
        "tokens": json.dumps(list(tokens)),
        "trimmable": "1" if trimmable else "0",
        "checksum": _arrays_checksum(cache),
    }
    # A temporary name first: a crash mid-write never leaves a torn file under a real name
    # (the folder's next owner removes the leftovers: `is_leftover`).
    temporary = folder / f".{uuid.uuid4().hex}.tmp{SUFFIX}"
    try:
        save_prompt_cache(str(temporary), cache, metadata)
        os.replace(temporary, folder / name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    return Entry.of(name, namespace, tokens, trimmable, (folder / name).stat().st_size)


def is_leftover(path: Path) -> bool:
    """A write that a crash cut short."""
    return path.name.startswith(".") and path.name.endswith(f".tmp{SUFFIX}")


def read_cache(path: Path, entry: Entry, signature: Signature) -> list[Any]:
    """The cache in `path`, checked against `entry` and `signature`, and evaluated.

    Raises FileNotFoundError when it is gone, BadFile (or whatever mlx-lm raises on a file it
    cannot read) when it is not a cache of this model: its checksum is checked on the file's
    bytes before MLX reads them, its values (finite) once they are read.
    """
    with _open_regular(path) as file:
        header, data_start = _header(file, os.fstat(file.fileno()).st_size)
        expected = (header.get("__metadata__") or {}).get("0.checksum")
        if not isinstance(expected, str) or _file_checksum(file, header, data_start) != expected:
            raise BadFile("its tensors do not match their checksum")
    cache, metadata = load_prompt_cache(str(path), return_metadata=True)
    if metadata.get("tokens") != json.dumps(list(entry.tokens)):
        raise BadFile("its tokens are not the ones in its header")
    check_cache(cache, entry.length, signature)
    arrays = cache_arrays(cache)
    mx.eval(arrays)
    check_finite(arrays)
    return cache


def _arrays_checksum(cache: Sequence[Any]) -> str:
    # What save_prompt_cache writes of the arrays, by name, in C order: the bytes
    # `_file_checksum` reads back.
    flat: list[tuple[str, Any]] = tree_flatten([layer.state for layer in cache])  # type: ignore[assignment]
    digest = hashlib.sha256()
    for name, value in sorted(flat, key=lambda item: item[0]):
        if isinstance(value, mx.array):
            view = memoryview(value)
            digest.update(f"{name}\0".encode())
            digest.update(view if view.c_contiguous else view.tobytes())
    return digest.hexdigest()


def _file_checksum(file: Any, header: dict[str, Any], data_start: int) -> str:
    # save_prompt_cache stores a layer's scalars (its offset, say) as tensors too, and names
    # them in its metadata ("2.<n>.0"): they are not arrays of the cache, and not summed.
    metadata = header.get("__metadata__") or {}
    scalars = {v for k, v in metadata.items() if k.startswith("2.") and k.endswith(".0")}
    digest = hashlib.sha256()
    tensors = sorted((k, v) for k, v in header.items() if k != "__metadata__" and k not in scalars)
    for name, info in tensors:
        start, end = info["data_offsets"]
        digest.update(f"{name}\0".encode())
        file.seek(data_start + start)
        left = end - start
        while left > 0:
            chunk = file.read(min(CHUNK, left))
            if not chunk:
                raise BadFile("cut short")
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _header(file: Any, size: int) -> tuple[dict[str, Any], int]:
    """A safetensors header (8-byte little-endian length, then JSON) and where the data starts."""
    prefix = file.read(8)
    if len(prefix) != 8:
        raise BadFile("shorter than a header")
    (length,) = struct.unpack("<Q", prefix)
    if length > min(HEADER_MAX, size - 8):
        raise BadFile("its header runs past its end")
    header = json.loads(file.read(length))
    if not isinstance(header, dict):
        raise BadFile("its header is not a JSON object")
    return header, 8 + length


def read_header(path: Path, size: int) -> Entry:
    """An entry from a file's safetensors header, if `path` is a regular file."""
    with _open_regular(path) as file:
        header, data_start = _header(file, size)
        length = data_start - 8
    metadata = header.get("__metadata__") or {}
    if metadata.get("0.mlxhost") != str(FORMAT):
        raise BadFile("not one of our files, or an older format")
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end > size:
        raise BadFile("cut short")
    tokens = json.loads(metadata["0.tokens"])
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) for t in tokens):
        raise BadFile("no tokens in its header")
    namespace = metadata["0.namespace"]
    if not path.name.startswith(f"{namespace}-"):
        raise BadFile("its name and header disagree")
    return Entry.of(path.name, namespace, tokens, metadata.get("0.trimmable") == "1", size)
