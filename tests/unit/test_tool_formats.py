"""Every family's forced-call grammar, read back by the family's own mlx-lm parser, on 50 random
walks each (tool_format_helpers.py), and its calls streamed as deltas that assemble to the whole.

A family's own quirks (its markers, its value forms, what it refuses) are in test_tool_format_<family>.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import ToolRefused, available, tool_format
from tests.unit.tool_format_helpers import TOOLS, GrammarSampler, assert_streams, bodies_of, read_calls

pytestmark = pytest.mark.unit

SEEDS = range(50)
# What a family's syntax cannot carry is refused (ToolRefused), never forced unsoundly: FunctionGemma
# holds flat values only, so the tool with an array and an object is refused there.
REFUSED = {"function_gemma": {"tag_files"}}


def carried(parser: str) -> tuple[ToolSpec, ...]:
    return tuple(t for t in TOOLS if t.name not in REFUSED.get(parser, set()))


@pytest.fixture(scope="module")
def samplers(family_model: Callable[[str], Path]) -> dict[str, GrammarSampler]:
    """Each family's own demo tokenizer, as its model would have it: its markers single tokens
    where the family's checkpoints have them so. (Each format's own tests also walk the default
    tokenizer, where the markers are spelled out.)"""
    return {name: GrammarSampler(family_model(name) / "tokenizer.json") for name in available()}


@pytest.fixture
def sampler(samplers: dict[str, GrammarSampler], parser: str) -> GrammarSampler:
    return samplers[parser]


@pytest.mark.parametrize("parser", available())
def test_a_named_tool_is_exactly_one_valid_call(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    assert fmt is not None
    tools = carried(parser)
    grammars = [sampler.grammar(fmt, [tool], parallel=False) for tool in tools]
    for seed in SEEDS:  # the tools in turn, fifty walks in all
        tool, grammar = tools[seed % len(tools)], grammars[seed % len(tools)]
        text = sampler.sample(grammar, seed, closing=fmt.call_end)
        calls = read_calls(fmt, text, [tool])
        assert [c["name"] for c in calls] == [tool.name], text


@pytest.mark.parametrize("parser", available())
def test_required_is_one_or_more_valid_calls(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    assert fmt is not None
    tools = carried(parser)
    grammar = sampler.grammar(fmt, tools, parallel=True)
    names = set()
    for seed in SEEDS:
        calls = read_calls(fmt, sampler.sample(grammar, seed, closing=fmt.call_end), tools)
        assert calls
        names |= {c["name"] for c in calls}
    assert names == {t.name for t in tools}  # every tool is reachable


@pytest.mark.parametrize("parser", available())
def test_streamed_calls_grow_to_exactly_the_whole_call(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    assert fmt is not None
    tools = carried(parser)
    grammar = sampler.grammar(fmt, tools, parallel=True)
    for seed in SEEDS:
        text = sampler.sample(grammar, seed, closing=fmt.call_end)
        for body in bodies_of(fmt, text):
            assert_streams(fmt, body, tools, seed)


@pytest.mark.parametrize("parser", sorted(REFUSED))
def test_what_a_syntax_cannot_carry_is_refused_naming_the_tool(sampler: GrammarSampler, parser: str) -> None:
    fmt = tool_format(parser)
    if fmt is None:
        pytest.skip(f"no {parser} format")
    for i, tool in enumerate(TOOLS):
        if tool.name in REFUSED[parser]:
            with pytest.raises(ToolRefused) as refused:
                sampler.grammar(fmt, TOOLS, parallel=True)
            assert refused.value.tool == i and tool.name in refused.value.message
