"""Which models to serve, and where each comes from: a local directory, or a Hugging Face repo
id in the local cache.

A repo id that is not in the cache is `NotDownloaded`: `mlxhost serve` pulls it before its worker
starts (`catalog.hub`, as a pull job of the host), unless `--offline` or `HF_HUB_OFFLINE` says
never. Only the operator's configuration names what is pulled: a request can never make the host
fetch anything. Nothing here imports MLX.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from mlxhost.config import Settings
from mlxhost.errors import ModelNotFound, NotDownloaded
from mlxhost.catalog.spec import ModelSpec
from mlxhost.catalog.tasks import ModelKind, detect

__all__ = ["DEMO_MODEL_ID", "is_offline", "model_kind", "model_specs", "refresh_kinds", "resolve_model"]

logger = logging.getLogger("mlxhost")

DEMO_MODEL_ID = "mlxhost-demo"


def model_specs(settings: Settings) -> tuple[ModelSpec, ...]:
    """The configured models, or the demo model when none is."""
    if settings.model:
        return settings.model
    from mlxhost.demo import ensure_demo_model

    path = ensure_demo_model(size=settings.demo)
    logger.warning(
        "no --model given: serving the built-in demo model (random weights, so its output is "
        "gibberish) from %s. To serve a real model: mlxhost serve --model /path/to/mlx-model "
        "(or a Hugging Face repo id: mlxhost pull REPO fetches one, and serve pulls one it lacks).",
        path,
    )
    embedder = ensure_demo_model(size="tiny", task="embed")
    reranker = ensure_demo_model(size="tiny", task="rerank")
    return (
        ModelSpec(settings.model_id or DEMO_MODEL_ID, str(path), aliases=settings.model_aliases),
        # Beside it, so that /v1/embeddings and /v1/rerank answer on a fresh machine too; each
        # loads on its first request.
        ModelSpec(f"{DEMO_MODEL_ID}-embed", str(embedder), task=("embed",)),
        ModelSpec(f"{DEMO_MODEL_ID}-rerank", str(reranker), task=("rerank",)),
    )


def resolve_model(spec: str) -> Path:
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path} is not an mlx-lm model directory: it has no config.json")
        return path.resolve()
    if path.exists():
        raise ModelNotFound(f"{path} is a file; --model takes a model directory")
    if spec.partition("@")[0].count("/") != 1 or spec.startswith((".", "/", "~")):
        raise ModelNotFound(f"no model directory at {path}")
    return _from_hf_cache(spec)


def _from_hf_cache(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo, _, revision = repo_id.partition("@")
    try:
        snapshot = snapshot_download(repo, revision=revision or None, local_files_only=True)
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        raise NotDownloaded(
            repo_id,
            f"{repo_id!r} is not in the local Hugging Face cache, and pulling is off (--offline or "
            f"HF_HUB_OFFLINE). Pull it first (`mlxhost pull {repo_id}`), or pass a model directory.",
        ) from None
    path = Path(snapshot)
    if not (path / "config.json").is_file():
        raise ModelNotFound(f"the cached copy of {repo_id!r} at {path} has no config.json")
    return path


def is_offline(settings: Settings) -> bool:
    """Whether this host may not pull: --offline, or huggingface_hub's own HF_HUB_OFFLINE."""
    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return settings.offline or flag in ("1", "true", "yes", "on")


def model_kind(spec: ModelSpec) -> ModelKind:
    """What `spec` serves: its [[model]]'s `task`, or what its files say (mlxhost.catalog.tasks).

    A model not found yet is taken to generate; its worker's load says what is wrong with it.
    Read once per model: every request is routed by it.
    """
    return _kind(spec.path, spec.task)


def refresh_kinds() -> None:
    """Read every model's kind afresh: one whose files were missing (being pulled) has them now."""
    _kind.cache_clear()


@functools.lru_cache(maxsize=256)
def _kind(location: str, task: tuple[str, ...] | None) -> ModelKind:
    try:
        path = resolve_model(location)
    except ModelNotFound:
        return ModelKind().with_tasks(task)
    return detect(path).with_tasks(task)
