"""GLM-4.7, Laguna and LongCat calls (mlx-lm's glm47, laguna and longcat): their forced-call grammar
on the demo tokenizers (the family's, whose tags are special tokens, and the default one, where the
tags are text), their real output read whole and as it streams, the value forms their parsers read
back, and what they refuse."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from llguidance import LLMatcher

from mlxhost.demo import make_model
from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, ToolFormat, ToolRefused, tool_format
from mlxhost.worker.engine.tool_formats.xml_values import STRIPPED
from tests.unit.tool_format_helpers import (
    TOOLS,
    GrammarSampler,
    assert_streams,
    bodies_of,
    openai_tools,
    read_calls,
)

pytestmark = pytest.mark.unit

GLM = tool_format("glm47")
LONGCAT = tool_format("longcat")
SEEDS = range(20)

# Bounded for random walks: text holding "<", newlines and tabs, a pattern, an enum of strings some
# of which read as something else when bare, a nullable number, a $ref.
EDGES = ToolSpec(
    "edges",
    {
        "type": "object",
        "properties": {
            "code": {"type": "string", "maxLength": 16},
            "slug": {"type": "string", "minLength": 2, "maxLength": 6, "pattern": "^[a-z][a-z0-9-]*$"},
            "pick": {"enum": ["red", "3", "true", "null", 4]},
            "unit": {"type": "string", "enum": ["km", " mi", "3"]},
            "ratio": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "point": {"$ref": "#/$defs/Point"},
        },
        "required": ["code", "pick"],
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    },
)
FAMILY_TOOLS = (*TOOLS, EDGES)


@pytest.fixture(scope="module")
def samplers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, GrammarSampler]:
    """A sampler on each family's demo tokenizer, and "text" on the default one."""
    root = tmp_path_factory.mktemp("arg-keys")
    out = {"text": GrammarSampler(tiny_model / "tokenizer.json")}
    for name in ("glm47", "longcat"):
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


def _stream(fmt: ToolFormat, body: str, tools: tuple[ToolSpec, ...]) -> list[PartialCall]:
    """`body` read at every prefix: the name never changes once known, the arguments only grow and
    are always a prefix of the whole call's. Returns what the whole body streams as."""
    [final] = fmt.parse(body, openai_tools(tools))
    whole = json.dumps(final["arguments"], ensure_ascii=False)
    seen = PartialCall(None)
    for cut in range(len(body) + 1):
        calls = fmt.partial(body[:cut], openai_tools(tools))
        if not calls:
            assert seen.name is None, body[:cut]
            continue
        [call] = calls
        assert call.name in (None, final["name"]) and whole.startswith(call.arguments), (body[:cut], call)
        assert call.arguments.startswith(seen.arguments) and (seen.name is None or call.name), body[:cut]
        seen = call
    return [seen]


@pytest.mark.parametrize("parser", ["glm47", "longcat"])
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
    for seed in SEEDS:
        text = sampler.sample(grammar, seed, max_tokens=3000)
        assert read_calls(fmt, text, FAMILY_TOOLS)
        for body in bodies_of(fmt, text):
            assert_streams(fmt, body, FAMILY_TOOLS, seed)


def test_the_templates_layouts_read_whole_and_streamed() -> None:
    # GLM-4.7 writes a call on one line, GLM-4.5 and the demo template a tag pair a line.
    compact = (
        "get_weather<arg_key>city</arg_key><arg_value>Saint-Étienne <b></arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value>"
    )
    lines = 'tag_files\n<arg_key>paths</arg_key>\n<arg_value>["a.py", "b\\nc"]</arg_value>\n'
    lines += "<arg_key>force</arg_key>\n<arg_value>false</arg_value>\n"
    for body, tool, arguments in [
        (compact, TOOLS[0], {"city": "Saint-Étienne <b>", "days": 3}),
        (lines, TOOLS[2], {"paths": ["a.py", "b\nc"], "force": False}),
    ]:
        assert GLM.parse(body, openai_tools(TOOLS)) == [{"name": tool.name, "arguments": arguments}]
        [streamed] = _stream(GLM, body, TOOLS)
        assert streamed.name == tool.name
        assert streamed.arguments == json.dumps(arguments, ensure_ascii=False)[:-1]  # more may follow


