"""A prompt cache handed on without copying its KV: `shared_copy`.

A prompt cache is a list of mlx-lm cache objects, one per layer. A row that starts from a kept
entry, and a snapshot the batch keeps while its row goes on, each need a cache of their own that
the other side's writes never reach. `copy.deepcopy` (what mlx-lm's `LRUPromptCache` uses) copies
every byte of KV at once. `shared_copy` copies nothing: it builds new cache objects over new
array handles of the same memory. MLX arrays are values: a write into one (`keys[..., i, :] = k`)
rebinds that handle alone, and MLX copies the buffer first when another array still reads it. So
the copy is paid only where a write needs it, at most once per buffer, and usually never: a row
that starts from an entry grows past the entry's end, which allocates a new buffer anyway.
"""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx

__all__ = ["shared_copy"]


def shared_copy(cache: list[Any]) -> list[Any]:
    """Each layer's cache anew over the same memory; writes to the copy never reach `cache`."""
    return [_layer(layer) for layer in cache]


def _layer(layer: Any) -> Any:
    new = copy.copy(layer)
    for name, value in vars(layer).items():
        setattr(new, name, _value(value))
    return new


def _value(value: Any) -> Any:
    if isinstance(value, mx.array):
        return value[...]  # a new handle: a write to either rebinds that handle only
    if isinstance(value, tuple):
        return tuple(_value(v) for v in value)
    if isinstance(value, list):
        return [_value(v) for v in value]
    if hasattr(value, "is_trimmable") and hasattr(value, "state"):  # a CacheList's members
        return _layer(value)
    return value
