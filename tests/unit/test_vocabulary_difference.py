"""A draft model refused for its tokenizer says what differs: sizes, and tokens by name."""

from __future__ import annotations

import pytest

from mlxhost.worker.engine.loading import vocabulary_difference

pytestmark = pytest.mark.unit


def test_same_size_other_ids_names_the_tokens_and_their_ids() -> None:
    ours = {"a": 0, "b": 1, "<|end|>": 2}
    theirs = {"a": 0, "b": 2, "<|end|>": 1}
    said = vocabulary_difference(ours, theirs)
    assert "the model has 3 tokens, the draft 3" in said
    assert "2 under other ids ('<|end|>', 'b'; e.g. '<|end|>' is 2 in the model's, 1 in the draft's)" in said


def test_tokens_only_one_side_has_are_named_a_few_at_a_time() -> None:
    ours = {f"t{i}": i for i in range(10)}
    theirs = {**{f"t{i}": i for i in range(5)}, "<tool_call>": 5}
    said = vocabulary_difference(ours, theirs)
    assert "5 only in the model's ('t5', 't6', 't7' and 2 more)" in said
    assert "1 only in the draft's ('<tool_call>')" in said
