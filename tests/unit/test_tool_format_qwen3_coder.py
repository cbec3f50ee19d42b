"""Qwen3-Coder's calls (mlx-lm's qwen3_coder): its forced-call grammar on the demo tokenizer, its real
output read whole and as it streams, the value forms its parser reads back, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llguidance import LLMatcher

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import ToolRefused, tool_format
from tests.unit.tool_format_helpers import GrammarSampler, assert_streams, openai_tools, read_calls

pytestmark = pytest.mark.unit

FMT = tool_format("qwen3_coder")


def _object(properties: dict, required: list[str] | None = None, **extra: object) -> dict:
    required = list(properties) if required is None else required
    return {"type": "object", "properties": properties, "required": required, **extra}


# Every string bounded (a random walk must end): code with "<" and newlines, a pattern, the forms of
# a nullable value, a parameter with no type, a $ref to an enum and to an object, a free map.
TOOLS = (
    ToolSpec(
        "write_file",
        _object(
            {
                "path": {"type": "string", "minLength": 1, "maxLength": 10, "pattern": "^[a-z/]+\\.py$"},
                "content": {"type": "string", "maxLength": 24},
                "mode": {"type": "integer", "minimum": 0, "maximum": 511},
            },
            ["path", "content"],
        ),
    ),
    ToolSpec(
        "nullable",
        _object(
            {
                "text": {"type": ["string", "null"], "maxLength": 6},
                "count": {"type": ["integer", "null"], "minimum": 0},
                "flag": {"type": ["boolean", "null"]},
                "maybe": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
            }
        ),
    ),
    ToolSpec(
        "refs",
        _object(
            {
                "color": {"$ref": "#/$defs/Color"},
                "point": {"$ref": "#/$defs/Point"},
                "free": {"maxLength": 4, "maxItems": 2, "maxProperties": 0},
                "labels": {"type": "object", "maxProperties": 0},
            },
            **{
                "$defs": {
                    "Color": {"enum": ["red", "null", 5, "[1]"]},
                    "Point": _object({"x": {"type": "integer", "minimum": -9, "maximum": 9}}),
                }
            },
        ),
    ),
)


@pytest.fixture(scope="module")
def sampler(tiny_model: Path) -> GrammarSampler:
    return GrammarSampler(tiny_model / "tokenizer.json")


def _accepts(sampler: GrammarSampler, grammar: str, text: str) -> bool:
    """Whether the grammar allows `text` whole (its tags read as the special tokens they are)."""
    matcher = LLMatcher(sampler.lltokenizer, grammar, log_level=0)
    for token in sampler.lltokenizer.tokenize_str(text, parse_special=True):
        if not matcher.consume_token(token):
            return False
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return bool(bits[sampler.eos])


def _call(name: str, **arguments: str) -> str:
    """A call as Qwen3-Coder's chat template writes it, each value as given."""
    parameters = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{parameters}</function>\n</tool_call>"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_forced_calls_read_back_valid_in_every_value_form(sampler: GrammarSampler, tool: ToolSpec) -> None:
    grammar = sampler.grammar(FMT, [tool], parallel=False)
    for seed in range(25):
        text = sampler.sample(grammar, seed, max_tokens=1500)
        [call] = read_calls(FMT, text, [tool])
        body = text.removeprefix("<tool_call>").removesuffix("</tool_call>")
        assert_streams(FMT, body, [tool], seed)
        assert call["name"] == tool.name


