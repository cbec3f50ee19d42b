"""Grammars on the tiny model that cannot be kept: bad schemas and tools are grammar errors naming
the request's field, schemas no value satisfies are refused, and the compiler's cache returns the
same grammar and remembers refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlxhost.worker.engine.grammar import GrammarError, GrammarSpec, ToolSpec
from mlxhost.worker.engine.grammar_compiler import Grammars
from tests.unit.grammar_helpers import WEATHER, compile_, grammars_fixture, loaded_fixture  # noqa: F401


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "objekt"}, "objekt"),
        ({"$ref": "#/$defs/nowhere"}, "nowhere"),
        ({"type": "string", "pattern": "(?=x)"}, "look-around"),
        ({"type": "string", "format": "bogus"}, "bogus"),
        ({"type": "array", "minItems": 3, "maxItems": 1}, "minItems"),
        ({"type": "number", "minimum": float("nan")}, "JSON"),
        ({"type": "object", "properties": {f"p{i}": {} for i in range(1001)}}, "optional properties"),
        ({"type": "string", "enum": ["x" * 100] * 6000}, "too large"),
        (json.loads('{"items":' * 70 + "{}" + "}" * 70), "nested too deeply"),
        (["not", "an", "object"], "JSON object"),
    ],
)
def test_bad_schemas_are_grammar_errors_naming_the_field(
    grammars: Grammars, schema: Any, message: str
) -> None:
    param = "response_format.json_schema.schema"
    with pytest.raises(GrammarError) as caught:
        compile_(grammars, GrammarSpec("json_schema", param, schema))
    assert caught.value.param == param
    assert message in caught.value.message


def test_bad_tools_are_grammar_errors_naming_the_tool(grammars: Grammars) -> None:
    tools = (ToolSpec("fine", WEATHER), ToolSpec("broken", {"type": "objekt"}))
    with pytest.raises(GrammarError) as caught:
        compile_(grammars, GrammarSpec("tool_calls", "tools", tools=tools))
    assert caught.value.param == "tools"
    assert "broken" in caught.value.message and "objekt" in caught.value.message
    # Where the request says which field a tool's parameters came from, the error names it.
    named = (
        ToolSpec("fine", WEATHER),
        ToolSpec("broken", {"type": "objekt"}, "tools[1].function.parameters"),
    )
    with pytest.raises(GrammarError) as caught:
        compile_(grammars, GrammarSpec("tool_calls", "tools", tools=named))
    assert caught.value.param == "tools[1].function.parameters"
    with pytest.raises(GrammarError):
        compile_(grammars, GrammarSpec("tool_calls", "tool_choice", tools=()))


def test_the_cache_returns_the_same_grammar_and_remembers_refusals(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    grammars = Grammars(tokenizer, model.args.vocab_size, cache_size=2)
    spec = GrammarSpec("tool_calls", "tools", tools=(ToolSpec("get_weather", WEATHER),))
    first = compile_(grammars, spec)
    assert grammars.compile_seconds > 0.0
    assert compile_(grammars, spec) is first
    assert grammars.compile_seconds == 0.0
    # The same spec from another field: the same grammar (the field only names errors).
    assert compile_(grammars, GrammarSpec("tool_calls", "tool_choice", tools=spec.tools)) is first

    bad = GrammarSpec("json_schema", "a", {"type": "objekt"})
    with pytest.raises(GrammarError):
        compile_(grammars, bad)
    with pytest.raises(GrammarError) as caught:
        compile_(grammars, GrammarSpec("json_schema", "b", {"type": "objekt"}))
    assert grammars.compile_seconds == 0.0 and caught.value.param == "b"

    compile_(grammars, GrammarSpec("json_object", "response_format"))  # evicts the oldest: `spec`
    assert compile_(grammars, spec) is not first
    # Property order is part of the grammar, so it is part of the key.
    reordered = {**WEATHER, "properties": dict(reversed(list(WEATHER["properties"].items())))}
    assert GrammarSpec("json_schema", "p", reordered).key() != GrammarSpec("json_schema", "p", WEATHER).key()


ENDLESS: list[Any] = [
    {"$ref": "#"},
    {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"type": "object", "properties": {"child": {"$ref": "#"}}, "required": ["child"]},
]


@pytest.mark.parametrize("schema", ENDLESS, ids=["itself", "loop", "requires-itself"])
def test_schemas_no_value_satisfies_are_refused(grammars: Grammars, schema: Any) -> None:
    # llguidance compiles each of these: the first two allow no first token, the third allows
    # '{"child": {"child": ...' without end.
    param = "response_format.json_schema.schema"
    with pytest.raises(GrammarError) as caught:
        compile_(grammars, GrammarSpec("json_schema", param, schema))
    assert caught.value.param == param
    assert caught.value.message.startswith("no JSON value satisfies the schema: what it requires refers back")

    tools = (
        ToolSpec("fine", WEATHER, "tools[0].parameters"),
        ToolSpec("endless", schema, "tools[1].parameters"),
    )
    for spec in (
        GrammarSpec("tool_calls", "tools", tools=tools),
        GrammarSpec("tool_calls", "tools", tools=tools[1:]),
    ):
        with pytest.raises(GrammarError) as caught:
            compile_(grammars, spec)
        assert caught.value.param == "tools[1].parameters"
        assert caught.value.message.startswith("tool 'endless': no JSON value satisfies its parameters")


def test_a_grammar_that_allows_no_first_token_is_refused(grammars: Grammars) -> None:
    # A loop through an "$id" the satisfiability check does not follow: llguidance compiles it,
    # and the first mask it computes is an error.
    schema = {"$id": "http://example.com/s", "$ref": "http://example.com/s"}
    with pytest.raises(GrammarError) as caught:
        compile_(grammars, GrammarSpec("json_schema", "text.format.schema", schema))
    assert caught.value.param == "text.format.schema"
    assert "allows no first token" in caught.value.message


