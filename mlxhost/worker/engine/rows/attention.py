"""Attention over per-row KV: the one function a fused kernel would replace.

mlx-lm's models call `scaled_dot_product_attention` from `mlx_lm.models.base`, each module
holding its own reference to it. `install` points those references at `attention`, which sends
a step over `RowsKV` (kv.py) to `rows_attention` and every other call to mlx-lm's own function,
unchanged: a worker that falls back to `BatchKVCache`, and every single-row prefill, runs exactly
the code it ran before.

`rows_attention` runs each row's queries over that row's own keys and values: the cost is the sum
of the rows' lengths, not rows times the longest. It loops over the rows in Python, one MLX call
each, which on a large model is nothing beside the attention itself. On Apple GPUs a Metal kernel
(`mx.fast.metal_kernel`) reading every row's KV in one launch can take its place, with the same
arguments; it is not written here because nothing on this machine could test it.
"""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
from mlx_lm.models import base

from mlxhost.worker.engine.rows.kv import RowMasks, RowsKV

__all__ = ["attention", "install", "rows_attention"]

_original = base.scaled_dot_product_attention


def rows_attention(queries: mx.array, rows: RowsKV, scale: float, mask: Any, sinks: Any = None) -> mx.array:
    """Each row's queries (rows on axis 0) over its own keys and values, as one array again."""
    count = len(rows.caches)
    queries_of = mx.split(queries, count, axis=0) if count > 1 else [queries]
    masks = mask.masks if isinstance(mask, RowMasks) else (mask,) * count
    out = [
        _original(q, k, v, cache=cache, scale=scale, mask=m, sinks=sinks)
        for q, (k, v), cache, m in zip(queries_of, rows.fetched, rows.caches, masks, strict=True)
    ]
    return out[0] if count == 1 else mx.concatenate(out, axis=0)


def attention(
    queries: mx.array,
    keys: Any,
    values: Any,
    cache: Any,
    scale: float,
    mask: Any,
    sinks: Any = None,
) -> mx.array:
    """mlx-lm's `scaled_dot_product_attention`, with a step over per-row KV sent to `rows_attention`."""
    if isinstance(cache, RowsKV):
        return rows_attention(queries, cache, scale, mask, sinks)
    return _original(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)


def install() -> None:
    """Point every loaded mlx-lm model module's attention at `attention` (idempotent).

    Called once the model is loaded, when its architecture's module is imported."""
    for name, module in list(sys.modules.items()):
        if (
            name.startswith("mlx_lm.models.")
            and getattr(module, "scaled_dot_product_attention", None) is _original
        ):
            module.scaled_dot_product_attention = attention