def test_values_as_the_template_writes_them_are_allowed(sampler: GrammarSampler) -> None:
    grammar = sampler.grammar(FMT, TOOLS, parallel=True)
    code = 'if a<b:\n  x="</p>"'
    first = _call("write_file", path="src/a.py", content=code, mode="420")
    second = _call("nullable", text="null", count="7", flag="True", maybe="hi")
    third = _call("refs", color="red", point='{"x": -3}', free="[1, 2]", labels="{}")
    assert _accepts(sampler, grammar, f"{first}\n{second}\n{third}")
    calls = read_calls(FMT, f"{first}\n{second}\n{third}", TOOLS)
    assert [c["arguments"] for c in calls] == [
        {"path": "src/a.py", "content": code, "mode": 420},
        {"text": None, "count": 7, "flag": True, "maybe": "hi"},
        {"color": "red", "point": {"x": -3}, "free": [1, 2], "labels": {}},
    ]


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"path": "a.py", "content": "x</parameter>y"}, "the closing tag inside a value"),
        ({"path": "a.py", "content": "x</tool_call>"}, "the call's end marker inside a value"),
        ({"path": "a.py", "content": "NuLL"}, "a string the parser reads as None"),
        ({"path": "a.js", "content": ""}, "a string off its pattern"),
        ({"path": "a.py", "content": "x", "mode": "512"}, "an integer over its maximum"),
        ({"path": "a.py", "content": "x", "mode": "1.5"}, "a number for an integer"),
        ({"content": "x"}, "a required parameter left out"),
        ({"content": "x", "path": "a.py"}, "parameters out of schema order"),
    ],
)
def test_what_would_not_read_back_valid_is_not_allowed(
    sampler: GrammarSampler, arguments: dict[str, str], why: str
) -> None:
    grammar = sampler.grammar(FMT, TOOLS[:1], parallel=False)
    assert _accepts(sampler, grammar, _call("write_file", path="a.py", content="x"))
    assert not _accepts(sampler, grammar, _call("write_file", **arguments)), why


@pytest.mark.parametrize(
    ("schema", "allowed", "refused"),
    [
        # A list of types reads through ast.literal_eval: Python's True, a word not a literal.
        ({"type": ["string", "boolean"]}, ["True", "False", "true words"], ["b'x'", "None", "3", "False x"]),
        # No type: read as JSON only when that is an object or an array.
        ({"anyOf": [{"type": "string"}, {"type": "array"}]}, ["3", "true", "[3]", "a [b]"], ["[x", " {"]),
        # A pattern as JSON schema reads it (ECMA's \d is ASCII), not as Rust's regexes would.
        ({"type": "string", "pattern": "^\\d+$", "maxLength": 3}, ["42"], ["\u0664\u0662", "4x", ""]),
        # An enum: only the values that read back as themselves ("[1]" reads as a list, 7 as "7").
        ({"enum": ["null", "[1]", 7, "ok"]}, ["ok"], ["null", "7", "[1]", '"[1]"']),
    ],
)
def test_each_value_form_is_what_the_parser_reads_back(
    sampler: GrammarSampler, schema: dict, allowed: list[str], refused: list[str]
) -> None:
    tool = ToolSpec("f", _object({"v": schema}))
    grammar = sampler.grammar(FMT, [tool], parallel=False)
    for value in allowed:
        assert _accepts(sampler, grammar, _call("f", v=value)), value
        read_calls(FMT, _call("f", v=value), [tool])
    for value in refused:
        assert not _accepts(sampler, grammar, _call("f", v=value)), value


def test_a_value_may_hold_a_closing_tag_that_is_not_quite_one(sampler: GrammarSampler) -> None:
    tool = ToolSpec("f", _object({"v": {"type": "string"}, "w": {"type": "array"}}))
    grammar = sampler.grammar(FMT, [tool], parallel=False)
    value = "a\n</parameter\n<parameter=w>\n</function>\n"
    text = _call("f", v=value, w='["</param", {"k": "</tool_cal"}]')
    assert _accepts(sampler, grammar, text)
    assert read_calls(FMT, text, [tool])[0]["arguments"]["v"] == value
    assert not _accepts(sampler, grammar, _call("f", v="a", w='["</parameter>"]'))
    assert not _accepts(sampler, grammar, _call("f", v="a", w='[{"</tool_call>": 1}]'))


REAL = (
    "\n<function=write_file>\n<parameter=path>\nsrc/app.py\n</parameter>\n"
    '<parameter=content>\nimport os\n\nif x < 3 and y > 2:\n    print("héllo 👋 </param")\n\n</parameter>\n'
    "<parameter=mode>\n420\n</parameter>\n</function>\n"
)


