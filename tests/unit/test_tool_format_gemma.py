"""Gemma 4's and FunctionGemma's calls (tool_formats/gemma4.py, function_gemma.py, notation.py): their
forced calls on the families' demo tokenizers (the string delimiter and markers as special tokens),
calls as the templates write them read whole and streamed, and what each cannot force.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from llguidance import LLMatcher

from mlxhost import demo
from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import ToolFormat, ToolRefused, tool_format
from tests.unit.tool_format_helpers import (
    TOOLS,
    GrammarSampler,
    assert_streams,
    bodies_of,
    openai_tools,
    read_calls,
)

pytestmark = pytest.mark.unit

GEMMA4 = tool_format("gemma4")
FUNCTION_GEMMA = tool_format("function_gemma")
FLAT = tuple(t for t in TOOLS if t.name != "tag_files")  # FunctionGemma cannot carry tag_files

# Strings of every awkward kind, an enum holding what each notation cannot write, anyOf, a type
# list and a const; all bounded, so that a random walk ends.
NOTE = ToolSpec(
    "note",
    {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 2, "maxLength": 20},
            "mode": {"enum": ["a,b", "c:d", "x}y", '<|"|>', "<escape>", 3, None, True, [1, "z"], {"k": "v"}]},
            "maybe": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
            "kind": {"type": ["integer", "boolean"]},
            "Fixed": {"const": "fixed"},
        },
        "required": ["text", "mode", "kind"],
        "additionalProperties": False,
    },
)
# Recursion through $defs, a free-form object, unbounded numbers in an array.
TREE = ToolSpec(
    "tree",
    {
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "string", "maxLength": 3},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                },
                "required": ["v"],
            }
        },
        "properties": {
            "root": {"$ref": "#/$defs/node"},
            "free": {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "integer"}},
            "nums": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 2},
        },
        "required": ["root"],
    },
)


def _family_sampler(root: Path, family: str) -> GrammarSampler:
    if importlib.util.find_spec("mlxhost.demo.families.gemma") is None:
        pytest.skip("the Gemma demo variants are not built yet (mlxhost/demo/families/gemma.py)")
    return GrammarSampler(demo.make_model(root / family, "tiny", 0, family) / "tokenizer.json")


@pytest.fixture(scope="module")
def gemma4_sampler(tmp_path_factory: pytest.TempPathFactory) -> GrammarSampler:
    return _family_sampler(tmp_path_factory.mktemp("families"), "gemma4")


@pytest.fixture(scope="module")
def function_gemma_sampler(tmp_path_factory: pytest.TempPathFactory) -> GrammarSampler:
    return _family_sampler(tmp_path_factory.mktemp("families"), "function_gemma")


@pytest.fixture(scope="module")
def sampler(tiny_model: Path) -> GrammarSampler:
    return GrammarSampler(tiny_model / "tokenizer.json")


def _walk(
    sampler: GrammarSampler, fmt: ToolFormat, tools: tuple[ToolSpec, ...], seeds: int = 60
) -> list[str]:
    """Random outputs of the forced grammar, each read back valid and streamed soundly."""
    grammar = sampler.grammar(fmt, tools, parallel=True)
    texts = []
    for seed in range(seeds):
        text = sampler.sample(grammar, seed, max_tokens=1500)
        assert read_calls(fmt, text, tools), text
        for body in bodies_of(fmt, text):
            assert_streams(fmt, body, tools, seed)
        texts.append(text)
    return texts


def _streams(fmt: ToolFormat, body: str, tools: tuple[ToolSpec, ...]) -> list[tuple[str | None, str]]:
    """What `partial` says at every prefix of `body`, changes only."""
    seen: list[tuple[str | None, str]] = []
    for cut in range(len(body) + 1):
        calls = fmt.partial(body[:cut], openai_tools(tools))
        state = (calls[0].name, calls[0].arguments) if calls else (None, "")
        if not seen or seen[-1] != state:
            seen.append(state)
    return seen


def test_gemma4_forced_calls_use_the_delimiter_token_and_sorted_keys(gemma4_sampler: GrammarSampler) -> None:
    source = GEMMA4.grammar([NOTE], False, gemma4_sampler.tag, "tools")
    quote = gemma4_sampler.tag('<|"|>')
    assert quote.startswith("<[") and quote in source  # matched as the special token, by id
    texts = _walk(gemma4_sampler, GEMMA4, (*TOOLS, NOTE, TREE))
    notes = [t for t in texts if "call:note{" in t]
    assert notes
    for text in notes:
        body = bodies_of(GEMMA4, text)[0]
        keys = [k for k in ("Fixed", "kind", "maybe", "mode", "text") if f"{k}:" in body]
        assert sorted(keys, key=str.lower) == sorted(keys, key=lambda k: body.index(f"{k}:"))
    assert {c["name"] for t in texts for c in read_calls(GEMMA4, t, (*TOOLS, NOTE, TREE))} == {
        t.name for t in (*TOOLS, NOTE, TREE)
    }


def test_gemma4_on_a_vocabulary_without_its_tokens(sampler: GrammarSampler) -> None:
    # The markers and the delimiter as plain text: strings still end at the first delimiter.
    assert '"<|\\"|>"' in GEMMA4.grammar([NOTE], False, sampler.tag, "tools")
    _walk(sampler, GEMMA4, (NOTE, TREE), seeds=100)


def test_gemma4_reads_and_streams_a_call_as_the_template_writes_it() -> None:
    body = 'call:tag_files{force:true,meta:{k:<|"|>a}{<|"|>},paths:[<|"|>x, "y"<|"|>,<|"|>日本<|"|>]}'
    [call] = GEMMA4.parse(body, openai_tools(TOOLS))
    assert call == {
        "name": "tag_files",
        "arguments": {"force": True, "meta": {"k": "a}{"}, "paths": ['x, "y"', "日本"]},
    }
    steps = _streams(GEMMA4, body, TOOLS)
    assert steps == [
        (None, ""),
        ("tag_files", "{"),
        ("tag_files", '{"force": true'),
        ("tag_files", '{"force": true, "meta": {"k": "a}{"}'),
        ("tag_files", json.dumps(call["arguments"], ensure_ascii=False)),
    ]


def test_gemma4_strings_hold_anything_but_the_delimiter_and_the_end_marker(sampler: GrammarSampler) -> None:
    grammar = sampler.grammar(GEMMA4, [NOTE], parallel=False)

    def accepts(text: str) -> bool:
        matcher = LLMatcher(sampler.lltokenizer, grammar, log_level=0)
        return matcher.consume_tokens(sampler.lltokenizer.tokenize_str(text)) and not matcher.is_error()

    start = '<|tool_call>call:note{kind:1,mode:3,text:<|"|>'
    assert accepts(start + 'a{b}, c:\n<x> "q" \\<|"|>}<tool_call|>')
    assert not accepts(start + "a<tool_call|>")
    assert not accepts(start + 'a<|"|>b')  # the string ended at the delimiter: "b" is no key


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        ({"properties": {"d": {"type": "string", "format": "date"}}}, "parameter 'd': 'format'"),
        ({"properties": {"d": {"type": "string", "pattern": "^a"}}}, "parameter 'd': 'pattern'"),
        ({"properties": {"d": {"oneOf": [{"type": "string"}, {"type": "null"}]}}}, "'oneOf'"),
        ({"properties": {"d": {"type": "array", "uniqueItems": True}}}, "'uniqueItems'"),
        ({"properties": {"my-key": {"type": "string"}}}, "'my-key' cannot be written as a key"),
        ({"properties": {"o": {"properties": {"a b": {}}}}}, "'a b' cannot be written as a key"),
        ({"type": "array"}, "must be an object"),
        ({"anyOf": [{"type": "object"}]}, "'anyOf' on an object"),
        ({"properties": {"e": {"enum": ['<|"|>']}}}, "no value of the enum"),
        ({"properties": {"r": {"$ref": "#/$defs/missing"}}}, "points at nothing"),
        ({"required": ["a"]}, "required property 'a' has no schema"),
    ],
)
def test_gemma4_refuses_what_it_cannot_force(schema: dict, why: str) -> None:
    tools = [TOOLS[0], ToolSpec("bad", schema)]
    with pytest.raises(ToolRefused, match="tool 'bad'") as refused:
        GEMMA4.grammar(tools, True, json.dumps, "tools")
    assert why in str(refused.value)
    assert refused.value.tool == 1


def test_names_the_parsers_cannot_read_are_refused() -> None:
    with pytest.raises(ToolRefused, match="name"):
        GEMMA4.grammar([ToolSpec("get.weather", None)], False, json.dumps, "tools")
    with pytest.raises(ToolRefused, match="name"):
        FUNCTION_GEMMA.grammar([ToolSpec("get-weather", None)], False, json.dumps, "tools")
    with pytest.raises(GrammarError, match="no tools"):
        FUNCTION_GEMMA.grammar([], False, json.dumps, "tools")


def test_function_gemma_forced_calls_on_its_vocabulary(function_gemma_sampler: GrammarSampler) -> None:
    assert FUNCTION_GEMMA.grammar(FLAT, True, function_gemma_sampler.tag, "tools").count("<[") >= 3
    texts = _walk(function_gemma_sampler, FUNCTION_GEMMA, (*FLAT, NOTE))
    assert {c["name"] for t in texts for c in read_calls(FUNCTION_GEMMA, t, (*FLAT, NOTE))} == {
        t.name for t in (*FLAT, NOTE)
    }
    for text in texts:  # enum strings the parser would cut ("x}y") are never written
        assert "x}y" not in text


def test_function_gemma_refuses_nested_values_and_unreadable_keys() -> None:
    with pytest.raises(ToolRefused, match="tool 'tag_files': parameter 'meta': an object cannot be a value"):
        FUNCTION_GEMMA.grammar(TOOLS, True, json.dumps, "tools")
    array = ToolSpec("a", {"properties": {"xs": {"type": "array", "items": {"type": "integer"}}}})
    with pytest.raises(ToolRefused, match="parameter 'xs': an array cannot be a value"):
        FUNCTION_GEMMA.grammar([array], True, json.dumps, "tools")
    with pytest.raises(ToolRefused, match="'a:b' cannot be written as a key"):
        FUNCTION_GEMMA.grammar([ToolSpec("k", {"properties": {"a:b": {}}})], True, json.dumps, "tools")


def test_function_gemma_strings_never_hold_a_brace(sampler: GrammarSampler) -> None:
    # The parser ends a call at the first "}", inside a string or not.
    grammar = sampler.grammar(FUNCTION_GEMMA, [NOTE], parallel=False)
    matcher = LLMatcher(sampler.lltokenizer, grammar, log_level=0)
    text = "<start_function_call>call:note{kind:1,mode:3,text:<escape>a, b: c"
    assert matcher.consume_tokens(sampler.lltokenizer.tokenize_str(text))
    assert not matcher.consume_tokens(sampler.lltokenizer.tokenize_str("}"))


def test_function_gemma_reads_and_streams_a_call_as_the_template_writes_it() -> None:
    body = "call:get_weather{city:<escape>Paris, 12: <b>{x<escape>,days:3,units:<escape>celsius<escape>}"
    [call] = FUNCTION_GEMMA.parse(body, openai_tools(TOOLS))
    arguments = {"city": "Paris, 12: <b>{x", "days": 3, "units": "celsius"}
    assert call == {"name": "get_weather", "arguments": arguments}
    assert (
        _streams(FUNCTION_GEMMA, body, TOOLS)
        == [
            (None, ""),
            ("get_weather", "{"),
            ("get_weather", '{"city": "Paris, 12: <b>{x"'),  # once its closing <escape> came
            ("get_weather", '{"city": "Paris, 12: <b>{x", "days": 3'),  # once the "," after 3 came
            ("get_weather", json.dumps(arguments)[:-1]),
            ("get_weather", json.dumps(arguments)),
        ]
    )
    # A number is not read before its "," (3 may become 30); nor a string before its <escape> ends.
    assert FUNCTION_GEMMA.partial("call:add{a:3", None)[0].arguments == "{"
    assert FUNCTION_GEMMA.partial("call:get_weather{city:<escape>Paris<esc", None)[0].arguments == "{"


def test_partial_never_raises_on_what_no_template_writes() -> None:
    for fmt in (GEMMA4, FUNCTION_GEMMA):
        for body in [
            "call:",
            "call:x{",
            "call:x{a:",
            'call:x{a:<|"|>',
            "call:x{:,:,}",
            "call:x{a:{]]]}",
            "call:x{<escape>",
        ]:
            for cut in range(len(body) + 1):
                for call in fmt.partial(body[:cut], None):
                    assert call.name == "x"
