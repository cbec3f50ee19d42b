"""Constrained decoding: what a request requires of its output, as a `GrammarSpec`.

A request's `response_format` (a JSON object, a JSON schema) or a forced `tool_choice` becomes a
`GrammarSpec`. From there:

- grammar_compiler.py: `Grammars` compiles the spec for the model's tokenizer with llguidance, in
  a worker thread so that a large schema never stalls the event loop, refuses what cannot be
  enforced or satisfied, and keeps the result in a small LRU cache.
- grammar_mask.py: the compiled `Grammar` hands each sequence a fresh logits processor;
  BatchGenerator calls it once per step in the generation thread, where it feeds the matcher the
  newest token and masks every token the grammar does not allow next. Rows without one keep to
  the batched path, so constrained and free sequences share a batch.

Errors::

    GrammarError  a schema or grammar that cannot be enforced, or that no output satisfies (a
                  reference that requires itself without end, see satisfiable.py); `param` names
                  the request field
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = ["MAX_MESSAGE", "GrammarError", "GrammarSpec", "ToolSpec", "closed"]

# Short errors: llguidance's messages are cut to this many characters.
MAX_MESSAGE: Final = 500


class GrammarError(Exception):
    """A schema or grammar llguidance refuses; `param` names the request field it came from."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: Mapping[str, Any] | None  # the function's JSON schema (None: any object)
    param: str | None = None  # the request field of its parameters, for errors (None: the spec's)


@dataclass(frozen=True)
class GrammarSpec:
    """What the output must be. Hashable via `key()` (the JSON of it) for the cache."""

    kind: Literal["json_object", "json_schema", "tool_calls"]
    param: str  # the request field to name in errors, e.g. "response_format.json_schema.schema"
    schema: Mapping[str, Any] | None = None  # json_schema
    tools: tuple[ToolSpec, ...] = ()  # tool_calls: one of these (by name) per call
    parallel: bool = True  # tool_calls: one or more calls (False: exactly one)
    format: str = "json_tools"  # tool_calls: the model's call syntax (mlx-lm's parser's name)

    def key(self) -> str:
        """The spec as JSON; raises ValueError or TypeError for a schema that is not JSON.

        Key order is kept, not sorted: llguidance writes properties in schema order, so two
        schemas that differ only in order are different grammars. `param` is left out, since
        it does not change the grammar.
        """
        return json.dumps(
            {
                "kind": self.kind,
                "schema": self.schema,
                "tools": [[t.name, t.parameters] for t in self.tools],
                "parallel": self.parallel,
                "format": self.format,
            },
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=False,
        )


# The keywords whose values are schemas, lists of schemas, or maps of names to schemas.
_SUBSCHEMA: Final = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_SUBSCHEMA_LISTS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS: Final = ("properties", "$defs", "definitions", "patternProperties")


def closed(schema: Any) -> Any:
    """A schema as OpenAI's strict mode reads it: an object whose schema lists its properties and
    says nothing of others allows no others (`additionalProperties: false`), at every level.

    Strict schemas are meant to be written that way, but clients often leave it out; without it a
    model may go on inventing keys until it runs out of tokens.
    """
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if key in out:
            out[key] = closed(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: closed(s) for name, s in out[key].items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out
