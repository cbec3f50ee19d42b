"""Mistral's and LFM2's calls (tool_formats/mistral.py, pythonic.py): their forced calls on the families'
demo tokenizers (markers as special tokens), calls as the templates write them read whole and
streamed, and what each cannot force.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

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

MISTRAL = tool_format("mistral")
PYTHONIC = tool_format("pythonic")

# Parameters reached through $defs (moved into each value's own document for Python calls), a
# string that may hold quotes, brackets and backslashes, and top-level booleans and nulls.
LINKED = ToolSpec(
    "linked",
    {
        "type": "object",
        "$defs": {"flag": {"type": "boolean"}, "word": {"type": "string", "maxLength": 6}},
        "properties": {
            "on": {"$ref": "#/$defs/flag"},
            "words": {"type": "array", "items": {"$ref": "#/$defs/word"}, "maxItems": 2},
            "off": {"type": "boolean"},
            "nothing": {"type": "null"},
            "text": {"type": "string", "maxLength": 10},
        },
        "required": ["on", "off", "nothing", "text"],
        "additionalProperties": False,
    },
)


def _family_sampler(root: Path, family: str) -> GrammarSampler:
    if importlib.util.find_spec("mlxhost.demo.families.others") is None:
        pytest.skip("the Mistral and LFM2 demo variants are not built yet (mlxhost/demo/families/others.py)")
    return GrammarSampler(demo.make_model(root / family, "tiny", 0, family) / "tokenizer.json")


@pytest.fixture(scope="module")
def mistral_sampler(tmp_path_factory: pytest.TempPathFactory) -> GrammarSampler:
    return _family_sampler(tmp_path_factory.mktemp("families"), "mistral")


@pytest.fixture(scope="module")
def pythonic_sampler(tmp_path_factory: pytest.TempPathFactory) -> GrammarSampler:
    return _family_sampler(tmp_path_factory.mktemp("families"), "pythonic")


def _walk(
    sampler: GrammarSampler, fmt: ToolFormat, tools: tuple[ToolSpec, ...], seeds: int = 60
) -> list[str]:
    """Random outputs of the forced grammar (one or more calls), each read back valid and
    streamed soundly; every tool is called in some."""
    grammar = sampler.grammar(fmt, tools, parallel=True)
    texts = []
    for seed in range(seeds):
        text = sampler.sample(grammar, seed)
        assert read_calls(fmt, text, tools), text
        for body in bodies_of(fmt, text):
            assert_streams(fmt, body, tools, seed)
        texts.append(text)
    assert {c["name"] for t in texts for c in read_calls(fmt, t, tools)} == {t.name for t in tools}
    return texts


def _streams(fmt: ToolFormat, body: str) -> list[list[tuple[str | None, str, str | None]]]:
    """What `partial` says at every prefix of `body`, changes only."""
    seen: list[list[tuple[str | None, str, str | None]]] = []
    for cut in range(len(body) + 1):
        state = [(c.name, c.arguments, c.id) for c in fmt.partial(body[:cut], openai_tools(TOOLS))]
        if not seen or seen[-1] != state:
            seen.append(state)
    return seen


def _within(milestones: list[Any], steps: list[Any]) -> bool:
    """Whether `milestones` are states `steps` went through, in that order (a string argument
    streams character by character between them)."""
    found = iter(steps)
    return all(any(step == milestone for step in found) for milestone in milestones)


def test_mistral_forced_calls_each_after_its_own_marker(mistral_sampler: GrammarSampler) -> None:
    source = MISTRAL.grammar(TOOLS, True, mistral_sampler.tag, "tools")
    for marker in ("[TOOL_CALLS]", "[ARGS]"):
        assert mistral_sampler.tag(marker).startswith("<[") and mistral_sampler.tag(marker) in source
    texts = _walk(mistral_sampler, MISTRAL, (*TOOLS, LINKED))
    for text in texts:
        calls = read_calls(MISTRAL, text, (*TOOLS, LINKED))
        assert text.count("[TOOL_CALLS]") == text.count("[ARGS]") == len(calls)
    one = mistral_sampler.grammar(MISTRAL, [TOOLS[0]], parallel=False)
    for seed in range(20):
        text = mistral_sampler.sample(one, seed)
        assert [c["name"] for c in read_calls(MISTRAL, text, TOOLS)] == ["get_weather"]
        assert text.startswith("[TOOL_CALLS]get_weather[ARGS]{") and text.endswith("}")


def test_mistral_reads_and_streams_calls_as_the_template_writes_them() -> None:
    # After the first [TOOL_CALLS] (the body): the next call's marker, and one inside a string.
    body = 'get_weather[ARGS]{"city": "[TOOL_CALLS]x[ARGS]", "days": 3}[TOOL_CALLS]ping[ARGS]{}'
    calls = MISTRAL.parse(body, openai_tools(TOOLS))
    assert calls == [
        {"name": "get_weather", "arguments": {"city": "[TOOL_CALLS]x[ARGS]", "days": 3}},
        {"name": "ping", "arguments": {}},
    ]
    whole = '{"city": "[TOOL_CALLS]x[ARGS]", "days": 3}'
    steps = _streams(MISTRAL, body)
    assert [("get_weather", '{"city": "[TOOL_CALLS]x', None)] in steps  # the string as it comes
    assert _within(
        steps=steps,
        milestones=[
            [],
            [("get_weather", "", None)],  # the name, once [ARGS] came
            [("get_weather", "{", None)],
            [("get_weather", '{"city": "[TOOL_CALLS]x[ARGS]"', None)],
            [("get_weather", whole, None)],
            [("get_weather", whole, None), ("ping", "", None)],
            [("get_weather", whole, None), ("ping", "{", None)],
            [("get_weather", whole, None), ("ping", "{}", None)],
        ],
    )


def test_mistral_streams_the_older_json_list_with_the_models_ids() -> None:
    body = (
        ' [{"name": "get_weather", "arguments": {"city": "Oslo, \\"N\\"", "days": 2}, "id": "a1b2c3d4e"},'
        ' {"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}]'
    )
    assert MISTRAL.parse(body, None) == [
        {"name": "get_weather", "arguments": {"city": 'Oslo, "N"', "days": 2}, "id": "a1b2c3d4e"},
        {"name": "add", "arguments": {"a": 1, "b": 2}},
    ]
    steps = _streams(MISTRAL, body)
    weather = '{"city": "Oslo, \\"N\\"", "days": 2}'
    assert _within(
        steps=steps,
        milestones=[
            [("get_weather", "", None)],
            [("get_weather", "{", None)],
            [("get_weather", '{"city": "Oslo, \\"N\\""', None)],
            [("get_weather", weather, None)],  # the object closed, before the call's id came
        ],
    )
    assert steps[-2:] == [
        [("get_weather", weather, "a1b2c3d4e"), ("add", "", None)],  # arguments as a JSON string
        [("get_weather", weather, "a1b2c3d4e"), ("add", '{"a": 1, "b": 2}', None)],
    ]
    for step in steps:
        for name, arguments, _ in step:
            assert name in ("get_weather", "add")
            final = weather if name == "get_weather" else '{"a": 1, "b": 2}'
            assert final.startswith(arguments)


def test_mistral_refuses_what_its_parser_cannot_read() -> None:
    with pytest.raises(ToolRefused, match=r"tool 'get\.weather'.*name") as refused:
        MISTRAL.grammar([TOOLS[0], ToolSpec("get.weather", None)], True, json.dumps, "tools")
    assert refused.value.tool == 1
    with pytest.raises(ToolRefused, match="must be an object"):
        MISTRAL.grammar([ToolSpec("listy", {"type": "array"})], False, json.dumps, "tools")
    with pytest.raises(GrammarError, match="no tools"):
        MISTRAL.grammar([], False, json.dumps, "tools")


def test_mistral_forces_an_object_where_the_schema_names_no_type(mistral_sampler: GrammarSampler) -> None:
    loose = ToolSpec(
        "loose", {"properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    )
    grammar = mistral_sampler.grammar(MISTRAL, [loose], parallel=False)
    for seed in range(20):
        [call] = read_calls(MISTRAL, mistral_sampler.sample(grammar, seed), [loose])
        assert set(call["arguments"]) == {"n"}


def test_pythonic_forced_calls_are_one_python_list(pythonic_sampler: GrammarSampler) -> None:
    source = PYTHONIC.grammar(TOOLS, True, pythonic_sampler.tag, "tools")
    assert (
        pythonic_sampler.tag("<|tool_call_start|>") in source
        and pythonic_sampler.tag("<|tool_call_end|>") in source
    )
    texts = _walk(pythonic_sampler, PYTHONIC, (*TOOLS, LINKED))
    assert any(", " in t and t.count("(") > 1 for t in texts)  # several calls in one list
    for text in texts:
        assert text.count("<|tool_call_start|>") == 1
        assert len(bodies_of(PYTHONIC, text)) == 1
        # Top-level booleans and null as Python writes them; in JSON inside containers (and
        # behind a $ref, as "on=" is).
        for word in ("force=", "off=", "nothing="):
            if word in text:
                assert text.split(word, 1)[1].startswith(("True", "False", "None")), text


def test_pythonic_reads_and_streams_a_call_as_the_template_writes_it() -> None:
    body = (
        '[get_weather(city="Paris, (\\"centre\\") \\u00e9\\n", days=3), '
        'tag_files(paths=["a]", \'b\'], force=True, meta={"k": "x", "on": true})]'
    )
    calls = PYTHONIC.parse(body, openai_tools(TOOLS))
    weather = {"city": 'Paris, ("centre") é\n', "days": 3}
    files = {"paths": ["a]", "b"], "force": True, "meta": {"k": "x", "on": True}}
    assert calls == [{"name": "get_weather", "arguments": weather}, {"name": "tag_files", "arguments": files}]
    steps = _streams(PYTHONIC, body)
    done = (json.dumps(weather, ensure_ascii=False), None)
    assert [s[0][1:] for s in steps[1:]][:4] == [
        ("{", None),
        ('{"city": "Paris, (\\"centre\\") é\\n"', None),
        done,
        done,
    ]
    assert steps[-1] == [("get_weather", *done), ("tag_files", json.dumps(files), None)]
    assert [s[1][1] for s in steps if len(s) > 1] == [
        "{",
        '{"paths": ["a]", "b"]',
        '{"paths": ["a]", "b"], "force": true',
        json.dumps(files),
    ]


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        (ToolSpec("get-weather", None), "identifier"),
        (ToolSpec("f", {"properties": {"class": {"type": "string"}}}), "'class' cannot be written as a key"),
        (
            ToolSpec("f", {"properties": {"my-key": {"type": "string"}}}),
            "'my-key' cannot be written as a key",
        ),
        (
            ToolSpec("f", {"properties": {"\ufb01le": {}}}),
            "cannot be written as a key",
        ),  # Python reads "file"
        (ToolSpec("f", {"anyOf": [{"type": "object"}]}), "'anyOf' on an object"),
        (ToolSpec("f", {"patternProperties": {"^x": {}}}), "'patternProperties'"),
        (ToolSpec("f", {"type": "string"}), "must be an object"),
    ],
)
def test_pythonic_refuses_what_python_cannot_call(tool: ToolSpec, why: str) -> None:
    with pytest.raises(ToolRefused, match=f"tool '{tool.name}'") as refused:
        PYTHONIC.grammar([tool], False, json.dumps, "tools")
    assert why in str(refused.value)


def test_pythonic_accepts_dotted_names_and_unicode_keys(pythonic_sampler: GrammarSampler) -> None:
    tool = ToolSpec(
        "files.list",
        {
            "type": "object",
            "properties": {"größe": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["größe"],
            "additionalProperties": False,
        },
    )
    grammar = pythonic_sampler.grammar(PYTHONIC, [tool], parallel=False)
    for seed in range(10):
        [call] = read_calls(PYTHONIC, pythonic_sampler.sample(grammar, seed), [tool])
        assert call["name"] == "files.list" and list(call["arguments"]) == ["größe"]


def test_partial_never_raises_on_what_no_template_writes() -> None:
    bodies = {
        MISTRAL: ["x[ARGS]", "x[ARGS]5", 'x[ARGS]"s"y[ARGS]{', "[", '[{"name": 1, "arguments": {', "[{]"],
        PYTHONIC: ["[", "[x(", "[x(a=", "[x(a=1, 'b", "[x(a=)]", "[x(1, a=2)]", "[x(a=[}", "[x(a=1)) , y("],
    }
    for fmt, cases in bodies.items():
        for body in cases:
            for cut in range(len(body) + 1):
                for call in fmt.partial(body[:cut], None):
                    assert call.name in ("x", "y", 1)
