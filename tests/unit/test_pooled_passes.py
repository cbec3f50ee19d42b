"""Pooled passes beside generation (engine/pooled.py): results by index, and a pass cut short
while streams decode so that they do not wait behind a large batch of embeddings."""

from __future__ import annotations

import threading
import time

import mlx.core as mx
import pytest

from mlxhost.worker.engine.pooled import MAX_PASS_SECONDS, PooledPasses
from mlxhost.worker.engine.pooled_work import PooledQueue, PooledWork

pytestmark = pytest.mark.unit

RATE = 200_000  # padded tokens a second the fake model computes


class SlowPooler:
    """A model that takes time in proportion to the padded tokens of a pass, and embeds each
    input as [its length, its first id]."""

    def __init__(self) -> None:
        self.passes: list[int] = []

    def embed(self, rows: list[list[int]], pooling: str) -> mx.array:
        self.passes.append(len(rows))
        time.sleep(len(rows) * max(map(len, rows)) / RATE)
        return mx.array([[float(len(r)), float(r[0])] for r in rows])

    def score(self, rows: list[list[int]], yes: int, no: int) -> mx.array:
        return mx.array([0.5] * len(rows))


def passes(inputs: int, length: int = 100) -> tuple[PooledPasses, SlowPooler, PooledWork]:
    pooled = PooledPasses(
        PooledQueue(threading.Event()), token_budget=16_384, max_rows=256, beside_seconds=0.01
    )
    pooled.pooler = model = SlowPooler()
    work = PooledWork("embed", [[i + 1] * length for i in range(inputs)])
    pooled.queue.submit(work)
    return pooled, model, work


def test_results_land_by_index_and_the_work_finishes_once() -> None:
    pooled, _, work = passes(300)
    finished: list[PooledWork] = []
    work.on_finished = finished.append
    while pooled.step(False, mx.cpu):
        pass
    assert finished == [work] and work.done == 300
    assert [list(r) for r in work.results[:2]] == [[100.0, 1.0], [100.0, 2.0]]
    assert pooled.counters.inputs == 300 and pooled.counters.padded_tokens == 30_000


def test_while_streams_decode_a_pass_takes_about_the_prefill_chunks_time() -> None:
    pooled, model, _ = passes(600)
    pooled.step(False, mx.cpu)  # the first pass is small, and the rate is measured
    pooled.step(False, mx.cpu)  # alone: as many as the budget takes
    pooled.step(False, mx.cpu, decoding=True)
    first, alone, beside = model.passes
    assert first == 5  # FIRST_PASS_TOKENS (512) of 100-token rows
    assert alone == 163  # 16,384 padded tokens of 100-token rows (well within MAX_PASS_SECONDS)
    assert beside < alone / 4  # about 0.01 s of 200,000 tokens a second: 20 rows
    assert pooled.step(False, mx.cpu, decoding=False) and model.passes[-1] > beside


def test_no_pass_is_planned_longer_than_max_pass_seconds() -> None:
    """Whatever arrives while a pass runs waits for it: a pass planned with nothing else waiting
    is bounded all the same (a stream arriving just after 64 x 200 inputs waited 2 s)."""
    pooled, model, _ = passes(2000)
    pooled.token_budget = 10_000_000
    pooled.max_rows = 100_000
    for _ in range(3):
        pooled.step(False, mx.cpu)
    assert max(model.passes[1:]) * 100 <= RATE * MAX_PASS_SECONDS * 1.5  # padded tokens at the measured rate


def test_another_requests_wait_cuts_the_pass_as_a_stream_does() -> None:
    pooled, model, _ = passes(600)
    pooled.step(False, mx.cpu)
    pooled.step(False, mx.cpu)
    pooled.queue.submit(PooledWork("embed", [[7] * 100]))
    pooled.step(False, mx.cpu)  # two requests wait: contended
    assert model.passes[-1] < model.passes[1] / 4


def test_nothing_runs_while_paused_but_cancelled_work_is_still_dropped() -> None:
    pooled, model, work = passes(10)
    dropped: list[PooledWork] = []
    work.on_finished = dropped.append
    assert not pooled.step(True, mx.cpu) and model.passes == []
    work.cancel("client_disconnected")
    pooled.step(True, mx.cpu)
    assert dropped == [work] and pooled.counters.cancelled == 10
