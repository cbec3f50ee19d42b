"""How much prompt is prefilled between two decode steps (engine/rows/budget.py)."""

from __future__ import annotations

import pytest

from mlxhost.worker.engine.rows.budget import LEAST, PrefillBudget

pytestmark = pytest.mark.unit


def test_with_nothing_decoding_a_prompt_goes_in_whole_steps() -> None:
    assert PrefillBudget(prefill_step=2048).chunk(decoding=False) == 2048


def test_chunks_take_about_the_time_asked_growing_at_most_twofold() -> None:
    budget = PrefillBudget(prefill_step=2048, seconds=0.05, tokens=256)
    assert budget.chunk(decoding=True) == 256  # nothing measured yet
    budget.measured(256, 0.0128)  # 50 us a token at the prompt's start: 1,000 would fit
    assert budget.chunk(decoding=True) == 512  # but no more than twice the last chunk
    for _ in range(10):
        budget.measured(budget.chunk(decoding=True), budget.chunk(decoding=True) * 0.0001)
    assert budget.chunk(decoding=True) == 500  # 100 us a token further in: 0.05 s each
    budget.measured(100, 10.0)  # a very slow model: never below a few tokens a chunk
    assert budget.chunk(decoding=True) == LEAST


def test_a_group_cuts_every_prompt_alike_whatever_it_measures() -> None:
    budget = PrefillBudget(prefill_step=2048, tokens=128, adaptive=False)
    budget.measured(128, 5.0)
    assert budget.chunk(decoding=True) == 128 and budget.chunk(decoding=False) == 2048
