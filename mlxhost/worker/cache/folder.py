"""A model's folder in the prompt-cache directory: where it lives, which model it is of, and the
signature of that model's caches, kept for the next worker.

A model's files live under `<state_dir>/prompt-cache/<model folder>-<fingerprint>/`. The
fingerprint digests our format and every file of the model and adapter directories (name, size,
mtime), so other weights, another tokenizer or another adapter never find them.

Each folder also holds a record of the model it belongs to (`make_folder`, `folder_is_orphan`),
so that a folder whose model is gone (a pruned fine-tune's) can be told from a live one. What a
cache file in it is, is `cache/files.py`'s; the directory of all folders, `cache/directory.py`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm

from mlxhost.worker.cache.files import FORMAT, HEADER_MAX, BadFile, Signature, read_regular

__all__ = [
    "folder_is_orphan",
    "keep_signature",
    "kept_signature",
    "make_folder",
    "model_fingerprint",
    "store_folder",
]

SIGNATURE_FILE = ".signature.json"
MODEL_FILE = ".model.json"  # which model (and adapter) the folder's caches are of


def model_fingerprint(model_path: Path, adapter_path: Path | None = None, variant: str = "") -> str:
    """A digest of our format and every file of the model (and adapter) directory; `variant`
    sets apart caches of another form from the same files (quantized KV)."""
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
    described = [FORMAT, files, variant] if variant else [FORMAT, files]
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()


def store_folder(state_dir: Path, model_path: Path, fingerprint: str) -> Path:
    from mlxhost.wire.layout import PROMPT_CACHE_DIR

    return state_dir / PROMPT_CACHE_DIR / f"{model_path.name}-{fingerprint[:16]}"


def make_folder(folder: Path, model_path: Path, adapter_path: Path | None, fingerprint: str) -> None:
    """Create `folder` with its model record in it, all at once (a rename), unless it exists.

    Another worker's sweep removes a folder without a record as an orphan: a folder created
    first and given its record after would be one, for a moment.
    """
    record = {
        "format": FORMAT,
        "model": str(model_path.absolute()),
        "adapter": str(adapter_path.absolute()) if adapter_path is not None else None,
        "fingerprint": fingerprint,
    }
    if folder.is_dir() and _record(folder) is not None:
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = folder.parent / f".{uuid.uuid4().hex}.tmp"
    temporary.mkdir()
    try:
        (temporary / MODEL_FILE).write_text(json.dumps(record))
        try:
            os.rename(temporary, folder)
        except OSError:  # it exists (another worker made it meanwhile, or an older one without a record)
            if _record(folder) is None:
                os.replace(temporary / MODEL_FILE, folder / MODEL_FILE)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def folder_is_orphan(folder: Path) -> str | None:
    """Why no worker will use `folder` again (its model or adapter gone or changed), or None."""
    record = _record(folder)
    if record is None:
        return "it records no model (an older format)"
    try:
        model = Path(record["model"])
        adapter = Path(record["adapter"]) if record["adapter"] else None
        if not model.is_dir():
            return f"its model {model} is gone"
        if adapter is not None and not adapter.is_dir():
            return f"its adapter {adapter} is gone"
        if model_fingerprint(model, adapter) != record["fingerprint"]:
            return f"the files of {model} changed"
    except (KeyError, TypeError, OSError) as exc:
        return f"its model record is unreadable: {exc}"
    return None


def _record(folder: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(read_regular(folder / MODEL_FILE, limit=1 << 20))
    except (OSError, ValueError, BadFile):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT else None


def kept_signature(folder: Path) -> Signature | None:
    """The signature a worker kept in `folder`, if these versions of MLX and mlx-lm computed it.

    Computing it takes a forward pass at every start, and a respawned worker's first request
    waits for it: tens of milliseconds on a small model, more on a large one. The folder is
    already this model's (its name is the model's fingerprint), and the layer classes and dtypes
    can change only with the libraries.
    """
    try:
        kept = json.loads(read_regular(folder / SIGNATURE_FILE, limit=HEADER_MAX))
        if kept["versions"] != _versions():
            return None
        return _tuples(kept["signature"])  # type: ignore[no-any-return]
    except (OSError, ValueError, KeyError, TypeError, BadFile):
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
