"""Whether a model can decode over per-row KV: `unsupported_reason`, a probe run once at load.

Per-row KV works for any architecture whose layers keep plain KV (mlx-lm's `KVCache`,
`RotatingKVCache`, `QuantizedKVCache`) and hand what `update_and_fetch` returns straight to mlx-lm's
attention. Rather than keep a list of architectures, the probe checks the model itself: two
prompts of different lengths (the longer past any sliding window) are decoded one step both ways,
each row alone over its own cache and the two together as the row batch does, and the logits
must agree. A model with state that is not KV (a hybrid's recurrent layers), or one that computes
attention some other way, fails the probe, and the worker keeps mlx-lm's `BatchKVCache` for it.

In a worker group every rank runs the probe at the same point of its load, so the collectives
inside the model pair up, and every rank comes to the same answer (the logits are the same on all).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache, make_prompt_cache

from mlxhost.worker.cache.sharing import shared_copy
from mlxhost.worker.engine.rows.attention import install
from mlxhost.worker.engine.rows.kv import row_views

__all__ = ["quantized_reason", "unsupported_reason"]

PER_ROW = (KVCache, RotatingKVCache, QuantizedKVCache)
PROBE_LENGTHS = (5, 70)  # the longer is past the sliding demo model's window (16)
TOLERANCE = 1e-3  # of the logits' largest magnitude: the same sums, in another order at most


def unsupported_reason(model: Any) -> str | None:
    """None when `model` decodes over per-row KV exactly as alone; else why not, in words."""
    others = sorted(
        {type(layer).__name__ for layer in make_prompt_cache(model) if not isinstance(layer, PER_ROW)}
    )
    if others:
        return f"its layers keep {', '.join(others)} state, not per-token KV"
    install()
    try:
        return _compare(model)
    except Exception as exc:  # any architecture may fail in its own way; the fallback serves it
        return f"decoding over per-row KV failed: {type(exc).__name__}: {exc}"


def quantized_reason(model: Any, cache: list[Any]) -> str | None:
    """None when `model` runs over `cache` (a row's quantized cache); else why not, in words.

    MLX quantizes along a head's dimensions in groups of 32, 64 or 128: a head narrower than
    kv_group_size, or not a multiple of it, cannot be quantized."""
    try:
        mx.eval(model(mx.array([[1, 2]]), cache=cache))
    except Exception as exc:  # MLX says what it refused; the worker serves unquantized instead
        return f"quantized KV failed: {type(exc).__name__}: {exc}"
    return None


def _compare(model: Any) -> str | None:
    # Each forward is evaluated before the next is built, as generation does: a pipelined model
    # sends and receives inside its forward, and its ranks must pair them in the same order.
    rows = []
    for length in PROBE_LENGTHS:
        cache = make_prompt_cache(model)
        model(mx.array([[(7 * i + 3) % 97 + 1 for i in range(length)]]), cache=cache)
        mx.eval([layer.state for layer in cache])
        rows.append(cache)
    last = mx.array([11, 13])
    alone = []
    for e, cache in enumerate(rows):
        alone.append(model(last[e : e + 1, None], cache=shared_copy(cache))[:, -1, :])
        mx.eval(alone[-1])
    together = model(last[:, None], cache=row_views(rows))[:, -1, :]
    expected = mx.concatenate(alone)
    mx.eval(expected, together)
    if together.shape != expected.shape:
        return f"per-row decoding gave logits of shape {together.shape}, not {expected.shape}"
    scale = mx.abs(expected).max().item() or 1.0
    difference = mx.abs(together - expected).max().item()
    if not difference <= TOLERANCE * scale:
        return f"per-row decoding differs from decoding alone (largest difference {difference:.3g})"
    return None
