"""Loading a model for the engine: the model (or this rank's shard of it), the BatchGenerator that
steps it, and its prompt cache with the cache's disk tier.

The engine (engine.py) loads in its generation thread, where every MLX operation runs. A follower
rank of a group (group.py) loads its shard the same way, then follows rank 0 (`serve_follower`).

With a state directory and a disk bound, the prompt cache gets its disk tier (cache/disk.py)
once the model is loaded: the model's fingerprint names its folder, and a probe cache (one token
through the model) gives the signature every loaded cache must match.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import ConcatenateKVCache, KVCache, QuantizedKVCache
from mlx_lm.utils import sharded_load

from mlxhost.worker.cache.disk import PromptStore
from mlxhost.worker.cache.files import cache_signature
from mlxhost.worker.cache.folder import (
    keep_signature,
    kept_signature,
    make_folder,
    model_fingerprint,
    store_folder,
)
from mlxhost.worker.cache.memory import PromptCache
from mlxhost.worker.engine.group import SEED, Link, describe_ranks, follow
from mlxhost.worker.engine.options import EngineOptions
from mlxhost.worker.engine.rows.batch import RowBatch, row_cache
from mlxhost.worker.engine.rows.budget import PrefillBudget
from mlxhost.worker.engine.rows.support import quantized_reason, unsupported_reason
from mlxhost.worker.engine.tokenizer import Tokenizer

__all__ = [
    "DraftMismatch",
    "KVLayout",
    "load_draft",
    "load_model",
    "load_shard",
    "logits_width",
    "make_generator",
    "open_disk_tier",
    "prompt_cache_of",
    "serve_follower",
    "wants_snapshots",
]

logger = logging.getLogger("mlxhost.engine")


def load_model(model_path: Path, options: EngineOptions) -> tuple[Any, Any, list[dict[str, Any]]]:
    """The model (in a group, this rank's shard), mlx-lm's tokenizer, and the group's ranks
    (none for a single worker)."""
    if options.sharding is not None:
        return load_shard(model_path, options.sharding)
    model, loaded = mlx_lm.load(str(model_path), adapter_path=options.adapter_path)[:2]
    return model, loaded, []


class DraftMismatch(Exception):
    """A draft model whose tokenizer is not the model's: its tokens would mean other text."""


def load_draft(options: EngineOptions, tokenizer: Any) -> Any:
    """The draft model `options` names (None: none), once its tokenizer is found to be the
    model's (`tokenizer`, mlx-lm's): the same vocabulary, token for token."""
    if options.draft_path is None or options.speculate == "off":
        return None
    draft, theirs = mlx_lm.load(options.draft_path)[:2]
    ours, other = tokenizer.get_vocab(), theirs.get_vocab()
    if ours != other:
        raise DraftMismatch(
            f"the draft model {options.draft_path} has another tokenizer than the model: "
            f"{vocabulary_difference(ours, other)}; a draft model must share the model's, token for token"
        )
    return draft


def vocabulary_difference(ours: dict[str, int], theirs: dict[str, int], shown: int = 3) -> str:
    """What differs between two vocabularies, as an operator would want it said: sizes, tokens
    only one has, and tokens both have under other ids (a few of each, by name)."""
    only_ours = sorted(set(ours) - set(theirs))
    only_theirs = sorted(set(theirs) - set(ours))
    moved = sorted(t for t in set(ours) & set(theirs) if ours[t] != theirs[t])
    parts = [f"the model has {len(ours)} tokens, the draft {len(theirs)}"]

    def some(tokens: list[str]) -> str:
        named = ", ".join(repr(t) for t in tokens[:shown])
        return named + (f" and {len(tokens) - shown} more" if len(tokens) > shown else "")

    if only_ours:
        parts.append(f"{len(only_ours)} only in the model's ({some(only_ours)})")
    if only_theirs:
        parts.append(f"{len(only_theirs)} only in the draft's ({some(only_theirs)})")
    if moved:
        first = moved[0]
        parts.append(
            f"{len(moved)} under other ids ({some(moved)}; e.g. {first!r} is {ours[first]} in the model's, "
            f"{theirs[first]} in the draft's)"
        )
    return ", ".join(parts)


def logits_width(model: Any, tokenizer: Tokenizer) -> int:
    """The width of the model's logits, which may exceed the tokenizer's own count."""
    logits = getattr(getattr(model, "args", None), "vocab_size", None)
    return logits if isinstance(logits, int) else tokenizer.vocab_size


@dataclass(frozen=True)
class KVLayout:
    """How the engine's batch keeps its rows' KV: per row (rows/), or padded (mlx-lm's
    BatchKVCache) and why."""

    per_row: bool
    reason: str | None = None  # why padded: asked for, or the model failed the per-row probe
    kv_bits: int | None = None  # the KV's bits when quantized
    kv_bits_reason: str | None = None  # why kv_bits was asked for and not applied

    def describe(self) -> dict[str, Any]:
        return {
            "kv_layout": "per_row" if self.per_row else "padded",
            "kv_layout_reason": self.reason,
            "kv_bits": self.kv_bits,
            "kv_bits_reason": self.kv_bits_reason,
        }


def make_generator(
    model: Any, eos_token_ids: Sequence[int], options: EngineOptions, draft: Any = None
) -> tuple[Any, KVLayout]:
    """The batch an engine steps, and its KV layout; every rank of a group builds the same one.
    `draft`: a draft model whose drafts the per-row batch verifies (None: prompt lookup's).

    Per-row KV (rows/batch.py) where the model passes the probe (rows/support.py), else mlx-lm's
    BatchGenerator, said once in the log."""
    stops = [[t] for t in eos_token_ids]
    if options.kv_layout == "padded":
        reason: str | None = "kv_layout = 'padded' was asked for"
    else:
        reason = unsupported_reason(model)
        if options.sharding is not None:
            reason = _agreed(reason)
    if reason is None:
        kv_bits, why = options.kv_bits, None
        if kv_bits is not None:
            why = quantized_reason(model, row_cache(model, kv_bits, options.kv_group_size))
            if why is not None:
                logger.warning("kv_bits = %d is not applied: %s", kv_bits, why)
                kv_bits = None
        budget = PrefillBudget(
            prefill_step=options.prefill_step,
            seconds=options.prefill_chunk_seconds,
            adaptive=options.sharding is None,  # a group's ranks must cut prompts alike
        )
        batch = RowBatch(
            model,
            stop_tokens=stops,
            max_batch=options.max_batch,
            budget=budget,
            kv_bits=kv_bits,
            kv_group_size=options.kv_group_size,
            draft_tokens=options.draft_tokens if options.speculate != "off" else 0,
            priced=options.speculate != "always",
            draft_model=draft,
        )
        return batch, KVLayout(True, kv_bits=kv_bits, kv_bits_reason=why)
    why = None
    if draft is not None:
        logger.warning("the draft model is not used: the padded layout does not speculate")
    if options.kv_bits is not None:
        why = "the padded layout has no quantized KV"
        logger.warning("kv_bits = %d is not applied: %s", options.kv_bits, why)
    logger.warning("the batch pads every row to the longest (mlx-lm's BatchKVCache): %s", reason)
    generator = BatchGenerator(
        model,
        stop_tokens=stops,
        completion_batch_size=options.max_batch,
        prefill_batch_size=options.prefill_batch,
        prefill_step_size=options.prefill_step,
    )
    return generator, KVLayout(False, reason, kv_bits_reason=why)


def _agreed(reason: str | None) -> str | None:
    """`reason`, or another rank's failure: a group's ranks must all batch alike (a collective,
    so every rank calls it at the same point of its load)."""
    failed = mx.distributed.all_sum(mx.array(int(reason is not None)), stream=mx.cpu).item()
    if reason is None and failed:
        return "another rank of the group failed the per-row probe"
    return reason


def load_shard(model_path: Path, sharding: str) -> tuple[Any, Any, list[dict[str, Any]]]:
    """This rank's shard of the model, the tokenizer, and every rank (once all have loaded)."""
    group = mx.distributed.init(strict=True)
    if sharding == "tensor":
        model, tokenizer = sharded_load(str(model_path), tensor_group=group)
    elif sharding == "pipeline":
        model, tokenizer = sharded_load(str(model_path), pipeline_group=group)
    else:
        raise ValueError(f"sharding must be 'tensor' or 'pipeline', not {sharding!r}")
    mx.random.seed(SEED)  # every rank samples alike (see group.py)
    return model, tokenizer, describe_ranks(group)


def serve_follower(model_path: Path, options: EngineOptions, on_loaded: Callable[[], object]) -> None:
    """A follower rank of a group: load its shard, then make rank 0's calls until it closes."""
    assert options.sharding is not None
    model, loaded, _ = load_shard(model_path, options.sharding)
    tokenizer = Tokenizer(loaded)
    vocab_size = logits_width(model, tokenizer)
    generator, _ = make_generator(model, tokenizer.decoder.eos_token_ids, options)
    on_loaded()
    follow(generator, Link(mx.distributed.init(), generator.stream), vocab_size, prompt_cache_of(options))


def prompt_cache_of(options: EngineOptions) -> PromptCache:
    """The memory tier an engine keeps; every rank of a group keeps the same (see group.py)."""
    # A pipelined group keeps none: its ranks' shards of an entry differ in size (group.py).
    entries = 0 if options.sharding == "pipeline" else options.prompt_cache_entries
    return PromptCache(entries, options.prompt_cache_bytes)


def wants_snapshots(probe: list[Any]) -> bool:
    """Whether the batch keeps a snapshot at the end of each prompt for a model whose cache is
    like `probe`: one that may become untrimmable (a trimmable one's final entry covers it)."""
    plain = (KVCache, QuantizedKVCache, ConcatenateKVCache)
    return any(not isinstance(layer, plain) for layer in probe)


def open_disk_tier(
    model: Any, probe: list[Any], model_path: Path, options: EngineOptions, prompt_cache: PromptCache
) -> PromptStore | None:
    """Give `prompt_cache` its disk tier, if the options ask for one; the store, to close at the end.

    `probe`: a fresh cache of `model`, of the kind its rows keep (quantized with kv_bits), which
    takes one token through the model when the folder has no signature yet."""
    if options.sharding is not None:
        # A group keeps its prompt cache in memory only: each rank's files would hold its
        # own shard, and a rank's loader thread would take entries in when it pleased.
        return None
    if not (prompt_cache.enabled and options.prompt_cache_disk_bytes > 0 and options.state_dir):
        return None
    if not model_path.is_dir():
        return None
    adapter = Path(options.adapter_path) if options.adapter_path else None
    try:
        variant = ""
        if options.kv_bits is not None:  # quantized entries are another kind of file
            variant = f"kv_bits={options.kv_bits},kv_group_size={options.kv_group_size}"
        fingerprint = model_fingerprint(model_path, adapter, variant)
        folder = store_folder(options.state_dir, model_path, fingerprint)
        make_folder(folder, model_path, adapter, fingerprint)  # with the record of its model
        signature = kept_signature(folder)
        if signature is None:
            model(mx.array([[0]]), cache=probe)
            mx.eval([layer.state for layer in probe])
            signature = cache_signature(probe)
            keep_signature(folder, signature)
        store = PromptStore(folder, options.prompt_cache_disk_bytes, signature)
    except OSError as exc:
        logger.warning("prompt cache: no disk tier: %s", exc)
        return None
    prompt_cache.disk = store
    return store
