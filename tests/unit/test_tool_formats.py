"""Every family's forced-call grammar, read back by the family's own mlx-lm parser, on 50 random
walks each (tool_format_helpers.py), and its calls streamed as deltas that assemble to the whole.

A family's own quirks (its markers, its value forms, what it refuses) are in test_tool_format_<family>.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxhost.worker.engine.tool_formats import available, tool_format
from tests.unit.tool_format_helpers import TOOLS, GrammarSampler, assert_streams, bodies_of, read_calls

pytestmark = pytest.mark.unit

SEEDS = range(50)


@pytest.fixture(scope="module")
def sampler(tiny_model: Path) -> GrammarSampler:
    return GrammarSampler(tiny_model / "tokenizer.json")


@pytest.mark.parametrize("parser", available())
def test_a_named_tool_is_exactly_one_valid_call(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    assert fmt is not None
    for tool in TOOLS:
        grammar = sampler.grammar(fmt, [tool], parallel=False)
        for seed in SEEDS:
            text = sampler.sample(grammar, seed)
            calls = read_calls(fmt, text, [tool])
            assert [c["name"] for c in calls] == [tool.name], text


@pytest.mark.parametrize("parser", available())
def test_required_is_one_or_more_valid_calls(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    assert fmt is not None
    grammar = sampler.grammar(fmt, TOOLS, parallel=True)
    names = set()
    for seed in SEEDS:
        calls = read_calls(fmt, sampler.sample(grammar, seed), TOOLS)
        assert calls
        names |= {c["name"] for c in calls}
    assert names == {t.name for t in TOOLS}  # every tool is reachable


@pytest.mark.parametrize("parser", available())
def test_streamed_calls_grow_to_exactly_the_whole_call(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    assert fmt is not None
    grammar = sampler.grammar(fmt, TOOLS, parallel=True)
    for seed in SEEDS:
        text = sampler.sample(grammar, seed)
        for body in bodies_of(fmt, text):
            assert_streams(fmt, body, TOOLS, seed)