def test_a_value_is_streamed_once_its_closing_tag_came_whole() -> None:
    body = "get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_val"
    assert GLM.partial(body, openai_tools(TOOLS)) == [PartialCall("get_weather", "{")]
    assert GLM.partial(body + "ue>", openai_tools(TOOLS)) == [PartialCall("get_weather", '{"city": "Oslo"')]
    assert GLM.partial("get_wea", openai_tools(TOOLS)) == []  # the name is whole at its first key


def test_longcat_writes_a_call_without_arguments_as_json() -> None:
    grammar = LONGCAT.grammar([TOOLS[3]], False, json.dumps, "tools")
    assert "%json" in grammar and '"const": "ping"' in grammar
    body = '{"name": "ping", "arguments": {}}'
    assert LONGCAT.parse(body, openai_tools(TOOLS)) == [{"name": "ping", "arguments": {}}]
    assert LONGCAT.partial('{"name": "ping", "arguments": {', None) == [PartialCall("ping", "{")]
    # Its tag form reads the arguments by the tool's declared types, as GLM's does.
    tags = "<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value> 42 </longcat_arg_value>"
    assert LONGCAT.parse(f"get_weather\n{tags}", openai_tools(TOOLS)) == [
        {"name": "get_weather", "arguments": {"city": "42"}}
    ]


def test_raw_text_cannot_begin_or_end_with_what_the_parser_strips(
    samplers: dict[str, GrammarSampler],
) -> None:
    sampler = samplers["glm47"]
    note = ToolSpec("note", {"type": "object", "properties": {"text": {"type": "string", "maxLength": 40}}})
    grammar = sampler.grammar(GLM, [note], parallel=False)
    call = "<tool_call>note<arg_key>text</arg_key><arg_value>{}</arg_value></tool_call>"
    for text in ("New York", "a\tb", "x</arg_valu", "</tool_call", "<arg_value>"):
        assert _accepts(sampler, grammar, call, plain=text), text
    for text in (" Oslo", "Oslo\n", "Oslo\u3000", "Oslo\x1f", "Oslo</tool_call>", "a</arg_value>b"):
        assert not _accepts(sampler, grammar, call, plain=text), text


def test_stripped_text_is_what_python_leaves_as_it_is(samplers: dict[str, GrammarSampler]) -> None:
    sampler = samplers["text"]
    # The closing ">" in the text's terminal, as the formats close a value (a lexeme is greedy).
    grammar = LLMatcher.grammar_from_lark(f'start: "<" TEXT\nTEXT: BODY ">"\nBODY: /{STRIPPED}/')
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    assert len(spaces) == 29
    for space in spaces:
        assert not _accepts(sampler, grammar, f"<{space}x>") and not _accepts(sampler, grammar, f"<x{space}>")
        assert _accepts(sampler, grammar, f"<x{space}x>")
    for other in "\x08\x0e\x1b!\x84\x86\u180e\u200b\u2060\ufeff":
        assert _accepts(sampler, grammar, f"<{other}>"), hex(ord(other))
    assert _accepts(sampler, grammar, "<>")


def test_enum_values_are_bare_where_the_parser_reads_them_back(samplers: dict[str, GrammarSampler]) -> None:
    sampler = samplers["glm47"]
    grammar = sampler.grammar(GLM, [EDGES], parallel=False)
    call = (
        "<tool_call>edges<arg_key>code</arg_key><arg_value>x</arg_value><arg_key>pick</arg_key><arg_value>{}"
    )
    call += "</arg_value></tool_call>"
    # "red" reads back bare; "3", "true" and "null" bare would read as 3, True and None.
    for written, ok in [("red", True), ('"red"', False), ('"3"', True), ("3", False), ('"true"', True)]:
        assert _accepts(sampler, grammar, call.format(written)) is ok, written
    assert _accepts(sampler, grammar, call.format("4")) and not _accepts(
        sampler, grammar, call.format("true")
    )
    read = GLM.parse(call.format('"null"')[len("<tool_call>") : -len("</tool_call>")], openai_tools([EDGES]))
    assert read == [{"name": "edges", "arguments": {"code": "x", "pick": "null"}}]


