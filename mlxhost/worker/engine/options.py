"""The engine's options: how it loads its model, batches, and keeps its prompt cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["EngineOptions"]


@dataclass(frozen=True)
class EngineOptions:
    max_batch: int = 32
    prefill_batch: int = 8
    prefill_step: int = 2048
    # How the batch keeps its rows' KV (rows/): "per_row", each row its own cache, attention over
    # each row's own length; or "padded", mlx-lm's BatchKVCache (every row padded to the longest),
    # which a model that fails the per-row probe (rows/support.py) gets in any case.
    kv_layout: str = "per_row"
    # KV quantized to this many bits (4 or 8) in groups of kv_group_size, per row; None: not.
    # Per-row layout only (mlx-lm's BatchKVCache has no quantized form).
    kv_bits: int | None = None
    kv_group_size: int = 64
    # While streams decode, a joining prompt is prefilled in chunks of about this many seconds
    # each, between decode steps (rows/budget.py): the longest a running stream waits for it.
    prefill_chunk_seconds: float = 0.05
    prompt_cache_entries: int = 10
    prompt_cache_bytes: int = 1 << 30
    # The disk tier: at most this many bytes under <state_dir>/prompt-cache/ (0 or no state_dir:
    # memory only).
    prompt_cache_disk_bytes: int = 0
    state_dir: Path | None = None
    # Decoded text reaches the event loop at most this often (first tokens and endings at once).
    # Each hand-over wakes the loop, whose Python then holds the GIL the generation thread needs
    # between steps; readers send frames only every stream_interval anyway.
    publish_interval: float = 0.0
    adapter_path: str | None = None  # LoRA adapters (mlx-lm's adapter directory) loaded over the model
    # In a worker group (group.py): how the model is split across the ranks of MLX's distributed
    # group, "tensor" or "pipeline"; this engine is rank 0's. None: a single worker.
    sharding: str | None = None
    # What the model serves ("generate", "embed", "rerank"; mlxhost.catalog.tasks): a model that
    # embeds or reranks gets pooled passes (pooled.py) between generation steps.
    tasks: frozenset[str] = frozenset({"generate"})
    # A bidirectional encoder (BERT-like), loaded through mlx-embeddings (encoders.py): it embeds.
    encoder: bool = False
    # A pooled pass takes at most this many padded tokens (rows times the longest) and rows: the
    # memory one holds. While streams decode, a pass is cut to about prefill_chunk_seconds of
    # work, so that they wait no longer behind embeddings than behind a joining prompt.
    pooled_batch_tokens: int = 16384
    pooled_batch_rows: int = 256
    # Speculative decoding in the per-row batch (speculate/): "lookup" drafts each row's next
    # tokens from its own prompt and output (prompt lookup), "off" never drafts. At most
    # draft_tokens drafts per row and step; each row's own count adapts to what it accepts.
    speculate: str = "lookup"
    draft_tokens: int = 6
    # A draft model (its directory) whose drafts take the place of prompt lookup's (rows/drafter.py):
    # the model's own tokenizer, checked at load.
    draft_path: str | None = None
