"""Kimi K2's and K3's calls (mlx-lm's kimi_k2 and kimi_k3): their forced-call grammar on the demo
tokenizers (the family's, whose markers are special tokens, and the default one, where they are
text), their real output read whole and as it streams (with K2's own call ids), and what they
write or refuse for what their syntax cannot carry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from llguidance import LLMatcher

from mlxhost.demo import make_model
from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, ToolFormat, ToolRefused, tool_format
from tests.unit.tool_format_helpers import (
    TOOLS,
    GrammarSampler,
    assert_streams,
    bodies_of,
    openai_tools,
    read_calls,
)

pytestmark = pytest.mark.unit

K2 = tool_format("kimi_k2")
K3 = tool_format("kimi_k3")
SEEDS = range(20)

# Bounded for random walks: text holding "<", quotes and newlines; a name and a key that need XTML
# escapes; a nullable string; an enum of strings and numbers; a parameter with no type (K3 writes
# that call as its JSON element).
EDGES = ToolSpec(
    'say "hi" & go',
    {
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 16},
            'a "key"': {"type": ["string", "null"], "maxLength": 4},
            "pick": {"enum": ["red", 3, None]},
        },
        "required": ["text", "pick"],
    },
)
UNTYPED = ToolSpec("untyped", {"type": "object", "properties": {"v": {"maxLength": 3, "maxItems": 1}}})
FAMILY_TOOLS = (*TOOLS, EDGES, UNTYPED)


@pytest.fixture(scope="module")
def samplers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, GrammarSampler]:
    """A sampler on each family's demo tokenizer, and "text" on the default one."""
    root = tmp_path_factory.mktemp("kimi")
    out = {"text": GrammarSampler(tiny_model / "tokenizer.json")}
    for name in ("kimi_k2", "kimi_k3"):
        out[name] = GrammarSampler(make_model(root / name, "tiny", 0, name) / "tokenizer.json")
    return out


def _accepts(sampler: GrammarSampler, grammar: str, text: str, plain: str | None = None) -> bool:
    """Whether the grammar allows `text` whole, its markers read as the special tokens they are;
    given `plain`, it takes the place of the "{}" in `text`, spelled in ordinary tokens (character
    by character) as a model may write it."""
    before, after = text.split("{}") if plain is not None else (text, "")
    tokenize = sampler.lltokenizer.tokenize_str
    spelled = [token for char in plain or "" for token in tokenize(char)]
    tokens = [*tokenize(before, parse_special=True), *spelled, *tokenize(after, parse_special=True)]
    matcher = LLMatcher(sampler.lltokenizer, grammar, log_level=0)
    return all(matcher.consume_token(token) for token in tokens) and matcher.is_accepting()


def _prefixes(fmt: ToolFormat, body: str) -> list[PartialCall]:
    """`body` read at every prefix: what is known only grows, each call's arguments a prefix of the
    whole call's. Returns what the whole body streams as."""
    tools = openai_tools(FAMILY_TOOLS)
    final = [json.dumps(c["arguments"], ensure_ascii=False) for c in fmt.parse(body, tools)]
    seen: list[PartialCall] = []
    for cut in range(len(body) + 1):
        calls = fmt.partial(body[:cut], tools)
        assert len(seen) <= len(calls) <= len(final), body[:cut]
        for i, call in enumerate(calls):
            assert final[i].startswith(call.arguments), (body[:cut], call)
            if i < len(seen):
                assert call.arguments.startswith(seen[i].arguments) and call.name == seen[i].name, body[:cut]
        seen = calls
    return seen