def test_real_output_reads_whole_and_streams_strings_as_they_are_written() -> None:
    """A string parameter (a file's content) streams character by character; a typed one (an
    integer) once it closed; what the parser may still strip or read as null is held back."""
    tools = openai_tools(TOOLS[:1])
    content = 'import os\n\nif x < 3 and y > 2:\n    print("héllo 👋 </param")\n'
    arguments = {"path": "src/app.py", "content": content, "mode": 420}
    assert FMT.parse(REAL, tools) == [{"name": "write_file", "arguments": arguments}]
    whole = json.dumps(arguments, ensure_ascii=False)
    seen = ""
    grew = 0
    for cut in range(len(REAL) + 1):
        calls = FMT.partial(REAL[:cut], tools)
        if cut <= REAL.index(">"):
            assert calls == []
            continue
        [call] = calls
        assert call.name == "write_file"
        assert whole.startswith(call.arguments) and call.arguments.startswith(seen)
        grew += call.arguments != seen
        seen = call.arguments
        if cut == REAL.index("src/app.py") + len("src/"):
            assert call.arguments == '{"path": "src/'
        if cut == REAL.index("</parameter>"):  # the value's closing newline may be the parser's
            assert call.arguments == '{"path": "src/app.py'
        if cut == REAL.index("if x < 3"):
            assert call.arguments == '{"path": "src/app.py", "content": "import os\\n'
        if cut == REAL.index("420") + 2:  # an integer: known once its element closed
            assert call.arguments == json.dumps(arguments, ensure_ascii=False).split(', "mode"')[0]
    assert grew > 40  # the content came character by character
    assert seen == whole  # the function closed: the whole arguments, closing brace and all


def test_a_string_that_may_yet_read_null_is_held_back() -> None:
    tools = openai_tools(TOOLS[:1])
    for value, expected in (("nu", "{"), ("NULL", "{"), ("nuts", '{"path": "nuts'), ("\n", "{")):
        body = f"\n<function=write_file>\n<parameter=path>\n{value}"
        assert FMT.partial(body, tools)[0].arguments == expected, value


def test_partial_never_raises_on_what_is_not_a_call_yet() -> None:
    tools = openai_tools(TOOLS[:1])
    assert FMT.partial("", tools) == []
    assert FMT.partial("\n<function=wri", tools) == []
    bad = "\n<function=write_file>\n<parameter=mode>\nlots\n</parameter>\n"
    assert [(c.name, c.arguments) for c in FMT.partial(bad, tools)] == [("write_file", "{")]
    assert FMT.partial("\n<function=f>\n<parameter=x>\n1\n</parameter>\n", None)[0].arguments == '{"x": "1"'


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "string", "format": "uri"}, "format"),
        ({"type": "string", "pattern": "(?=a)b"}, "pattern"),
        ({"type": ["object", "null"]}, "list of types"),
        ({"type": "integer", "minimum": 1e20}, "beyond"),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "no 'type'"),
        ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}, "oneOf"),
        ({"type": "object", "not": {"required": ["a"]}}, "'not'"),
        ({"type": ["string", "null"], "not": {"type": "null"}}, "combinator"),
        ({"type": "object", "properties": {"a</parameter>": {}}}, "name"),
        ({"enum": ["null", "NULL"]}, "reads back"),
    ],
)
def test_a_required_parameter_no_form_carries_refuses_the_tool(schema: dict, words: str) -> None:
    tools = [ToolSpec("ok", None), ToolSpec("bad", _object({"v": schema}))]
    with pytest.raises(ToolRefused) as refused:
        FMT.grammar(tools, True, json.dumps, "tools")
    assert refused.value.tool == 1
    assert "tool 'bad'" in refused.value.message and words in refused.value.message


@pytest.mark.parametrize(
    "parameters",
    [
        _object({"a b": {"type": "string"}}),
        _object({"a": {"type": "string"}}, minProperties=1),
        {"anyOf": [_object({"a": {"type": "string"}})]},
        {"type": "object", "required": ["a"]},
    ],
)
def test_parameters_the_xml_cannot_carry_refuse_the_tool(parameters: dict) -> None:
    with pytest.raises(ToolRefused):
        FMT.grammar([ToolSpec("f", parameters)], False, json.dumps, "tools")
    with pytest.raises(ToolRefused):
        FMT.grammar([ToolSpec("my tool", None)], False, json.dumps, "tools")
    with pytest.raises(GrammarError):
        FMT.grammar([], False, json.dumps, "tools")


def test_an_optional_parameter_no_form_carries_is_left_out(sampler: GrammarSampler) -> None:
    tool = ToolSpec("f", _object({"a": {"type": "integer"}, "b b": {}, "u": {"format": "uri"}}, ["a"]))
    grammar = sampler.grammar(FMT, [tool], parallel=False)
    assert _accepts(sampler, grammar, _call("f", a="1"))
    assert not _accepts(sampler, grammar, _call("f", a="1", u="http://x"))
