"""Which models the row batch serves (engine/rows/support.py): the probe passes the demo models,
and catches a model whose state is not KV or whose attention goes round the seam."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import pytest
from mlx_lm.models.cache import ArraysCache, KVCache

from mlxhost.demo import make_model
from mlxhost.worker.engine.rows.batch import row_cache
from mlxhost.worker.engine.rows.support import quantized_reason, unsupported_reason

pytestmark = pytest.mark.unit


class _OwnAttention(nn.Module):
    """One attention layer that calls MLX's attention itself, on what its cache returns."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 32)
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 128)
        self.rope = nn.RoPE(16)

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        h = self.embed(inputs)
        B, L, _ = h.shape
        q, k, v = (x.reshape(B, L, 2, 16).transpose(0, 2, 1, 3) for x in mx.split(self.qkv(h), 3, axis=-1))
        q, k = self.rope(q, offset=cache[0].offset), self.rope(k, offset=cache[0].offset)
        k, v = cache[0].update_and_fetch(k, v)
        mask = "causal" if L > 1 else None
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
        return self.out(o.transpose(0, 2, 1, 3).reshape(B, L, 32))

    def make_cache(self) -> list[Any]:
        return [KVCache()]


class _Recurrent(_OwnAttention):
    def make_cache(self) -> list[Any]:
        return [ArraysCache(2)]


def test_the_demo_models_pass(tiny_model: Path, sliding_model: Path, pipelined_model: Path) -> None:
    for path in (tiny_model, sliding_model, pipelined_model):
        assert unsupported_reason(mlx_lm.load(str(path))[0]) is None


def test_a_model_with_state_that_is_not_kv_is_refused_by_name() -> None:
    assert unsupported_reason(_Recurrent()) == "its layers keep ArraysCache state, not per-token KV"


def test_a_model_whose_attention_goes_round_the_seam_is_caught() -> None:
    model = _OwnAttention()
    mx.eval(model.parameters())
    reason = unsupported_reason(model)
    assert reason is not None and reason.startswith("per-row decoding differs from decoding alone")


def test_kv_bits_need_heads_mlx_can_quantize(tiny_model: Path, tmp_path: Path) -> None:
    tiny = mlx_lm.load(str(tiny_model))[0]  # heads of 16 dimensions: narrower than any group
    reason = quantized_reason(tiny, row_cache(tiny, 4, 64))
    assert reason is not None and reason.startswith("quantized KV failed")
    wide = mlx_lm.load(str(make_model(tmp_path / "q", size="quantizable")))[0]
    assert quantized_reason(wide, row_cache(wide, 4, 64)) is None
