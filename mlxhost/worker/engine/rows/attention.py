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
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
from mlx_lm.models import base
from mlx_lm.models.cache import KVCache

from mlxhost.worker.engine.rows.kv import RowMasks, RowsKV

__all__ = ["attention", "install", "rows_attention"]

_original = base.scaled_dot_product_attention

# Positions: rows at most this long attend in one call, their KV put side by side for the step.
# Each call has a fixed cost (several MLX operations, each a kernel launch or a CPU task), which is
# most of a short row's attention: eight 64-token rows of the tiny model took 0.65 of the padded
# batch's decode speed one by one. A long row attends alone, where the call's cost is small beside
# its attention and a copy of its KV for the step would not be.
SHARED_LIMIT = 512


def rows_attention(queries: mx.array, rows: RowsKV, scale: float, mask: Any, sinks: Any = None) -> mx.array:
    """Each row's queries (rows on axis 0) over its own keys and values, as one array again."""
    count = len(rows.caches)
    masks = mask.masks if isinstance(mask, RowMasks) else (mask,) * count
    short: list[int] = []  # attend together
    alone: list[int] = []
    for i, (cache, own) in enumerate(zip(rows.caches, masks, strict=True)):
        # A verification step (rows/speculation.py) runs several positions a row, causal within it.
        plain = type(cache) is KVCache and own in (None, "causal") and sinks is None
        (short if plain and cache.offset <= SHARED_LIMIT else alone).append(i)
    if len(short) == count > 1:  # all short: no row to split off or put back
        return _together(queries, rows.caches, scale, rows.shared)
    queries_of = mx.split(queries, count, axis=0) if count > 1 else [queries]
    out: list[Any] = [None] * count
    if len(short) > 1:
        together = mx.concatenate([queries_of[i] for i in short])
        answers = _together(together, [rows.caches[i] for i in short], scale, rows.shared)
        for i, answer in zip(short, mx.split(answers, len(short)), strict=True):
            out[i] = answer
    else:
        alone += short
    for i in alone:
        keys, values = rows.fetched[i]
        out[i] = _original(
            queries_of[i], keys, values, cache=rows.caches[i], scale=scale, mask=masks[i], sinks=sinks
        )
    return out[0] if count == 1 else mx.concatenate(out, axis=0)


def _together(queries: mx.array, caches: Sequence[Any], scale: float, shared: dict[Any, Any]) -> mx.array:
    """Short rows in one call: their keys and values side by side for the step, each row's cut or
    padded to the longest row's length and masked to its own (what `BatchKVCache` computes, with
    no copy kept)."""
    lengths = tuple(cache.offset for cache in caches)
    longest = max(lengths)
    keys = mx.concatenate([_to(cache.keys, longest) for cache in caches])
    values = mx.concatenate([_to(cache.values, longest) for cache in caches])
    positions = queries.shape[2]  # each row's last `positions` keys are its queries' own
    mask = shared.get((lengths, positions))
    if mask is None and (min(lengths) < longest or positions > 1):  # the same for every layer: made once
        # Query q of a row sees its keys up to its own position: causal within the step's positions.
        last = mx.array(lengths)[:, None] - positions + mx.arange(positions)[None, :]
        mask = (mx.arange(longest)[None, None, :] <= last[:, :, None])[:, None, :, :]
        shared[(lengths, positions)] = mask
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)


def _to(buffer: mx.array, length: int) -> mx.array:
    """A row's KV buffer (positions on axis 2) as `length` positions: cut, or padded with zeros."""
    held = buffer.shape[2]
    if held >= length:
        return buffer[..., :length, :]
    return mx.pad(buffer, [(0, 0), (0, 0), (0, length - held), (0, 0)])


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
