"""One layer's KV for one decode step of the row batch: each row's own cache, side by side.

The model is called with one `RowsKV` per layer in place of mlx-lm's `BatchKVCache`. Everything
that is per token (embeddings, projections, MLP, norms) runs over all rows at once as usual; the
model hands each layer's new keys and values to `update_and_fetch`, which appends each row's to
that row's own cache (a plain mlx-lm `KVCache`, `RotatingKVCache` or `QuantizedKVCache`, the same
object the prompt cache keeps), and attention (attention.py) then runs each row over its own
length. No row is padded to another's length, and a row joins or leaves without touching the KV
of any other.

`offset` is the rows' positions, one per row, which mlx-lm's rotary embeddings take as an array
(as they do from `BatchKVCache`). The mask: one query per row needs none, except where a row's
own cache says otherwise (a rotating cache whose window is narrower than its buffer), and then
each row gets its own (`RowMasks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, QuantizedKVCache

__all__ = ["GROWTH_EVERY", "RowMasks", "RowsKV", "row_views", "set_growth"]

# mlx-lm's KVCache grows its buffers `step` positions at a time (256), copying what they hold each
# time. A row sets its own step to about an eighth of its length, between these bounds, every
# GROWTH_EVERY tokens: a short row holds a few positions more than its tokens, not 256, and a long
# one copies its KV once per eighth of its length at most.
LEAST_STEP, MOST_STEP, GROWTH_EVERY = 16, 256, 16


@dataclass(frozen=True)
class RowMasks:
    """Each row's own attention mask for one step (None where a row needs none)."""

    masks: tuple[Any, ...]


class RowsKV:
    """The rows' caches of one layer, as the model sees one cache for a decode step."""

    def __init__(self, caches: Sequence[Any], offset: mx.array, shared: dict[Any, Any] | None = None) -> None:
        self.caches = caches  # one per row, in the batch's row order
        self.offset = offset
        # What every layer of the step can reuse (attention.py's masks), shared by its RowsKVs.
        self.shared: dict[Any, Any] = {} if shared is None else shared
        # Each row's keys and values after this step's update, for attention.py.
        self.fetched: list[tuple[Any, Any]] = []
        first = caches[0]
        if hasattr(first, "bits"):  # mlx-lm's attention dispatch reads these off the cache
            self.bits, self.group_size = first.bits, first.group_size

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        # One split for all rows rather than a slice per row: on a small model the step's cost
        # is mostly the number of operations.
        rows = len(self.caches)
        pairs = zip(mx.split(keys, rows, axis=0), mx.split(values, rows, axis=0), strict=True)
        self.fetched = [
            cache.update_and_fetch(k, v) for cache, (k, v) in zip(self.caches, pairs, strict=True)
        ]
        # The model passes these on to attention, which reads `fetched` instead: an architecture
        # that changes keys between the two would be caught by the support probe (support.py).
        return keys, values

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Any:
        masks = tuple(
            cache.make_mask(N, return_array=return_array, window_size=window_size) for cache in self.caches
        )
        if all(mask is None for mask in masks):
            return None
        return RowMasks(masks)

    # A pipelined model ties its send to the next rank to its last layer's cache
    # (`cache[-1].keys = mx.depends(cache[-1].keys, h)`), so that evaluating the cache sends: the
    # last row's keys carry the tie here.
    @property
    def keys(self) -> Any:
        return self.caches[-1].keys

    @keys.setter
    def keys(self, value: Any) -> None:
        self.caches[-1].keys = value

    def is_trimmable(self) -> bool:
        return False

    @property
    def state(self) -> list[Any]:
        return [cache.state for cache in self.caches]


def row_views(rows: Sequence[Sequence[Any]]) -> list[RowsKV]:
    """One `RowsKV` per layer over `rows` (each row's list of layer caches)."""
    offset = mx.array([row[0].offset for row in rows])
    shared: dict[Any, Any] = {}
    return [RowsKV(layer, offset, shared) for layer in zip(*rows, strict=True)]

def set_growth(cache: list[Any], length: int) -> None:
    """Let `cache`'s plain KV buffers grow by about an eighth of `length` positions at a time."""
    step = min(MOST_STEP, max(LEAST_STEP, length // 8 // LEAST_STEP * LEAST_STEP))
    for layer in cache:
        if type(layer) in (KVCache, QuantizedKVCache):  # a rotating window's size is its own
            layer.step = step
