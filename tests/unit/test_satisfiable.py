"""Which schemas admit a finite JSON value: refused are only those that cannot, whatever the model."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mlxhost.worker.engine.satisfiable import why_unsatisfiable

UNSATISFIABLE: list[tuple[str, Any, str]] = [
    ("itself", {"$ref": "#"}, "#"),
    (
        "loop",
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        "#/$defs/a",
    ),
    ("requires itself", {"type": "object", "properties": {"x": {"$ref": "#"}}, "required": ["x"]}, "#"),
    ("non-empty array of itself", {"type": "array", "items": {"$ref": "#"}, "minItems": 1}, "#"),
    ("tuple of itself", {"type": "array", "prefixItems": [{"$ref": "#"}], "minItems": 1}, "#"),
    ("contains itself", {"type": "array", "contains": {"$ref": "#"}}, "#"),
    (
        "every branch recurses",
        {"anyOf": [{"$ref": "#"}, {"type": "array", "items": {"$ref": "#"}, "minItems": 2}]},
        "#",
    ),
    (
        "all of a loop",
        {"allOf": [{"type": "object"}, {"$ref": "#/$defs/x"}], "$defs": {"x": {"$ref": "#"}}},
        "#/$defs/x",
    ),
    (
        "required through additionalProperties",
        {"type": "object", "additionalProperties": {"$ref": "#"}, "required": ["a"]},
        "#",
    ),
    (
        "mutual",
        {
            "$defs": {
                "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}, "required": ["b"]},
                "b": {"type": "array", "items": {"$ref": "#/$defs/a"}, "minItems": 2},
            },
            "$ref": "#/$defs/a",
        },
        "#/$defs/a",
    ),
    ("anchor", {"$ref": "#there", "$defs": {"t": {"$anchor": "there", "$ref": "#there"}}}, "#there"),
    ("escaped pointer", {"$defs": {"a/b": {"$ref": "#/$defs/a~1b"}}, "$ref": "#/$defs/a~1b"}, "#/$defs/a~1b"),
]

SATISFIABLE: list[tuple[str, Any]] = [
    ("plain", {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
    (
        "tree",
        {
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}},
            "required": ["kids"],
        },
    ),
    (
        "linked list",
        {
            "type": "object",
            "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}},
            "required": ["v"],
        },
    ),
    ("nullable", {"type": ["object", "null"], "properties": {"x": {"$ref": "#"}}, "required": ["x"]}),
    ("untyped", {"properties": {"x": {"$ref": "#"}}, "required": ["x"]}),  # "abc" is one
    ("a way out", {"anyOf": [{"$ref": "#"}, {"type": "string"}]}),
    (
        "optional loop",
        {"type": "object", "properties": {"o": {"$ref": "#/$defs/l"}}, "$defs": {"l": {"$ref": "#/$defs/l"}}},
    ),
    ("unused loop", {"type": "string", "$defs": {"l": {"$ref": "#/$defs/l"}}}),
    (
        "json expression",
        {
            "$defs": {
                "e": {
                    "anyOf": [
                        {"type": "number"},
                        {"type": "array", "items": {"$ref": "#/$defs/e"}, "minItems": 2},
                    ]
                }
            },
            "$ref": "#/$defs/e",
        },
    ),
    ("contains none", {"type": "array", "contains": {"$ref": "#"}, "minContains": 0}),
    (
        "anchor",
        {"$ref": "#there", "$defs": {"t": {"$anchor": "there", "type": "array", "items": {"$ref": "#"}}}},
    ),
    ("another document", {"$ref": "other.json"}),
    (
        "nested $id",
        {"properties": {"x": {"$id": "http://x/y", "$ref": "#"}}, "required": ["x"], "type": "object"},
    ),
    ("true", True),
    ("dangling", {"$ref": "#/$defs/nowhere"}),  # llguidance says so
]


@pytest.mark.parametrize(
    ("schema", "ref"), [(s, r) for _, s, r in UNSATISFIABLE], ids=[n for n, _, _ in UNSATISFIABLE]
)
def test_schemas_whose_values_never_end_are_refused_naming_the_reference(schema: Any, ref: str) -> None:
    why = why_unsatisfiable(schema)
    assert why is not None and why.startswith("no JSON value satisfies the schema")
    assert f"'$ref': '{ref}'" in why


@pytest.mark.parametrize("schema", [s for _, s in SATISFIABLE], ids=[n for n, _ in SATISFIABLE])
def test_schemas_with_a_finite_value_pass(schema: Any) -> None:
    assert why_unsatisfiable(schema) is None


def test_false_is_unsatisfiable_without_a_reference_to_name() -> None:
    assert why_unsatisfiable(False) == "no JSON value satisfies the schema"
    assert why_unsatisfiable({"anyOf": []}) == "no JSON value satisfies the schema"


def test_a_long_chain_of_references_takes_linear_time() -> None:
    # 20,000 definitions, each requiring the next: about what fits in MAX_SCHEMA_CHARS.
    count = 20_000
    defs: dict[str, Any] = {
        f"d{i}": {"type": "object", "properties": {"n": {"$ref": f"#/$defs/d{i + 1}"}}, "required": ["n"]}
        for i in range(count)
    }
    defs[f"d{count}"] = {"type": "integer"}
    began = time.perf_counter()
    assert why_unsatisfiable({"$defs": defs, "$ref": "#/$defs/d0"}) is None
    defs[f"d{count}"] = {"$ref": "#/$defs/d0"}
    assert why_unsatisfiable({"$defs": defs, "$ref": "#/$defs/d0"}) is not None
    # Generous: a quadratic check would take minutes here; this one takes tenths of a second.
    assert time.perf_counter() - began < 20
