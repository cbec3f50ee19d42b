"""The XML families beside Qwen3-Coder (minimax_m2, minicpm5, muse_spark): their forced-call grammars
on the demo tokenizer, their real output read whole and as it streams, the value forms each parser
reads back, and what they refuse."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from llguidance import LLMatcher

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import ToolFormat, ToolRefused, tool_format
from mlxhost.worker.engine.tool_formats.xml_text import avoiding, ecma_regex
from tests.unit.tool_format_helpers import GrammarSampler, assert_streams, bodies_of, openai_tools, read_calls

pytestmark = pytest.mark.unit

PARSERS = ("minimax_m2", "minicpm5", "muse_spark")


def _object(properties: dict, required: list[str] | None = None) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
    }


def _string(longest: int) -> dict:
    return {"type": "string", "maxLength": longest}


# Every string bounded (a random walk must end): a value of several types, a nullable one, code,
# an enum of mixed values, a nested object and an array.
TOOLS = (
    ToolSpec(
        "mixed",
        _object(
            {
                "id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 99}, _string(4)]},
                "ratio": {"type": ["number", "null"], "minimum": -1, "maximum": 1},
                "flag": {"type": ["boolean", "string"], "maxLength": 3},
                "pick": {"enum": [1, 2.5, "x", None, True, [1]]},
            }
        ),
    ),
    ToolSpec(
        "edit",
        _object(
            {
                "code": _string(32),
                "note": {"type": ["string", "null"], "maxLength": 4},
                "spans": {"type": "array", "maxItems": 2, "items": _object({"at": {"type": "integer"}})},
            },
            ["code"],
        ),
    ),
)

# Each family's call of `name` with the arguments written as given (as its chat template lays
# them out), and the body its parser is handed.
CALLS: dict[str, Callable[[str, dict[str, str]], str]] = {
    "minimax_m2": lambda name, args: (
        f'<minimax:tool_call>\n<invoke name="{name}">\n'
        + "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in args.items())
        + "</invoke>\n</minimax:tool_call>"
    ),
    "minicpm5": lambda name, args: (
        f'<function name="{name}">'
        + "".join(f'<param name="{k}">{v}</param>' for k, v in args.items())
        + "</function>"
    ),
    "muse_spark": lambda name, args: (
        f'<atem:function_calls>\n<atem:invoke name="{name}">\n'
        + "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>\n' for k, v in args.items())
        + "</atem:invoke>\n</atem:function_calls>"
    ),
}


@pytest.fixture(scope="module")
def sampler(tiny_model: Path) -> GrammarSampler:
    return GrammarSampler(tiny_model / "tokenizer.json")


def _accepts(sampler: GrammarSampler, grammar: str, text: str) -> bool:
    matcher = LLMatcher(sampler.lltokenizer, grammar, log_level=0)
    for token in sampler.lltokenizer.tokenize_str(text, parse_special=True):
        if not matcher.consume_token(token):
            return False
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return bool(bits[sampler.eos])


def _format(parser: str) -> ToolFormat:
    fmt = tool_format(parser)
    assert fmt is not None
    return fmt


@pytest.mark.parametrize("parser", PARSERS)
def test_forced_calls_read_back_valid_in_every_value_form(sampler: GrammarSampler, parser: str) -> None:
    fmt = _format(parser)
    for tool in TOOLS:
        grammar = sampler.grammar(fmt, [tool], parallel=False)
        for seed in range(15):
            text = sampler.sample(grammar, seed, max_tokens=1500)
            [call] = read_calls(fmt, text, [tool])
            assert call["name"] == tool.name
            for body in bodies_of(fmt, text):
                assert_streams(fmt, body, [tool], seed)


# (schema, value texts allowed, value texts refused), per family: what the parser reads back.
VALUES = {
    "minimax_m2": [
        # int() is tried before the string: a text never looks like a number, a number is JSON.
        (
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            ["12", "abc", "true"],
            [" abc", "1_0", "+1", "12a"],
        ),
        ({"type": ["boolean", "string"]}, ["true", "false", "maybe"], ["True", "yes", "0"]),
        ({"type": ["string", "null"]}, ["null", "x"], ["None", "nil", "NULL"]),
        ({"anyOf": [{"type": "array"}, {"type": "string"}]}, ["[1]", "abc"], ["(1,)", "'a'", "None", "true"]),
        ({"type": "string"}, ["a <b> & c", "a\nb"], ["x</parameter>", "x</invoke>", " a"]),
    ],
    "minicpm5": [
        (
            {"type": "string"},
            ["plain", "<![CDATA[a < b\n& c]]>", "<![CDATA[ spaced ]]>"],
            ["a < b", "a\nb", "<![CDATA[x]]>]]>"],
        ),
        (
            {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            ["12", "<![CDATA[x<y]]>"],
            ["<![CDATA[ 12 ]]>"],
        ),
        ({"type": "string"}, ["x"], ["<![CDATA[a</param>]]>", "<![CDATA[null]]>"]),
    ],
    "muse_spark": [
        # Whatever parses as JSON is JSON: a string that would is written as a JSON string.
        ({"type": "string"}, ["abc", '"5"', '"true"', '" spaced "'], ["5", "true", "null", "[1]", " a"]),
        ({"type": ["string", "boolean", "null"]}, ["true", "null", "True", "x"], ["5"]),
        ({"type": "string", "format": "date"}, ['"2024-01-31"'], ["2024-01-31", '"soon"']),
        ({"anyOf": [{"type": "array"}, {"type": "integer"}]}, ["[1]", "3"], ["abc"]),
    ],
}


@pytest.mark.parametrize(
    ("parser", "schema", "allowed", "refused"), [(p, *c) for p, cs in VALUES.items() for c in cs]
)
def test_each_value_form_is_what_the_parser_reads_back(
    sampler: GrammarSampler, parser: str, schema: dict, allowed: list[str], refused: list[str]
) -> None:
    fmt = _format(parser)
    tool = ToolSpec("f", _object({"v": schema}))
    grammar = sampler.grammar(fmt, [tool], parallel=False)
    for value in allowed:
        text = CALLS[parser]("f", {"v": value})
        assert _accepts(sampler, grammar, text), value
        read_calls(fmt, text, [tool])
    for value in refused:
        assert not _accepts(sampler, grammar, CALLS[parser]("f", {"v": value})), value


# Real outputs (as each template writes them): code with "<", quotes and a line break; a
# closing tag's start in a value; two calls where the family's section holds several.
CODE = 'if a < b:\n    print("</par")'
REAL = {
    "minimax_m2": (
        '\n<invoke name="edit">\n<parameter name="code">' + CODE + "</parameter>\n"
        '<parameter name="spans">[{"at": 3}]</parameter>\n</invoke>\n'
        '<invoke name="mixed">\n<parameter name="id">7</parameter>\n'
        '<parameter name="ratio">null</parameter>\n'
        '<parameter name="flag">true</parameter>\n<parameter name="pick">2.5</parameter>\n</invoke>\n'
    ),
    "minicpm5": (
        '"edit"><param name="code"><![CDATA[' + CODE + ']]></param><param name="spans">[{"at": 3}]</param>'
    ),
    "muse_spark": (
        '\n<atem:invoke name="edit">\n<atem:parameter name="code">' + CODE + "</atem:parameter>\n"
        '<atem:parameter name="spans">[{"at": 3}]</atem:parameter>\n</atem:invoke>\n'
        '<atem:invoke name="mixed">\n<atem:parameter name="id">"7"</atem:parameter>\n'
        '<atem:parameter name="ratio">-0.5</atem:parameter>\n'
        '<atem:parameter name="flag">true</atem:parameter>\n'
        '<atem:parameter name="pick">[1]</atem:parameter>\n</atem:invoke>\n'
    ),
}


CLOSES = {"minimax_m2": "</parameter>", "minicpm5": "</param>", "muse_spark": "</atem:parameter>"}


@pytest.mark.parametrize("parser", PARSERS)
def test_real_output_reads_whole_and_streams_call_by_call(parser: str) -> None:
    fmt = _format(parser)
    tools = openai_tools(TOOLS)
    calls = fmt.parse(REAL[parser], tools)
    assert calls[0] == {"name": "edit", "arguments": {"code": CODE, "spans": [{"at": 3}]}}
    assert len(calls) == (1 if parser == "minicpm5" else 2)
    whole = [json.dumps(c["arguments"], ensure_ascii=False) for c in calls]
    seen = [""] * len(calls)
    for cut in range(len(REAL[parser]) + 1):
        partial = fmt.partial(REAL[parser][:cut], tools)
        for i, call in enumerate(partial):
            assert call.name == calls[i]["name"]
            assert whole[i].startswith(call.arguments) and call.arguments.startswith(seen[i])
            seen[i] = call.arguments
        if REAL[parser].index("</par") < cut < REAL[parser].index(CLOSES[parser]) + len(CLOSES[parser]):
            assert [c.arguments for c in partial] == ["{"]  # the code's value not closed yet
    closed = parser != "minicpm5"  # MiniCPM5's end marker is never in the body
    assert seen == (whole if closed else [w[:-1] for w in whole])
    assert_streams(fmt, REAL[parser], TOOLS, seed=0)


@pytest.mark.parametrize("parser", PARSERS)
def test_partial_never_raises_on_what_is_not_a_call_yet(parser: str) -> None:
    fmt = _format(parser)
    for body in ("", "\n<inv", '"ed', '\n<invoke name="ed', '\n<atem:invoke name="e'):
        assert fmt.partial(body, openai_tools(TOOLS)) == []


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ('say "hi"', None),
        ("f", _object({"v": {"type": "string", "pattern": "(?=a)"}})),
        ("f", {"anyOf": [_object({"v": {"type": "string"}})]}),
        (
            "f",
            _object({"v": {"type": "object", "properties": {"</parameter></param></atem:parameter>": {}}}}),
        ),
        ("f", _object({"v": {"type": "object", "not": {"required": ["a"]}}})),
    ],
)
def test_what_the_syntax_cannot_carry_refuses_the_tool(
    parser: str, name: str, parameters: dict | None
) -> None:
    tools = [ToolSpec("ok", None), ToolSpec(name, parameters)]
    with pytest.raises(ToolRefused) as refused:
        _format(parser).grammar(tools, True, json.dumps, "tools")
    assert refused.value.tool == 1 and f"tool '{name}'" in refused.value.message


@pytest.mark.parametrize("parser", ["minimax_m2", "minicpm5"])
def test_a_reference_its_parser_reads_as_a_string_is_refused_unless_a_string(parser: str) -> None:
    # minimax_m2 does not follow $ref: a parameter that is only one reads as a string.
    defs = {"$defs": {"Point": _object({"x": {"type": "integer"}}), "Color": {"enum": ["red", "blue"]}}}
    point = ToolSpec("f", {**_object({"p": {"$ref": "#/$defs/Point"}}), **defs})
    with pytest.raises(ToolRefused, match="reads a value as string"):
        _format(parser).grammar([point], False, json.dumps, "tools")
    color = ToolSpec("f", {**_object({"c": {"$ref": "#/$defs/Color"}}), **defs})
    assert "red" in _format(parser).grammar([color], False, json.dumps, "tools")


def test_a_section_holds_several_calls_when_parallel(sampler: GrammarSampler) -> None:
    for parser in ("minimax_m2", "muse_spark"):
        fmt = _format(parser)
        body = REAL[parser]
        text = fmt.call_start + body + fmt.call_end
        assert _accepts(sampler, sampler.grammar(fmt, TOOLS, parallel=True), text)
        assert not _accepts(sampler, sampler.grammar(fmt, TOOLS, parallel=False), text)


def test_the_avoiding_regex_is_exactly_the_texts_without_the_words() -> None:
    import re

    words = ["</param>", "</parameter>", "</tool_call>"]
    pattern = re.compile(f"(?:{avoiding(words)})\\Z")
    pieces = ["<", "/", "</", "</param", ">", "eter>", "x", "</tool_call", "\n", "<<"]
    texts = {"".join(p) for p in np.random.default_rng(0).choice(pieces, size=(3000, 4))}
    for text in texts:
        assert (pattern.match(text) is not None) == (not any(w in text for w in words)), text
    assert ecma_regex(r"^\d+\w.$") == "^[0-9]+[0-9A-Za-z_][^\\n\\r\\x{2028}\\x{2029}]$"