def _refusal(fmt: ToolFormat, parameters: dict[str, Any], name: str = "t") -> str:
    with pytest.raises(ToolRefused) as caught:
        fmt.grammar([ToolSpec("ok", None), ToolSpec(name, parameters)], True, json.dumps, "tools")
    assert caught.value.tool == 1 and f"'{name}'" in caught.value.message
    return caught.value.message


def test_what_glm_cannot_carry_is_refused_naming_the_tool() -> None:
    string = {"type": "object", "properties": {"s": {"type": "string", "format": "date"}}, "required": ["s"]}
    assert "format" in _refusal(GLM, string)
    assert "anyOf" in _refusal(GLM, {"anyOf": [{"type": "object"}]})
    padded = {"type": "object", "properties": {"s": {"type": "string", "enum": [" x "]}}, "required": ["s"]}
    assert "reads back" in _refusal(GLM, padded)
    assert "read back" in _refusal(GLM, {"type": "object"}, name="two words")  # read as "two" and raw
    assert "read back" in _refusal(GLM, {"type": "object"}, name="x</tool_call>")
    spaced = {"type": "object", "properties": {" k": {"type": "integer"}}, "required": [" k"]}
    assert "' k'" in _refusal(GLM, spaced)  # the parser strips a key
    boolean = {"type": "object", "properties": {"s": True}}
    assert "schema" in _refusal(GLM, boolean)  # the parser looks into every property's schema


def test_an_optional_parameter_that_cannot_be_written_is_left_out(
    samplers: dict[str, GrammarSampler],
) -> None:
    sampler = samplers["glm47"]
    padded = {"type": "string", "enum": [" x "]}
    properties = {"s": padded, " k": {"type": "integer"}, "n": {"type": "integer"}}
    tool = ToolSpec("t", {"type": "object", "properties": properties})
    grammar = sampler.grammar(GLM, [tool], parallel=False)
    assert _accepts(sampler, grammar, "<tool_call>t<arg_key>n</arg_key><arg_value>1</arg_value></tool_call>")
    assert _accepts(sampler, grammar, "<tool_call>t</tool_call>")
    assert not _accepts(
        sampler, grammar, "<tool_call>t<arg_key>s</arg_key><arg_value>x</arg_value></tool_call>"
    )


def test_longcat_writes_as_json_what_its_tags_cannot_carry(samplers: dict[str, GrammarSampler]) -> None:
    sampler = samplers["longcat"]
    choice = {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}]}
    for parameters in (choice, {"type": "object", "properties": {"s": {"type": "string", "format": "date"}}}):
        tool = ToolSpec("two words", parameters)
        grammar = sampler.grammar(LONGCAT, [tool], parallel=False)
        for seed in range(5):
            text = sampler.sample(grammar, seed)
            assert text.startswith('<longcat_tool_call>{"name": "two words", "arguments": {'), text
            assert [c["name"] for c in read_calls(LONGCAT, text, [tool])] == ["two words"]


def test_laguna_is_glms_syntax_under_its_own_parser(samplers: dict[str, GrammarSampler]) -> None:
    laguna = tool_format("laguna")
    assert laguna is not None and laguna.parser == "laguna"
    sampler = samplers["glm47"]
    assert laguna.grammar(TOOLS, True, sampler.tag, "tools") == GLM.grammar(TOOLS, True, sampler.tag, "tools")
    body = "add<arg_key>a</arg_key><arg_value>1.5</arg_value><arg_key>b</arg_key><arg_value>-2</arg_value>"
    assert laguna.parse(body, openai_tools(TOOLS)) == [{"name": "add", "arguments": {"a": 1.5, "b": -2}}]
