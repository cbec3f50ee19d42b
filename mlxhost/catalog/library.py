"""What is on disk: the Hugging Face cache's model repos and the state directory's outputs.

    list_models(state_dir)      every model found, as `LocalModel` records: the cache's repos
                                first, then the state directory's outputs, each sorted by id
    find(model_id, state_dir)   the one model of that id; `UnknownLocalModel` naming the ids there are
    remove(model_id, state_dir) its files deleted: `RemovedModel`, or a `LibraryError`

Where models are found:

    hf-cache   <HF cache>/models--OWNER--NAME: one record per repo, read with huggingface_hub's own
               `scan_cache_dir` (sizes, revisions, access times), removed with its
               `delete_revisions(...).execute()`, which clears the repo's blobs with it
    state-dir  <state_dir>/models/NAME: a model converted on this machine (`mlxhost pull R
               --quantize B`, `client/convert.py`), named by its folder
               <state_dir>/jobs/ID/output: a succeeded fine-tune (adapters), quantize or fuse job's,
               named as the host serves it (`<model>-q4-<id>`: the job store's record, read-only);
               `job-<id>` when the store has no record of it. A pull job's output only points into
               the cache, whose repo is listed already

`loadable` is decided without importing MLX or mlx-lm: a config.json, safetensors weights all
present (or an adapter: adapter_config.json and adapters.safetensors), and a `model_type` that the
installed mlx-lm has a module for (its `models/` folder, listed through `find_spec`, which does not
import the package; its `MODEL_REMAPPING` read from its source with `ast`). An encoder
(BERT-like) is served through mlx-embeddings instead: `tasks.encoder_problem` says whether it can be.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import re
import shutil
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxhost.catalog import hub
from mlxhost.catalog.tasks import detect, encoder_problem
from mlxhost.wire.layout import JOBS_DB, JOBS_DIR, MODELS_DIR

__all__ = [
    "HF_CACHE",
    "MODELS_DIR",
    "STATE_DIR",
    "AmbiguousLocalModel",
    "LibraryError",
    "LocalModel",
    "MlxLmSupport",
    "RemoveFailed",
    "RemovedModel",
    "UnknownLocalModel",
    "find",
    "list_models",
    "loadability",
    "mlx_lm_support",
    "remove",
]

HF_CACHE = "hf-cache"
STATE_DIR = "state-dir"
SHORT_REVISION = 12  # hex digits of a commit shown, as `mlxhost pull` prints it
# Kinds of job whose output is a model of its own (a pull's output names a snapshot in the cache).
OUTPUT_KINDS = ("finetune", "quantize", "fuse")
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapters.safetensors"
OTHER_WEIGHTS = (".bin", ".pth", ".pt", ".gguf", ".ckpt")  # weight formats mlx-lm does not read
# mlx-lm's MODEL_REMAPPING (mlx_lm/utils.py, 0.32) for when its source cannot be read.
KNOWN_REMAPPING = {
    "mistral": "llama", "llava": "mistral3", "phi-msft": "phixtral", "falcon_mamba": "mamba",
    "kimi_k2": "deepseek_v3", "qwen2_5_vl": "qwen2_vl", "minimax_m2": "minimax", "iquestcoder": "llama",
    "xverse": "llama",
}  # fmt: skip
# A module of mlx_lm/models is an architecture when it defines or imports its `Model`.
_DEFINES_MODEL = re.compile(r"^(class Model\b|from \S+ import .*\bModel\b)", re.M)


class LibraryError(Exception):
    """A model that cannot be found or removed; the message names it."""

    def __init__(self, model_id: str, message: str) -> None:
        super().__init__(message)
        self.model_id = model_id


class UnknownLocalModel(LibraryError):
    def __init__(self, model_id: str, known: Iterable[str]) -> None:
        self.known = tuple(known)
        there = ", ".join(self.known) if self.known else "none"
        super().__init__(model_id, f"no model {model_id!r} on this machine; the models here: {there}")


class AmbiguousLocalModel(LibraryError):
    def __init__(self, model_id: str, paths: Iterable[Path]) -> None:
        self.paths = tuple(paths)
        where = ", ".join(str(p) for p in self.paths)
        super().__init__(
            model_id, f"{model_id!r} names {len(self.paths)} models ({where}): remove the one meant by hand"
        )


class RemoveFailed(LibraryError):
    """The files could not all be deleted (permissions, a busy disk): what is left is named."""


@dataclass(frozen=True)
class LocalModel:
    id: str  # a repo id (hf-cache), or the output's model name (state-dir)
    revision: str | None  # the commit, short; None when nothing records one
    path: Path  # the model's folder: the snapshot of `revision`, or the output
    size_bytes: int  # on disk; a repo's every revision and blob
    architecture: str | None  # config.json's architectures[0], else its model_type
    model_type: str | None  # config.json's, as mlx-lm reads it
    quantization_bits: int | None  # config.json's quantization (or quantization_config) bits
    loadable: bool  # whether mlxhost can serve it (mlx-lm, or mlx-embeddings for an encoder)
    reason: str | None  # why not, when not
    source: str  # HF_CACHE or STATE_DIR
    last_used: float | None  # unix seconds: the files' last access (the cache's scan), or None
    snapshots: tuple[Path, ...] = ()  # every folder a host may load it from (a repo's revisions)
    adapter: bool = False  # LoRA adapters, loaded over their base model

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "revision": self.revision,
            "path": str(self.path),
            "size_bytes": self.size_bytes,
            "architecture": self.architecture,
            "model_type": self.model_type,
            "quantization_bits": self.quantization_bits,
            "loadable": self.loadable,
            "reason": self.reason,
            "source": self.source,
            "last_used": self.last_used,
            "adapter": self.adapter,
        }


@dataclass(frozen=True)
class RemovedModel:
    id: str
    source: str
    path: Path  # the folder removed (a repo's whole cache folder, or the output)
    freed_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "source": self.source, "path": str(self.path), "freed_bytes": self.freed_bytes}


# -- what mlx-lm loads ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MlxLmSupport:
    """The installed mlx-lm's architectures, as its own `_get_classes` maps a config to one."""

    version: str | None
    modules: frozenset[str]  # mlx_lm/models/<name>.py that define a Model
    remapping: Mapping[str, str]  # MODEL_REMAPPING: model_type -> module
    by_architecture: Mapping[tuple[str, str], str]  # MODEL_ARCHITECTURE_REMAPPING

    def module_for(self, model_type: str, architectures: Iterable[str] = ()) -> str:
        for architecture in architectures:
            remapped = self.by_architecture.get((model_type, architecture))
            if remapped is not None:
                return remapped
        return self.remapping.get(model_type, model_type)

    def supports(self, model_type: str, architectures: Iterable[str] = ()) -> bool:
        return self.module_for(model_type, architectures) in self.modules


