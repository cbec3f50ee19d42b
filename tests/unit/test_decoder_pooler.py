"""A decoder model's pooled passes (engine/pooled.py) on the real tiny model: a long input, run in
chunks over a KV cache (a chunk per step beside decoding streams), gets the vector and score it
gets in one piece."""

from __future__ import annotations

import threading
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from mlxhost.worker.engine.pooled import DecoderPooler, PooledPasses
from mlxhost.worker.engine.pooled_work import PooledQueue, PooledWork

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


def test_a_long_input_runs_a_chunk_a_step_beside_decoding_and_ends_as_in_one_piece(model: object) -> None:
    long, short = [(i * 13) % 400 + 5 for i in range(600)], [7, 8, 9]
    passes = PooledPasses(PooledQueue(threading.Event()), token_budget=16_384, max_rows=64)
    passes.pooler = DecoderPooler(model, long_input=128)
    work = PooledWork("embed", [long, short])
    passes.queue.submit(work)
    steps = 0
    while not work.finished:
        assert passes.step(False, mx.cpu, decoding=True)
        steps += 1
    assert steps >= 600 // 128 + 1  # its chunks, a step each, then the short input's pass
    expected = DecoderPooler(model, long_input=4096).embed([long, short], "last")
    mx.eval(expected)
    assert np.abs(np.stack(work.results) - np.array(expected)).max() < 1e-4
    assert passes.counters.inputs == 2 and passes.counters.tokens == 603


def test_a_cancelled_long_input_stops_between_its_chunks(model: object) -> None:
    passes = PooledPasses(PooledQueue(threading.Event()), token_budget=16_384, max_rows=64)
    passes.pooler = DecoderPooler(model, long_input=64)
    work = PooledWork("embed", [[5] * 640])
    passes.queue.submit(work)
    passes.step(False, mx.cpu)
    work.cancel("client_disconnected")
    passes.step(False, mx.cpu)
    assert work.finished and passes.counters.tokens == 64 and passes.counters.cancelled == 1
    assert not passes.step(False, mx.cpu)  # nothing left to run
