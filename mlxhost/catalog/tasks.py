"""What a model is for (generation, embeddings, reranking), as its [[model]] says or its files do.

    task = "generate"                 chat, completions, responses, messages (the default)
    task = "embed"                    /v1/embeddings
    task = "rerank"                   /v1/rerank
    task = ["generate", "embed"]      both, from one worker holding the weights once

Detected when a [[model]] does not say: a sentence-transformers model (`modules.json` or
`config_sentence_transformers.json` beside its weights) embeds, with the pooling its Pooling
module names and the prompts (a query's instruction) its config lists; a
`*ForSequenceClassification` architecture reranks (a cross-encoder, which mlx-embeddings cannot
run yet: refused at start); an encoder architecture (BERT, XLM-R, ModernBERT) embeds. Anything
else generates. A decoder reranker (Qwen3-Reranker) is a causal LM in its files, so its
[[model]] says `task = "rerank"`.

Encoders are served through mlx-embeddings, an optional extra; `encoder_problem` says what to
install when it is missing. Nothing here imports MLX: the parent reads this before any worker runs.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mlxhost.wire.launch import TASKS

__all__ = [
    "ENCODER_TYPES",
    "SERVED_ENCODERS",
    "TASKS",
    "ModelKind",
    "detect",
    "encoder_problem",
    "model_type_of",
    "task_list",
]

# config.json model_types (dashes as underscores) that are bidirectional encoders: mlx-lm cannot
# load them. mlx-embeddings 0.1 runs the first three (worker/engine/encoders.py).
SERVED_ENCODERS = frozenset({"bert", "xlm_roberta", "modernbert"})
ENCODER_TYPES = SERVED_ENCODERS | {"roberta", "nomic_bert", "distilbert", "mpnet", "electra"}
POOLING_MODES = {
    "pooling_mode_lasttoken": "last",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
}


@dataclass(frozen=True)
class ModelKind:
    """What a model's files say it is."""

    tasks: tuple[str, ...] = ("generate",)
    pooling: str = "last"  # how an embedding is read from the hidden states: last, mean, cls
    encoder: bool = False  # a bidirectional encoder (served through mlx-embeddings)
    matryoshka: bool = False  # trained so that a vector's leading dimensions embed on their own
    prompts: dict[str, str] = field(default_factory=dict)  # by input type: "query", "document"
    model_type: str = ""  # config.json's, dashes as underscores

    def with_tasks(self, tasks: tuple[str, ...] | None) -> ModelKind:
        return self if tasks is None else replace(self, tasks=tasks)


def task_list(value: object) -> tuple[str, ...]:
    """ "generate", "embed" or "rerank", or a list of them"""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError
    tasks = tuple(dict.fromkeys(items))
    if any(task not in TASKS for task in tasks):
        raise ValueError
    return tasks


def detect(path: Path) -> ModelKind:
    """What the model directory at `path` is for; a generation model when its files do not say."""
    config = _json(path / "config.json")
    model_type = model_type_of(config)
    encoder = model_type in ENCODER_TYPES
    architectures = [str(a) for a in config.get("architectures") or ()]
    matryoshka = bool(config.get("is_matryoshka") or config.get("matryoshka_dimensions"))
    sentence = _json(path / "config_sentence_transformers.json")
    prompts = {k: v for k, v in (sentence.get("prompts") or {}).items() if isinstance(v, str)}
    pooling = _pooling(path)
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        tasks: tuple[str, ...] = ("rerank",)
    elif sentence or (path / "modules.json").is_file() or encoder:
        tasks = ("embed",)
    else:
        tasks = ("generate",)
    if pooling is None:
        pooling = "cls" if encoder else "last"
    return ModelKind(tasks, pooling, encoder, matryoshka, prompts, model_type)


def encoder_problem(kind: ModelKind) -> str | None:
    """Why an encoder model cannot be served here; None when it can (or is no encoder)."""
    if not kind.encoder:
        return None
    if kind.model_type not in SERVED_ENCODERS:
        served = ", ".join(sorted(SERVED_ENCODERS))
        return f"it is a {kind.model_type} encoder, and mlx-embeddings runs only {served} encoders"
    if kind.tasks != ("embed",):
        return 'an encoder model embeds (task = "embed"); it cannot generate or rerank here'
    if importlib.util.find_spec("mlx_embeddings") is None:
        return (
            "it is an encoder model (BERT-like), served through mlx-embeddings, which is not "
            "installed: pip install 'mlxhost[embeddings]'"
        )
    return None


def model_type_of(config: dict[str, Any]) -> str:
    """config.json's model_type, lower case, dashes as underscores (mlx-embeddings' module names)."""
    return str(config.get("model_type", "")).lower().replace("-", "_")


def _pooling(path: Path) -> str | None:
    modules = _json(path / "modules.json", default=[])
    folders = [
        m.get("path", "")
        for m in modules
        if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling")
    ] or ["1_Pooling"]
    for folder in folders:
        config = _json(path / folder / "config.json")
        for key, mode in POOLING_MODES.items():
            if config.get(key):
                return mode
    return None


def _json(path: Path, default: Any = None) -> Any:
    """The JSON at `path` when it is of `default`'s type ({} unless said); `default` otherwise."""
    default = {} if default is None else default
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return default
    return data if isinstance(data, type(default)) else default