@functools.cache
def mlx_lm_support() -> MlxLmSupport | None:
    """What the installed mlx-lm loads, read from its files without importing it; None if absent.

    `find_spec` of a top-level package finds its folder without running its `__init__`.
    """
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    modules = set()
    for file in (root / "models").glob("*.py"):
        try:
            if file.stem != "__init__" and _DEFINES_MODEL.search(file.read_text(errors="replace")):
                modules.add(file.stem)
        except OSError:
            continue
    remapping: dict[str, str] = dict(KNOWN_REMAPPING)
    by_architecture: dict[tuple[str, str], str] = {}
    try:
        tree = ast.parse((root / "utils.py").read_text())
    except (OSError, SyntaxError, ValueError):
        tree = None
    for node in tree.body if tree is not None else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                if node.targets[0].id == "MODEL_REMAPPING":
                    remapping = dict(ast.literal_eval(node.value))
                elif node.targets[0].id == "MODEL_ARCHITECTURE_REMAPPING":
                    by_architecture = dict(ast.literal_eval(node.value))
            except (ValueError, TypeError, SyntaxError):
                continue
    try:
        from importlib.metadata import PackageNotFoundError, version

        installed: str | None = version("mlx-lm")
    except PackageNotFoundError:
        installed = None
    return MlxLmSupport(installed, frozenset(modules), remapping, by_architecture)


