"""The thinking budget's logits processor, driven as BatchGenerator drives it: once the budget is
spent inside a think block, the end marker is all the model may write, token by token for a marker
of several tokens (Gemma's channel, Kimi's XTML), and then it is free again."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlxhost.worker.engine.generation import ThinkingBudget
from mlxhost.worker.engine.sampling import thinking_budget

pytestmark = pytest.mark.unit

VOCAB = 32
START, END = (20, 21), (22, 23, 24)


def run(budget: ThinkingBudget, prompt: list[int], steps: int, want: list[int]) -> list[int]:
    """Greedy generation where the model always wants `want[i % len(want)]` at step i."""
    processor = thinking_budget(budget, VOCAB)
    tokens = list(prompt)
    out = []
    for step in range(steps):
        logits = mx.full((1, VOCAB), -5.0)
        logits[0, want[step % len(want)]] = 5.0
        chosen = int(mx.argmax(processor(mx.array(tokens), logits), axis=-1).item())
        tokens.append(chosen)
        out.append(chosen)
    return out


def test_a_spent_budget_writes_the_whole_end_marker_then_lets_go() -> None:
    out = run(ThinkingBudget(3, START, END, open=True), [1, 2, *START], 9, want=[5])
    assert out == [5, 5, 5, 22, 23, 24, 5, 5, 5]


def test_a_single_token_marker_is_one_forced_token() -> None:
    out = run(ThinkingBudget(2, (20,), (22,), open=True), [1, 20], 5, want=[5])
    assert out == [5, 5, 22, 5, 5]


def test_a_block_the_model_opens_itself_is_counted_from_its_start() -> None:
    # Closed at first; the model writes the start marker (two tokens), thinks, and is cut.
    want = [7, 20, 21, 8, 8, 8, 8, 8, 8, 8]
    out = run(ThinkingBudget(2, START, END, open=False), [1, 2], 10, want=want)
    assert out[:5] == [7, 20, 21, 8, 8] and out[5:8] == [22, 23, 24]


def test_a_model_that_closes_in_time_is_left_alone() -> None:
    want = [5, 22, 23, 24, 9, 9]
    out = run(ThinkingBudget(10, START, END, open=True), [1, *START], 6, want=want)
    assert out == want
