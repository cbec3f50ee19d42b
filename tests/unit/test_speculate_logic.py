"""The pure parts of speculative decoding (engine/speculate/): what prompt lookup drafts, how a
row's number of drafts and its chance follow what it keeps, and when a verification step pays."""

from __future__ import annotations

import pytest

from mlxhost.worker.engine.speculate.cost import FIXED_SLOPE, StepCost
from mlxhost.worker.engine.speculate.draft_length import FIRST_CHANCE, LONGEST_REST, DraftLength
from mlxhost.worker.engine.speculate.lookup import PromptLookup

pytestmark = pytest.mark.unit


def test_lookup_continues_the_longest_most_recent_match() -> None:
    # "1 2 3" was followed by 4 5 9; the end "1 2 3" continues as it did.
    assert PromptLookup([1, 2, 3, 4, 5, 9, 9, 1, 2, 3]).draft(3) == [4, 5, 9]
    # Two earlier "7 8": the most recent one's continuation, cut where the tokens end.
    assert PromptLookup([7, 8, 1, 7, 8, 2, 5, 7, 8]).draft(5) == [2, 5, 7, 8]
    # A longer match wins over a more recent shorter one.
    assert PromptLookup([4, 7, 8, 1, 0, 9, 8, 2, 6, 4, 7, 8]).draft(1) == [1]
    # A repeating phrase drafts itself on.
    assert PromptLookup([5, 6, 7, 8, 5, 6, 7, 8, 5, 6]).draft(4) == [7, 8, 5, 6]


def test_lookup_drafts_nothing_without_a_match_of_two_tokens() -> None:
    assert PromptLookup([1, 2, 3, 4, 5, 3]).draft(4) == []  # "3" alone is not enough
    assert PromptLookup([1, 2]).draft(4) == []
    assert PromptLookup([1, 2, 1, 2]).draft(0) == []


def test_lookup_takes_tokens_as_they_come() -> None:
    lookup = PromptLookup()
    tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    for token in tokens * 40:  # past its first buffer
        lookup.extend([token])
    assert lookup.size == 320
    lookup.catch_up(tokens * 40 + [3, 1])
    assert lookup.draft(6) == [4, 1, 5, 9, 2, 6]
    assert lookup.draft_after(4, 3) == [1, 5, 9]


def test_a_row_that_keeps_its_drafts_drafts_more_and_is_expected_to() -> None:
    length = DraftLength(6)
    assert length.wanted() == 6 and length.chance() == pytest.approx(FIRST_CHANCE)
    length.kept(6, 6)
    assert length.wanted() == 6 and length.chance() > FIRST_CHANCE
    length.kept(6, 2)
    assert length.wanted() == 3
    assert length.expected(3) == pytest.approx(sum(length.chance() ** j for j in (1, 2, 3)))
    assert length.expected(1) == pytest.approx(length.chance())


def test_a_row_whose_drafts_fail_rests_longer_each_time_then_is_hopeful_again() -> None:
    length = DraftLength(6)
    rests, chances = [], []
    for _ in range(8):
        length.kept(length.wanted(), 0)
        length.kept(length.wanted(), 0)
        rests.append(length.rest)
        chances.append(length.chance())
        while length.rest:
            assert length.wanted() == 0
            length.resting()
    assert rests == [4, 8, 16, 32, 64, 128, 256, LONGEST_REST]
    assert chances[0] < 0.5
    assert length.chance() == pytest.approx(FIRST_CHANCE)  # unverified a while: tried again
    length.kept(1, 1)  # and a kept draft ends the long rests
    length.kept(2, 0)
    length.kept(1, 0)
    assert length.rest == 4


def test_a_verification_step_is_taken_where_its_tokens_beat_its_price() -> None:
    cost = StepCost()
    cost.decoded(0.010, 1)
    cost.decoded(0.010, 8)
    # Cheap positions (one row): every draft is worth it.
    for _ in range(30):
        cost.verified(0.012, 7, 1)
    assert cost.slope_for(1) < 0.1
    assert cost.best_width(1, 6, [lambda k: 0.9 * k]) == 7
    assert cost.best_width(1, 6, []) == 1
    # Positions at their share (eight rows on a CPU), priced apart: only a batch that keeps most of
    # many drafts verifies, and a batch that keeps few decodes.
    for _ in range(60):
        cost.verified(0.070, 7, 8)
    assert cost.slope_for(8) == pytest.approx(1.0, abs=0.01)
    assert cost.slope_for(7) == cost.slope_for(8) and cost.slope_for(1) < 0.1
    assert cost.best_width(8, 6, [lambda k: 0.5 * k] * 8) == 1
    assert cost.best_width(8, 6, [lambda k: 0.95 * k] * 8) == 1  # nearly every draft kept: not enough
    # Unverified a long while, a batch size's price drifts back to hopeful: it is measured again.
    for _ in range(3000):
        cost.decoded(0.010, 8)
    assert cost.slope_for(8) < 0.2
    assert cost.best_width(8, 6, [lambda k: 0.9 * k] * 8) > 1


def test_a_group_prices_verification_alike_on_every_rank_and_always_verifies_every_draft() -> None:
    group = StepCost.pricing(priced=True, measured=False)
    always = StepCost.pricing(priced=False, measured=True)
    for cost in (group, always):
        cost.decoded(0.01, 8)
        cost.verified(1.0, 7, 8)
    assert group.slope_for(8) == FIXED_SLOPE
    assert always.slope_for(8) == 0
    assert always.best_width(8, 6, [lambda k: 0.01 * k]) == 7