def loadability(path: Path, config: Mapping[str, Any] | None = None) -> tuple[bool, str | None]:
    """Whether the model folder at `path` can be served here, and why not when not."""
    if (path / ADAPTER_CONFIG).is_file():
        if (path / ADAPTER_WEIGHTS).is_file():
            return True, None
        return False, f"it has {ADAPTER_CONFIG} but no {ADAPTER_WEIGHTS}"
    config = _config(path) if config is None else config
    if not (path / "config.json").is_file():
        return False, "it has no config.json"
    missing = _missing_weights(path)
    if missing is not None:
        return False, missing
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return False, "its config.json names no model_type"
    kind = detect(path)
    if kind.encoder:
        problem = encoder_problem(kind)
        return problem is None, problem
    support = mlx_lm_support()
    if support is None:
        return False, "mlx-lm is not installed here, so nothing can load it (pip install mlx-lm)"
    architectures = _architectures(config)
    if not support.supports(model_type, architectures):
        which = f"mlx-lm {support.version}" if support.version else "the installed mlx-lm"
        module = support.module_for(model_type, architectures)
        return False, f"{which} has no {model_type} architecture (no mlx_lm/models/{module}.py)"
    return True, None


def _missing_weights(path: Path) -> str | None:
    """Why the weights are not all there, or None when they are."""
    weights = sorted(p.name for p in path.glob("*.safetensors") if p.is_file())
    if not weights:
        others = sorted({p.suffix for p in path.iterdir() if p.suffix in OTHER_WEIGHTS})
        if others:
            listed = ", ".join(others)
            return f"its weights are only in {listed} files, which mlx-lm does not read (no safetensors)"
        return "it has no safetensors weights"
    index = _json(path / "model.safetensors.index.json")
    named = index.get("weight_map") if isinstance(index, dict) else None
    if isinstance(named, dict):
        absent = sorted({str(f) for f in named.values()} - set(weights))
        if absent:
            shown = ", ".join(absent[:3]) + (" ..." if len(absent) > 3 else "")
            return f"its weights are incomplete: {shown} missing"
    return None


# -- the listing ---------------------------------------------------------------------------------


def list_models(state_dir: Path | None, *, hf_cache: Path | None = None) -> list[LocalModel]:
    """Every model on disk: the HF cache's (`hub.cache_dir()` unless `hf_cache`), then `state_dir`'s."""
    found = sorted(_cached(hf_cache or hub.cache_dir()), key=lambda m: m.id)
    if state_dir is not None:
        found += sorted(_outputs(Path(state_dir)), key=lambda m: m.id)
    return found


def find(model_id: str, state_dir: Path | None, *, hf_cache: Path | None = None) -> LocalModel:
    """The one model named `model_id`; UnknownLocalModel (naming those there are) or AmbiguousLocalModel."""
    models = list_models(state_dir, hf_cache=hf_cache)
    matches = [m for m in models if m.id == model_id]
    if not matches:
        raise UnknownLocalModel(model_id, [m.id for m in models])
    if len(matches) > 1:
        raise AmbiguousLocalModel(model_id, [m.path for m in matches])
    return matches[0]