@pytest.mark.parametrize("parser", ["kimi_k2", "kimi_k3"])
@pytest.mark.parametrize("tokens", ["family", "text"])
def test_forced_calls_read_back_valid_and_stream(
    samplers: dict[str, GrammarSampler], parser: str, tokens: str
) -> None:
    sampler = samplers[parser if tokens == "family" else "text"]
    fmt = tool_format(parser)
    assert fmt is not None
    for tool in FAMILY_TOOLS:
        grammar = sampler.grammar(fmt, [tool], parallel=False)
        for seed in SEEDS:
            text = sampler.sample(grammar, seed, max_tokens=3000)
            assert [c["name"] for c in read_calls(fmt, text, [tool])] == [tool.name], text
    grammar = sampler.grammar(fmt, FAMILY_TOOLS, parallel=True)
    names = set()
    for seed in SEEDS:
        text = sampler.sample(grammar, seed, max_tokens=3000)
        names |= {c["name"] for c in read_calls(fmt, text, FAMILY_TOOLS)}
        for body in bodies_of(fmt, text):
            streamed = assert_streams(fmt, body, FAMILY_TOOLS, seed)
            assert [c.name for c in streamed] == [
                c["name"] for c in fmt.parse(body, openai_tools(FAMILY_TOOLS))
            ]
    assert len(names) >= 4


# Kimi K3, as the template writes it (demo/families/kimi.py).
K3_CALLS = (
    '<|open|>call tool="get_weather" index="1"<|sep|>'
    '<|open|>argument key="city" type="string"<|sep|> New\nYork <b> <|close|>argument<|sep|>'
    '<|open|>argument key="days" type="integer"<|sep|>3<|close|>argument<|sep|>'
    "<|close|>call<|sep|>"
    '<|open|>call tool="say &quot;hi&quot; &amp; go" index="2"<|sep|>'
    '<|open|>json type="object"<|sep|>{"text": "日本 \\"<\\"", "pick": 3}<|close|>json<|sep|>'
    "<|close|>call<|sep|>"
)


def test_k3_output_reads_whole_and_streamed() -> None:
    assert K3.parse(K3_CALLS, None) == [
        {"name": "get_weather", "arguments": {"city": " New\nYork <b> ", "days": 3}},  # as written
        {"name": 'say "hi" & go', "arguments": {"text": '日本 "<"', "pick": 3}},
    ]
    streamed = _prefixes(K3, K3_CALLS)
    assert [c.name for c in streamed] == ["get_weather", 'say "hi" & go']
    assert streamed[0].arguments == '{"city": " New\\nYork <b> ", "days": 3}'  # closed: whole
    assert streamed[1].arguments == '{"text": "日本 \\"<\\"", "pick": 3}'
    # A call is known once its opening tag closed; an argument once its element closed.
    opening = (
        '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Os'
    )
    assert K3.partial(opening, None) == [PartialCall("get_weather", "{")]
    assert K3.partial(opening + "lo<|close|>argument<|sep|>", None) == [
        PartialCall("get_weather", '{"city": "Oslo"')
    ]
    assert K3.partial(opening[:30], None) == []


def test_k3_numbers_the_calls_of_a_section_from_one(samplers: dict[str, GrammarSampler]) -> None:
    sampler = samplers["kimi_k3"]
    ping = '<|open|>call tool="ping" index="{}"<|sep|><|close|>call<|sep|>'
    section = "<|open|>tools<|sep|>{}<|close|>tools<|sep|>"
    parallel = sampler.grammar(K3, [TOOLS[3]], parallel=True)
    assert _accepts(sampler, parallel, section.format(ping.format(1) + ping.format(2) + ping.format(3)))
    assert not _accepts(sampler, parallel, section.format(ping.format(1) + ping.format(3)))
    assert not _accepts(sampler, parallel, section.format(ping.format(2)))
    one = sampler.grammar(K3, [TOOLS[3]], parallel=False)
    assert _accepts(sampler, one, section.format(ping.format(1)))
    assert not _accepts(sampler, one, section.format(ping.format(1) + ping.format(2)))


def test_k3_values_hold_no_closing_tag_and_keep_their_spaces(samplers: dict[str, GrammarSampler]) -> None:
    sampler = samplers["kimi_k3"]
    grammar = sampler.grammar(K3, [EDGES], parallel=False)
    call = '<|open|>tools<|sep|><|open|>call tool="say &quot;hi&quot; &amp; go" index="1"<|sep|>'
    call += '<|open|>argument key="text" type="string"<|sep|>{}<|close|>argument<|sep|>'
    call += '<|open|>argument key="pick" type="{}"<|sep|>{}<|close|>argument<|sep|><|close|>call<|sep|>'
    call += "<|close|>tools<|sep|>"
    assert _accepts(sampler, grammar, call.format(" two\nlines ", "string", "red"))
    assert _accepts(sampler, grammar, call.format("x", "integer", "3"))
    assert _accepts(sampler, grammar, call.format("x", "null", "null"))
    assert not _accepts(sampler, grammar, call.format("x", "string", "3"))  # 3 is a number, not "3"
    for text in ("a<|close|>call<|sep|>", "a<|open|>json", "<|close|>"):
        assert not _accepts(sampler, grammar, call.format("{}", "string", "red"), plain=text), text


