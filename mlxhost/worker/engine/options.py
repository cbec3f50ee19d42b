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