def _scan(cache: Path) -> Any:
    """huggingface_hub's scan of `cache`; None when there is no cache yet."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        return scan_cache_dir(cache)
    except (CacheNotFound, FileNotFoundError, NotADirectoryError):
        return None


def _cached(cache: Path) -> list[LocalModel]:
    info = _scan(cache)
    if info is None:
        return []
    return [_cached_model(repo) for repo in info.repos if repo.repo_type == "model" and repo.revisions]


def _cached_model(repo: Any) -> LocalModel:
    revisions = sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)
    # The revision a `main` ref names (`hf download` writes one; `mlxhost pull` fetches by commit and
    # writes none), else the newest one.
    shown = next((r for r in revisions if "main" in r.refs), revisions[0])
    path = Path(shown.snapshot_path)
    config = _config(path)
    loadable, reason = loadability(path, config)
    last = repo.last_accessed or repo.last_modified
    return LocalModel(
        id=repo.repo_id,
        revision=shown.commit_hash[:SHORT_REVISION],
        path=path,
        size_bytes=int(repo.size_on_disk),
        architecture=_architecture(config),
        model_type=_model_type(config),
        quantization_bits=_bits(config),
        loadable=loadable,
        reason=reason,
        source=HF_CACHE,
        last_used=float(last) if last else None,
        snapshots=tuple(Path(r.snapshot_path) for r in revisions),
    )


def _outputs(state_dir: Path) -> list[LocalModel]:
    found = []
    models = state_dir / MODELS_DIR
    for folder in _folders(models):
        source = _json(folder / "source.json")
        commit = source.get("commit") if isinstance(source, dict) else None
        revision = commit[:SHORT_REVISION] if isinstance(commit, str) and commit else None
        found.append(_output_model(folder.name, folder, revision))
    records = _job_records(state_dir / JOBS_DB)
    for folder in _folders(state_dir / JOBS_DIR):
        output = folder / "output"
        if not output.is_dir():
            continue
        record = records.get(folder.name)
        if record is None:
            spec = _json(folder / "spec.json")
            kind = spec.get("kind") if isinstance(spec, dict) else None
            if kind not in OUTPUT_KINDS:
                continue  # a pull's (its repo is in the cache), or not a job folder at all
            name, base = f"job-{folder.name}", spec.get("model_path")
        else:
            kind, name, base = record
            if kind not in OUTPUT_KINDS:
                continue
        found.append(_output_model(name, output, None, base if isinstance(base, str) else None))
    return found


def _output_model(name: str, path: Path, revision: str | None, base: str | None = None) -> LocalModel:
    adapter = (path / ADAPTER_CONFIG).is_file()
    config = _config(path)
    if adapter:  # what it is comes from its base model
        adapter_config = _json(path / ADAPTER_CONFIG)
        named = adapter_config.get("model") if isinstance(adapter_config, dict) else None
        base = base or (named if isinstance(named, str) else None)
        config = _config(Path(base)) if base else {}
    loadable, reason = loadability(path, config)
    if adapter and loadable and base and not (Path(base) / "config.json").is_file():
        loadable, reason = False, f"its base model {base} is gone"
    return LocalModel(
        id=name,
        revision=revision,
        path=path,
        size_bytes=_tree_size(path),
        architecture=_architecture(config),
        model_type=_model_type(config),
        quantization_bits=_bits(config),
        loadable=loadable,
        reason=reason,
        source=STATE_DIR,
        last_used=_last_access(path),
        snapshots=(path,),
        adapter=adapter,
    )


def _folders(parent: Path) -> list[Path]:
    try:
        children = list(parent.iterdir())
    except OSError:
        return []
    return sorted(p for p in children if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def _job_records(db: Path) -> dict[str, tuple[str, str, str | None]]:
    """The succeeded jobs' (kind, the model their output serves as, the base model's path), by id.

    Read-only: the host may be writing the store (WAL lets a reader in). {} when it cannot be read.
    """
    if not db.is_file():
        return {}
    try:
        connection = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True, timeout=2.0)
    except sqlite3.Error:
        return {}
    found: dict[str, tuple[str, str, str | None]] = {}
    try:
        rows = connection.execute(
            "SELECT id, kind, model, options, result FROM jobs WHERE state = 'succeeded'"
        ).fetchall()
    except sqlite3.Error:
        return {}
    finally:
        connection.close()
    for job_id, kind, model, options_text, result_text in rows:
        try:
            options = json.loads(options_text) if options_text else {}
            result = json.loads(result_text) if result_text else None
        except ValueError:
            continue
        options = options if isinstance(options, dict) else {}
        if isinstance(result, dict) and isinstance(result.get("model"), str):
            name = result["model"]
        else:  # as host/jobs/models.py's job_model names it
            suffix = {"finetune": "lora", "fuse": "fused"}.get(kind, f"q{options.get('bits')}")
            name = f"{model}-{suffix}-{job_id}"
        base = options.get("model_path")
        found[str(job_id)] = (str(kind), name, base if isinstance(base, str) else None)
    return found


# -- removal -------------------------------------------------------------------------------------


def remove(model_id: str, state_dir: Path | None, *, hf_cache: Path | None = None) -> RemovedModel:
    """Delete `model_id`'s files: a repo's every revision and blob from the cache, or an output's folder."""
    model = find(model_id, state_dir, hf_cache=hf_cache)
    if model.source == HF_CACHE:
        return _remove_repo(model, hf_cache or hub.cache_dir())
    return _remove_output(model)


