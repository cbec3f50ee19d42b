"""Tools for the agent corpus: their definitions in JSON Schema, as clients send them, and calls to them.

A definition is JSON as a chat template writes it, so its descriptions (Markdown, from
`agent_markdown`) arrive JSON-escaped: a newline is the two characters `\\n`.
"""

from __future__ import annotations

import json
import random
from typing import Any, Final

from mlxhost.demo.agent_markdown import markdown, paragraph
from mlxhost.demo.agent_sentences import command, sentence
from mlxhost.demo.agent_vocabulary import identifier, noun_base, path

__all__ = ["tool_call", "tool_definitions"]

_SCHEMA_URLS: Final = (
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2020-12/schema",
)
_STRING_FORMATS: Final = ("uri", "date-time", "email", "uuid", "path", "date", "hostname", "ipv4")


# JSON Schema, as tools are defined to a model.


def _description(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.35:
        return sentence(rng)
    if r < 0.6:
        return paragraph(rng)
    return markdown(rng)


def _enum_value(rng: random.Random) -> str:
    return identifier(rng, rng.choice(("snake", "kebab"))) if rng.random() < 0.3 else noun_base(rng)


def _property_schema(rng: random.Random, depth: int) -> dict[str, Any]:
    r = rng.random()
    schema: dict[str, Any]
    if r < 0.40:
        schema = {"type": "string"}
        if rng.random() < 0.1:
            schema["format"] = rng.choice(_STRING_FORMATS)
        if rng.random() < 0.05:
            schema["minLength"] = 1
    elif r < 0.52:
        schema = {"type": rng.choice(("number", "integer"))}
        if rng.random() < 0.3:
            schema["minimum"] = rng.choice((0, 1))
        if rng.random() < 0.2:
            # The last is JavaScript's largest safe integer, which TypeScript schemas often carry.
            schema["maximum"] = rng.choice((10, 20, 100, 1000, 2000, 600000, 9007199254740991))
        if rng.random() < 0.05:
            schema["exclusiveMinimum"] = 0
    elif r < 0.62:
        schema = {"type": "boolean"}
        if rng.random() < 0.3:
            schema["default"] = rng.random() < 0.5
    elif r < 0.74:
        schema = {"type": "string", "enum": [_enum_value(rng) for _ in range(rng.randint(2, 5))]}
    elif r < 0.90 or depth > 1:
        items = _property_schema(rng, depth + 1) if depth < 2 else {"type": "string"}
        schema = {"type": "array", "items": items}
        if rng.random() < 0.2:
            schema[rng.choice(("minItems", "maxItems"))] = rng.randint(1, 8)
    else:
        schema = _object_schema(rng, depth + 1)
    if rng.random() < 0.75:
        schema["description"] = _description(rng) if rng.random() < 0.4 else sentence(rng)
    if rng.random() < 0.05 and depth == 0:
        schema = {"anyOf": [schema, {"type": "null"}]}
    elif rng.random() < 0.05:
        schema = {"type": [schema.pop("type"), "null"], **schema}
    return schema


def _object_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    names = [identifier(rng, rng.choice(("snake", "snake", "camel"))) for _ in range(rng.randint(1, 6))]
    names = list(dict.fromkeys(names))
    properties = {name: _property_schema(rng, depth) for name in names}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if rng.random() < 0.8:
        schema["required"] = [n for n in names if rng.random() < 0.6] or names[:1]
    if rng.random() < 0.6:
        schema["additionalProperties"] = False
    if depth == 0 and rng.random() < 0.3:
        schema["$schema"] = rng.choice(_SCHEMA_URLS)
    if rng.random() < 0.3:
        # Keys in either order: tools from different clients write them differently.
        schema = dict(reversed(list(schema.items())))
    return schema


def tool_definitions(rng: random.Random) -> str:
    """One to three tool definitions, a line of JSON each, as a chat template lists them."""
    tools = []
    for _ in range(rng.randint(1, 3)):
        name = identifier(rng, rng.choice(("snake", "pascal", "pascal", "camel")))
        function: dict[str, Any] = {
            "name": name,
            "description": _description(rng),
            "parameters": _object_schema(rng),
        }
        if rng.random() < 0.2:
            function["strict"] = rng.random() < 0.5
        # As a chat template writes them with `tojson`: json.dumps's default separators, unicode as is.
        tools.append(json.dumps({"type": "function", "function": function}, ensure_ascii=False))
    return "\n".join(tools)


# A model's call to a tool.


def _argument(rng: random.Random) -> str | int:
    r = rng.random()
    if r < 0.4:
        return path(rng)
    if r < 0.6:
        return command(rng)
    return sentence(rng) if r < 0.9 else rng.randint(0, 1000)


def tool_call(rng: random.Random) -> str:
    """A model's call to a tool, in the `<tool_call>` tags a chat template wraps it in."""
    name = identifier(rng, rng.choice(("snake", "pascal")))
    arguments = {identifier(rng, "snake"): _argument(rng) for _ in range(rng.randint(1, 3))}
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{call}\n</tool_call>"