def test_k3_writes_a_call_its_arguments_cannot_carry_as_its_json_element(
    samplers: dict[str, GrammarSampler],
) -> None:
    sampler = samplers["kimi_k3"]
    grammar = sampler.grammar(K3, [UNTYPED], parallel=False)
    for seed in range(5):
        text = sampler.sample(grammar, seed)
        assert '<|sep|><|open|>json type="object"<|sep|>{' in text, text
        assert [c["name"] for c in read_calls(K3, text, [UNTYPED])] == ["untyped"]


def test_k3_refuses_a_name_its_parser_cannot_read_back() -> None:
    with pytest.raises(ToolRefused) as caught:
        K3.grammar([ToolSpec("ok", None), ToolSpec("a<|sep|>b", None)], True, json.dumps, "tools")
    assert caught.value.tool == 1 and "'a<|sep|>b'" in caught.value.message


# Kimi K2, as the template writes it: the id counts the conversation's calls.
K2_CALLS = (
    "<|tool_call_begin|>functions.get_weather:4<|tool_call_argument_begin|>"
    '{"city": "Köln <|x|>", "days": 2}<|tool_call_end|>'
    "<|tool_call_begin|>functions.ping:5<|tool_call_argument_begin|>{}<|tool_call_end|>"
)


def test_k2_output_reads_whole_and_streamed_with_the_models_ids() -> None:
    assert K2.parse(K2_CALLS, None) == [
        {
            "id": "functions.get_weather:4",
            "name": "get_weather",
            "arguments": {"city": "Köln <|x|>", "days": 2},
        },
        {"id": "functions.ping:5", "name": "ping", "arguments": {}},
    ]
    streamed = _prefixes(K2, K2_CALLS)
    assert streamed == [
        PartialCall("get_weather", '{"city": "Köln <|x|>", "days": 2}', "functions.get_weather:4"),
        PartialCall("ping", "{}", "functions.ping:5"),
    ]
    head = "<|tool_call_begin|>functions.get_weather:4<|tool_call_argument_begin|>"
    assert K2.partial(head[:-3], None) == []  # the name is known with the arguments token
    # A string argument streams as it is written.
    assert K2.partial(head + '{"city": "K', None) == [
        PartialCall("get_weather", '{"city": "K', "functions.get_weather:4")
    ]


def test_k2_arguments_hold_no_end_token(samplers: dict[str, GrammarSampler]) -> None:
    sampler = samplers["kimi_k2"]
    note = ToolSpec("note", {"type": "object", "properties": {"text": {"type": "string", "maxLength": 40}}})
    grammar = sampler.grammar(K2, [note], parallel=True)
    section = "<|tool_calls_section_begin|><|tool_call_begin|>functions.note:{}<|tool_call_argument_begin|>"
    section += '{{"text": "{}"}}<|tool_call_end|><|tool_calls_section_end|>'
    for text in ("Oslo", "<|tool_call", "<|tool_calls_section_begin|>"):
        assert _accepts(sampler, grammar, section.format(1234, "{}"), plain=text), text
    for text in ("<|tool_call_end|>", "x <|tool_calls_section_end|>"):
        assert not _accepts(sampler, grammar, section.format(7, "{}"), plain=text), text
    assert not _accepts(sampler, grammar, section.format(12345, "Oslo"))  # ids below 10,000


def test_k2_refuses_a_name_its_parser_cannot_read_back() -> None:
    with pytest.raises(ToolRefused) as caught:
        K2.grammar(
            [ToolSpec("ok", None), ToolSpec("x:1<|tool_call_argument_begin|>", None)], True, json.dumps, "t"
        )
    assert caught.value.tool == 1