def _remove_repo(model: LocalModel, cache: Path) -> RemovedModel:
    info = _scan(cache)
    repos = info.repos if info is not None else ()
    repo = next((r for r in repos if r.repo_type == "model" and r.repo_id == model.id), None)
    if repo is None:  # gone between the listing and now
        raise UnknownLocalModel(model.id, [])
    strategy = info.delete_revisions(*(r.commit_hash for r in repo.revisions))
    try:
        strategy.execute()
    except OSError as exc:
        raise RemoveFailed(model.id, f"removing {model.id} from {repo.repo_path} failed: {exc}") from None
    if Path(repo.repo_path).exists():
        # huggingface_hub logs what it could not delete (a permission refused) and goes on.
        raise RemoveFailed(
            model.id,
            f"{model.id} could not be removed whole: {repo.repo_path} is still there (check its permissions)",
        )
    return RemovedModel(model.id, HF_CACHE, Path(repo.repo_path), int(strategy.expected_freed_size))


def _remove_output(model: LocalModel) -> RemovedModel:
    size = _tree_size(model.path)
    errors: list[str] = []
    shutil.rmtree(model.path, onerror=lambda function, path, exc: errors.append(f"{path}: {exc[1]}"))
    if errors or model.path.exists():
        shown = "; ".join(errors[:3]) or f"{model.path} is still there"
        raise RemoveFailed(model.id, f"{model.id} could not be removed whole: {shown}")
    return RemovedModel(model.id, STATE_DIR, model.path, size)


# -- reading a model's files ---------------------------------------------------------------------


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _config(path: Path) -> dict[str, Any]:
    config = _json(path / "config.json")
    return config if isinstance(config, dict) else {}


def _architectures(config: Mapping[str, Any]) -> tuple[str, ...]:
    value = config.get("architectures") or ()
    if isinstance(value, str):
        value = (value,)
    return tuple(str(a) for a in value) if isinstance(value, list | tuple) else ()


def _architecture(config: Mapping[str, Any]) -> str | None:
    architectures = _architectures(config)
    return architectures[0] if architectures else _model_type(config)


def _model_type(config: Mapping[str, Any]) -> str | None:
    value = config.get("model_type")
    return value if isinstance(value, str) and value else None


def _bits(config: Mapping[str, Any]) -> int | None:
    for key in ("quantization", "quantization_config"):
        section = config.get(key)
        bits = section.get("bits") if isinstance(section, dict) else None
        if isinstance(bits, int) and not isinstance(bits, bool):
            return bits
    return None


def _files(path: Path) -> Iterable[os.stat_result]:
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                yield os.lstat(os.path.join(folder, name))
            except OSError:
                continue


def _tree_size(path: Path) -> int:
    return sum(s.st_size for s in _files(path))


def _last_access(path: Path) -> float | None:
    return max((s.st_atime for s in _files(path)), default=None)
