"""Offline demo models: real mlx-lm model directories with random weights.

Nothing here downloads anything. A model directory is built from a seeded
random generator and a byte-level BPE tokenizer trained on text that this
package generates itself, so tests, benchmarks and demos get a model that
``mlx_lm.load`` treats exactly like a real Llama (or, size "sliding", Gemma 3)
checkpoint.

The model's size and weights are in `weights`, its tokenizer in
`tokenizer`, the text that tokenizer is trained on in `corpus`; size
"agent" has its own tokenizer (`agent_tokenizer`, trained on
`agent_corpus`), made for prompts of tens of thousands of characters. This
module puts a model directory together. Heavy libraries (numpy, safetensors,
tokenizers) are imported inside the functions that need them, and mlx is
never imported: processes that only want a path must stay cheap to start.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Final

from mlxhost.demo import embedding, families
from mlxhost.demo.tokenizer import (
    BOS_TOKEN,
    CHAT_TEMPLATE,
    EOS_TOKEN,
    PAD_TOKEN,
    ROLE_TOKENS,
    SPECIAL_TOKENS,
    tokenizer_documents,
    write_tokenizer,
)
from mlxhost.demo.weights import SIZES, ModelSize, model_size, parameter_count, weight_shapes, write_weights

__all__ = [
    "BOS_TOKEN",
    "CHAT_TEMPLATE",
    "DEFAULT_FAMILY",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SIZES",
    "SPECIAL_TOKENS",
    "ModelSize",
    "cached_model",
    "default_cache_dir",
    "ensure_demo_model",
    "make_model",
    "parameter_count",
]

# Part of the cache directory name and of the marker in config.json: bump it
# whenever the files this package writes change, so stale caches are ignored.
FORMAT_VERSION: Final = 2

# The variant that writes Hermes/Qwen JSON calls: the demo model as it was before variants.
DEFAULT_FAMILY: Final = "json_tools"

# Other weights for the embedding model and the reranker than the chat model's: three models
# of one host, not one model under three names.
TASK_SEEDS: Final = {"embed": 1001, "rerank": 2002}

_WEIGHTS_FILE: Final = "model.safetensors"
_FILES: Final = (
    "config.json",
    "generation_config.json",
    _WEIGHTS_FILE,
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if base and os.path.isabs(base):
        return Path(base) / "mlxhost"
    return Path.home() / ".cache" / "mlxhost"


def ensure_demo_model(
    cache_dir: Path | None = None, size: str = "tiny", family: str = DEFAULT_FAMILY, task: str = "generate"
) -> Path:
    """The demo model of `size` ("tiny"; "agent" holds a coding agent's long prompts), built on
    first use; `family` names the variant (demo/families/: the tool-call syntax it writes);
    `task` "embed" or "rerank" the embedding model or reranker (see make_model)."""
    name = f"demo-{size}" if family == DEFAULT_FAMILY else f"demo-{size}-{family}"
    name += "" if task == "generate" else f"-{task}"
    return cached_model(name, size, cache_dir=cache_dir, family=family, task=task)


def cached_model(
    name: str,
    size: str = "tiny",
    seed: int = 0,
    cache_dir: Path | None = None,
    family: str = DEFAULT_FAMILY,
    task: str = "generate",
) -> Path:
    """A demo model kept in the cache as `name`, built on first use.

    The directory name carries `FORMAT_VERSION`, so a model an older mlxhost wrote is built anew
    beside it rather than refused.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return make_model(root / f"{name}-v{FORMAT_VERSION}", size, seed=seed, family=family, task=task)


def make_model(
    path: Path, size: str = "tiny", seed: int = 0, family: str = DEFAULT_FAMILY, task: str = "generate"
) -> Path:
    """Write an mlx-lm model directory at ``path`` and return ``path``.

    ``family`` picks the variant (demo/families/): the chat template and special tokens of a
    model family whose tool calls mlx-lm reads; the weights are the same for every family.
    ``task`` "embed" adds what a sentence-transformers embedding model (Qwen3-Embedding) has
    beside its weights: last-token pooling, a query instruction, Matryoshka training declared;
    "rerank" seeds other weights (a decoder reranker's files say nothing more than a causal
    LM's, so its [[model]] says `task = "rerank"`).
    The same ``(size, seed, family)`` always gives byte-identical files. The
    directory appears all at once, by renaming a finished sibling into
    place, so readers never see a half-written model; if a matching model
    is already there (say another process won the race) it is left alone.
    """
    path = Path(path)
    spec = model_size(size)
    variant = families.family(family)  # KeyError for an unknown family, before anything is written
    marker = _marker(size, seed, family, task)
    if _is_complete(path, marker):
        return path
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        # Never clobber something we did not write, or a model built with
        # other settings: the caller asked for this exact model.
        raise FileExistsError(f"{path} exists and is not a {size!r} seed={seed} {family} demo model")

    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique sibling, on the same filesystem so the rename is atomic.
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    tmp.mkdir()
    renamed = False
    try:
        _write_model(tmp, spec, seed + TASK_SEEDS.get(task, 0), marker, variant, task)
        try:
            # Replaces an empty directory too, so pytest's tmp_path works.
            os.replace(tmp, path)
            renamed = True
        except OSError:
            if _is_complete(path, marker):
                return path
            raise
    finally:
        if not renamed:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def _marker(size: str, seed: int, family: str, task: str = "generate") -> dict[str, Any]:
    marker: dict[str, Any] = {"format": FORMAT_VERSION, "size": size, "seed": seed}
    if family != DEFAULT_FAMILY:  # the default's files stay as they were before variants
        marker["family"] = family
    if task != "generate":
        marker["task"] = task
    return marker


def _is_complete(path: Path, marker: dict[str, Any]) -> bool:
    # Only finished directories are ever renamed into place, so every file
    # being present plus a matching marker means the model is usable.
    if not all((path / name).is_file() for name in _FILES):
        return False
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("mlxhost_demo") == marker


def _write_model(
    directory: Path,
    spec: ModelSize,
    seed: int,
    marker: dict[str, Any],
    variant: families.Family,
    task: str = "generate",
) -> None:
    special_tokens = (*ROLE_TOKENS, *variant.special_tokens)
    bos, eos, pad = (special_tokens.index(t) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN))
    head_dim = spec.hidden_size // spec.num_attention_heads
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "torch_dtype": spec.dtype,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "mlxhost_demo": marker,
    }
    if spec.architecture == "gemma3_text":
        for key in ("hidden_act", "attention_bias", "mlp_bias", "tie_word_embeddings"):
            del config[key]
        config.update(
            architectures=["Gemma3ForCausalLM"],
            model_type="gemma3_text",
            sliding_window=spec.sliding_window,
            sliding_window_pattern=2,
            query_pre_attn_scalar=head_dim,
            rope_local_base_freq=10000.0,
            rms_norm_eps=1e-6,
        )
    if spec.architecture == "qwen2":
        for key in ("attention_bias", "mlp_bias"):
            del config[key]
        config.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    _write_json(directory / "config.json", config)
    _write_json(
        directory / "generation_config.json",
        {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad},
    )
    write_weights(directory / _WEIGHTS_FILE, spec, seed)
    if spec.architecture == "qwen2":
        # mlx-lm's pipelined load picks each stage's weight files from the index.
        names = [name for name, _ in weight_shapes(spec)]
        _write_json(
            directory / "model.safetensors.index.json", {"weight_map": dict.fromkeys(names, _WEIGHTS_FILE)}
        )
    write_tokenizer(directory / "tokenizer.json", spec, special_tokens)
    documents = tokenizer_documents(spec, variant.chat_template, special_tokens, variant.tokenizer_config)
    for name, document in documents.items():
        _write_json(directory / name, document)
    if task == "embed":
        embedding.write_sentence_transformers(directory)
    # The rename is only atomic for the directory entry; flushing the
    # contents first means a crash cannot expose empty files under it.
    for name in _FILES:
        fd = os.open(directory / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
