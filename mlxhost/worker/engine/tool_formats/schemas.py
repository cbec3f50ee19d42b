"""Bounds on the schemas a grammar is built from, and moving a schema into a larger document.

Shared by the JSON-schema grammars (grammar_compiler.py) and every family's tool-call grammar.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec

__all__ = [
    "MAX_DEPTH",
    "MAX_OPTIONAL_PROPERTIES",
    "MAX_PROPERTIES",
    "MAX_SCHEMA_CHARS",
    "check",
    "checked_parameters",
    "rebase",
]

# The cost of compiling a schema grows with its size, and with the square of an object's optional
# properties (llguidance enumerates which of them may come next): these bounds keep a compile
# well under a second. They admit what OpenAI's strict mode admits (5,000 properties in all).
MAX_SCHEMA_CHARS: Final = 512 * 1024
MAX_DEPTH: Final = 64  # nested JSON levels; llguidance's own parser stops at 128
MAX_PROPERTIES: Final = 5000
MAX_OPTIONAL_PROPERTIES: Final = 1000  # in one object


def checked_parameters(tools: Sequence[ToolSpec], index: int, param: str) -> Mapping[str, Any]:
    """Tool `index`'s parameters schema ({"type": "object"} when it has none), checked against the
    bounds; raises GrammarError naming `param` (or the tool's own field) when it is unfit."""
    tool = tools[index]
    where = tool.param or param
    if not isinstance(tool.name, str) or not tool.name:
        raise GrammarError("every tool needs a name", where)
    parameters = {"type": "object"} if tool.parameters is None else tool.parameters
    if not isinstance(parameters, Mapping):
        raise GrammarError(f"tool '{tool.name}': the parameters must be a JSON object", where)
    check(parameters, where)
    return parameters


def check(schema: Mapping[str, Any], param: str) -> None:
    """Refuse, before compiling, what would take llguidance too long (see MAX_*)."""
    properties = 0
    for node, depth in _walk(schema):
        if depth > MAX_DEPTH:
            raise GrammarError(f"the schema is nested too deeply (over {MAX_DEPTH} levels)", param)
        if isinstance(node, Mapping) and isinstance(node.get("properties"), Mapping):
            names = node["properties"]
            properties += len(names)
            required = node.get("required")
            optional = len(set(names) - set(required)) if isinstance(required, list) else len(names)
            if optional > MAX_OPTIONAL_PROPERTIES:
                raise GrammarError(
                    f"an object in the schema has over {MAX_OPTIONAL_PROPERTIES} optional properties", param
                )
    if properties > MAX_PROPERTIES:
        raise GrammarError(f"the schema has over {MAX_PROPERTIES} properties", param)


def _walk(value: Any) -> Iterator[tuple[Any, int]]:
    # Iterative: a hostile schema may be nested deeper than Python's recursion limit.
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        if depth > MAX_DEPTH:
            continue
        if isinstance(node, Mapping):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (Mapping, list)))


# Keywords whose values are data, not schemas: a "$ref" in there is a value to match, not a link.
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names to schemas: every value is a schema, whatever its name.
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def rebase(schema: Any, prefix: str) -> Any:
    """`schema` with its local references ("#", "#/...") made relative to `prefix`, the place
    the schema is moved to (depth already bounded by `_check`)."""
    if isinstance(schema, list):
        return [rebase(s, prefix) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for name, value in schema.items():
        if name == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            out[name] = prefix + value[1:]
        elif name in _DATA_KEYWORDS:
            out[name] = value
        elif name in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[name] = {k: rebase(v, prefix) for k, v in value.items()}
        else:
            out[name] = rebase(value, prefix)
    return out
