"""A decoder model's pooled passes (engine/pooled.py) on the real tiny model: a long input, run in
chunks over a KV cache, gets the vector and score it gets in one piece."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from mlxhost.worker.engine.pooled import DecoderPooler

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model(tiny_model: Path) -> object:
    loaded, _ = load(str(tiny_model))
    return loaded


@pytest.mark.parametrize("pooling", ["last", "mean", "cls"])
def test_a_long_input_in_chunks_embeds_as_in_one_piece(model: object, pooling: str) -> None:
    rows = [[(i * 13) % 400 + 5 for i in range(600)], [(i * 7) % 300 + 5 for i in range(257)]]
    whole = DecoderPooler(model, long_input=4096)
    chunked = DecoderPooler(model, long_input=128)
    expected, got = whole.embed(rows, pooling), chunked.embed(rows, pooling)
    mx.eval(expected, got)
    assert np.abs(np.array(expected) - np.array(got)).max() < 1e-4
    assert np.allclose(np.linalg.norm(np.array(got), axis=1), 1.0, atol=1e-5)


def test_a_long_input_in_chunks_scores_as_in_one_piece(model: object) -> None:
    rows = [[(i * 11) % 400 + 5 for i in range(300)]]
    expected = DecoderPooler(model, long_input=4096).score(rows, 5, 6)
    got = DecoderPooler(model, long_input=64).score(rows, 5, 6)
    mx.eval(expected, got)
    assert abs(float(expected[0]) - float(got[0])) < 1e-4
