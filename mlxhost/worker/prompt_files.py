"""What a prompt-cache file is: where it lives, what its name and header say, whether it is
this model's, and how one is written and read.

A model's files live under `<state_dir>/prompt-cache/<model folder>-<fingerprint>/`. The
fingerprint digests our format and every file of the model and adapter directories (name, size,
mtime), so other weights, another tokenizer or another adapter never find them. Each file is
mlx-lm's own cache format (`save_prompt_cache`: safetensors, with our metadata beside the layer
classes): the tokens its KV holds and a digest of the namespace it was kept under (never the
caller's scope or salt themselves), so an index can be rebuilt from the headers alone.

A file is never trusted: `read_header` and `read_cache` raise BadFile for one that is cut short,
is not ours, or holds a cache of another shape than this model's `Signature`. The index, its bound
and the threads that use these are `prompt_store.py`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.models.cache import can_trim_prompt_cache, load_prompt_cache, save_prompt_cache

__all__ = [
    "FORMAT",
    "SUFFIX",
    "BadFile",
    "Entry",
    "Namespace",
    "Signature",
    "cache_arrays",
    "cache_signature",
    "check_cache",
    "is_leftover",
    "entry_name",
    "keep_signature",
    "kept_signature",
    "model_fingerprint",
    "namespace_digest",
    "read_cache",
    "read_header",
    "store_folder",
    "write_cache",
]

FORMAT = 1  # of our files and of the fingerprint: bump it and older folders are never matched
SUFFIX = ".safetensors"
SIGNATURE_FILE = ".signature.json"
HEADER_MAX = 64 << 20  # a header longer than this is not one of ours

Namespace = tuple[str, str]
# Per layer: its class, the (shape, dtype) of each array of its state (None on the sequence axis)
# and the fixed sizes (window, kept tokens) that must match.
Signature = tuple[tuple[str, tuple[tuple[tuple[int | None, ...], str], ...], tuple[int | None, ...]], ...]


class BadFile(Exception):
    """A file that is not a cache of this model."""


@dataclass(frozen=True)
class Entry:
    name: str  # the file's name in the folder
    namespace: str  # digest of the namespace it was kept under
    tokens: tuple[int, ...]  # what its KV holds
    trimmable: bool
    size: int  # bytes on disk


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


def cache_arrays(cache: Sequence[Any]) -> list[mx.array]:
    flat: list[tuple[str, Any]] = tree_flatten([layer.state for layer in cache])  # type: ignore[assignment]
    return [value for _, value in flat if isinstance(value, mx.array)]


def write_cache(folder: Path, namespace: str, tokens: tuple[int, ...], cache: list[Any]) -> Entry:
    """Write one cache (evaluated arrays only) into `folder`, under its entry's name."""
    name = entry_name(namespace, tokens)
    trimmable = can_trim_prompt_cache(cache)
    metadata = {
        "mlxhost": str(FORMAT),
        "namespace": namespace,
        "tokens": json.dumps(list(tokens)),
        "trimmable": "1" if trimmable else "0",
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
    return Entry(name, namespace, tokens, trimmable, (folder / name).stat().st_size)


def is_leftover(path: Path) -> bool:
    """A write that a crash cut short."""
    return path.name.startswith(".") and path.name.endswith(f".tmp{SUFFIX}")


def read_cache(path: Path, entry: Entry, signature: Signature) -> list[Any]:
    """The cache in `path`, checked against `entry` and `signature`, and evaluated.

    Raises FileNotFoundError when it is gone, BadFile (or whatever mlx-lm raises on a file it
    cannot read) when it is not a cache of this model.
    """
    cache, metadata = load_prompt_cache(str(path), return_metadata=True)
    if metadata.get("tokens") != json.dumps(list(entry.tokens)):
        raise BadFile("its tokens are not the ones in its header")
    check_cache(cache, len(entry.tokens), signature)
    mx.eval(cache_arrays(cache))
    return cache


def read_header(path: Path, size: int) -> Entry:
    """An entry from a file's safetensors header (8-byte little-endian length, then JSON)."""
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) != 8:
            raise BadFile("shorter than a header")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(HEADER_MAX, size - 8):
            raise BadFile("its header runs past its end")
        header = json.loads(file.read(length))
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
    return Entry(path.name, namespace, tuple(tokens), metadata.get("0.trimmable") == "1", size)
