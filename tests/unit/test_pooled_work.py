"""How pooled inputs become passes (engine/pooled_work.py): by length bucket, requests taking turns
to lead, within the token budget; a cancelled request's inputs never reach one."""

from __future__ import annotations

import threading

import pytest

from mlxhost.worker.engine.pooled_work import PooledQueue, PooledWork, bucket

pytestmark = pytest.mark.unit


def queue() -> PooledQueue:
    return PooledQueue(threading.Event())


def taken(rows: list) -> list[tuple[int, int]]:  # type: ignore[type-arg]
    return [(row.work.id, row.index) for row in rows]


def test_buckets_are_powers_of_two_from_sixteen() -> None:
    assert [bucket(n) for n in (1, 16, 17, 32, 33, 200, 512, 513)] == [16, 16, 32, 32, 64, 256, 512, 1024]


def test_a_pass_takes_the_leaders_input_and_others_of_its_bucket() -> None:
    pending = queue()
    first = PooledWork("embed", [[1] * 10, [1] * 300, [1] * 12])
    second = PooledWork("embed", [[2] * 300, [2] * 5])
    pending.submit(first)
    pending.submit(second)
    assert taken(pending.next_batch(10_000, 64)) == [(first.id, 0), (first.id, 2), (second.id, 1)]
    # The second request leads the next pass: its turn.
    assert taken(pending.next_batch(10_000, 64)) == [(second.id, 0), (first.id, 1)]
    assert pending.next_batch(10_000, 64) == [] and pending.waiting() == 0


def test_a_small_request_behind_a_huge_one_leads_the_next_pass() -> None:
    """The probe's case: 300k tokens in one request, then one token in another."""
    pending = queue()
    huge = PooledWork("embed", [[1] * 200] * 1500)
    small = PooledWork("embed", [[2]])
    pending.submit(huge)
    pending.submit(small)
    assert {row.work.id for row in pending.next_batch(4 * 256, 64)} == {huge.id}
    assert taken(pending.next_batch(4 * 256, 64)) == [(small.id, 0)]
    assert {row.work.id for row in pending.next_batch(4 * 256, 64)} == {huge.id}


def test_while_a_long_input_runs_only_short_ones_are_taken() -> None:
    pending = queue()
    longs = PooledWork("embed", [[1] * 3000, [1] * 3000])
    small = PooledWork("embed", [[2] * 8])
    pending.submit(longs)
    assert taken(pending.next_batch(10_000, 64, alone_over=2048)) == [(longs.id, 0)]
    assert pending.next_batch(10_000, 64, alone_over=2048, short_only=True) == []
    pending.submit(small)
    assert taken(pending.next_batch(10_000, 64, alone_over=2048, short_only=True)) == [(small.id, 0)]


def test_the_budget_counts_padded_tokens_and_rows() -> None:
    pending = queue()
    work = PooledWork("embed", [[1] * 100] * 10)
    pending.submit(work)
    assert len(pending.next_batch(400, 64)) == 4  # four rows of 100 tokens
    assert len(pending.next_batch(10_000, 3)) == 3
    assert len(pending.next_batch(1, 64)) == 1  # one input longer than the budget still runs


def test_inputs_pooled_differently_never_share_a_pass() -> None:
    pending = queue()
    embed = PooledWork("embed", [[1, 2]])
    mean = PooledWork("embed", [[1, 2]], pooling="mean")
    score = PooledWork("score", [[1, 2]], yes_no=(5, 6))
    for work in (embed, mean, score):
        pending.submit(work)
    assert [len(pending.next_batch(1000, 64)) for _ in range(3)] == [1, 1, 1]


def test_a_cancelled_request_is_dropped_with_its_inputs_not_yet_run() -> None:
    pending = queue()
    leaving = PooledWork("embed", [[1] * 20] * 6)
    staying = PooledWork("embed", [[2] * 20])
    pending.submit(leaving)
    pending.submit(staying)
    pending.next_batch(32 * 2, 64)  # two of its rows are in a pass
    leaving.cancel("client_disconnected")
    assert pending.dropped() == [leaving]
    assert taken(pending.next_batch(10_000, 64)) == [(staying.id, 0)]
    assert pending.waiting() == 0 and pending.open_works() == [staying]


def test_a_request_wakes_the_thread() -> None:
    wake = threading.Event()
    PooledQueue(wake).submit(PooledWork("embed", [[1]]))
    assert wake.is_set()


def test_an_input_past_alone_over_runs_alone_and_joins_no_batch() -> None:
    pending = queue()
    work = PooledWork("embed", [[1] * 300, [1] * 200, [1] * 250, [1] * 260])
    pending.submit(work)
    assert taken(pending.next_batch(10_000, 64, alone_over=256)) == [(work.id, 0)]
    assert taken(pending.next_batch(10_000, 64, alone_over=256)) == [(work.id, 1), (work.id, 2)]
    assert taken(pending.next_batch(10_000, 64, alone_over=256)) == [(work.id, 3)]
