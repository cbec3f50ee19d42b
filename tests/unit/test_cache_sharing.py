"""A prompt cache handed on without a copy (cache/sharing.py): the copy and the original share
memory, and a write to either never reaches the other."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache

from mlxhost.worker.cache.sharing import shared_copy

pytestmark = pytest.mark.unit


def _filled(layer: Any, tokens: int) -> Any:
    keys = mx.arange(tokens * 2 * 32, dtype=mx.float32).reshape(1, 2, tokens, 32)
    layer.update_and_fetch(keys, keys + 1)
    return layer


def _arrays(layer: Any) -> list[mx.array]:
    state = layer.state
    flat: list[mx.array] = []
    for value in state if isinstance(state, tuple) else (state,):
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, mx.array):
                flat.append(mx.array(item))
    mx.eval(flat)
    return flat


@pytest.mark.parametrize(
    "make",
    [KVCache, lambda: RotatingKVCache(max_size=8), lambda: QuantizedKVCache(group_size=32, bits=4)],
    ids=["kv", "rotating", "quantized"],
)
def test_writes_to_a_shared_copy_never_reach_the_original_nor_the_other_way(make: Any) -> None:
    original = _filled(make(), 5)
    before = _arrays(original)
    (copy,) = shared_copy([original])
    step = mx.full((1, 2, 1, 32), 7.0)
    copy.trim(1) if copy.is_trimmable() else None
    copy.update_and_fetch(step, step)
    copy.update_and_fetch(step, step)
    assert all(mx.array_equal(a, b).item() for a, b in zip(before, _arrays(original), strict=True))
    assert copy.offset == original.offset + 1  # stepped back one, then wrote two
    copied = _arrays(copy)
    original.update_and_fetch(step * 3, step * 3)
    assert all(mx.array_equal(a, b).item() for a, b in zip(copied, _arrays(copy), strict=True))
