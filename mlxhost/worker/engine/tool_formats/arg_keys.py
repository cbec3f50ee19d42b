"""Calls as a name then key/value tags: GLM-4.7 and Poolside Laguna (mlx-lm's glm47 and laguna,
one syntax) and Meituan LongCat (longcat).

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
    <longcat_tool_call>get_weather
    <longcat_arg_key>city</longcat_arg_key>
    <longcat_arg_value>Paris</longcat_arg_value>
    </longcat_tool_call>

GLM-4.7's template writes a call on one line; GLM-4.5's, LongCat's and the demo's put a newline
after the name and after each tag. The parsers strip both, and the grammar lets the model write
either (one optional newline at each of those places).

Both parsers keep a value as its text, stripped, when the tool's schema types the parameter
"string", and read any other value as JSON (else as a Python literal, else as the text). So a
"string" parameter is forced as raw text that begins and ends with no whitespace, any other as
JSON, and an enum value bare where the parser reads the bare text back as that value (the
templates write every string bare). Every name, key and enum text the grammar writes is first
read back by the family's own parser.

LongCat's parser also reads a call written as one JSON object, `{"name": ..., "arguments": {...}}`,
exactly as written: a LongCat call that may have no arguments (the tag form of one does not parse)
or whose parameters the tags cannot carry takes that form. GLM's parser converts the values of
such an object, so a GLM tool the tags cannot carry is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import (
    PartialCall,
    Tag,
    ToolFormat,
    ToolRefused,
    arguments_prefix,
    json_rule,
)
from mlxhost.worker.engine.tool_formats.json_tools import JsonTools
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters, rebase
from mlxhost.worker.engine.tool_formats.xml_values import (
    STRIPPED,
    Unforceable,
    guard_json,
    lark_literal,
    literals,
    parameters_of,
    resolve,
    same_value,
    standalone,
    text_terminal,
    types_of,
)

__all__ = ["FORMATS", "ArgKeys", "enum_values", "json_type", "listed_values"]

_ENUM_KEYWORDS: Final = frozenset({"type", "enum", "const", "title", "description", "default", "examples"})
_UNREAD: Final = object()  # the oracle's answer where the parser did not read the call


class ArgKeys(ToolFormat):
    """The name, then each argument as a key tag and a value tag (`prefix` names the tags)."""

    def __init__(self, parser: str, prefix: str, json_calls: bool) -> None:
        self.parser = parser
        self._key = (f"<{prefix}arg_key>", f"</{prefix}arg_key>")
        self._value = (f"<{prefix}arg_value>", f"</{prefix}arg_value>")
        # Whether the parser reads a call written as a JSON object as it is (LongCat's does).
        self._json_calls = json_calls

    @property
    def words(self) -> tuple[str, str]:
        """What a value cannot hold: its parser ends it at the first closing value tag, and the
        output parser ends the call at the first closing call tag."""
        return (self._value[1], self.call_end)

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """One alternative per tool: its name, then its parameters in the schema's order (each
        required one, and each optional one maybe), or, for LongCat, the call as a JSON object."""
        if not tools:
            raise GrammarError("no tools to call", param)
        rules = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            try:
                rules += self._tag_form(f"tool_{i}", tool.name, parameters, tag)
            except Unforceable as exc:
                if not self._json_calls:
                    raise ToolRefused(
                        f"tool '{tool.name}': {exc} ({self.parser} calls)", tools, i, param
                    ) from None
                try:
                    schema = guard_json(_call_schema(tool.name, parameters), (self.call_end,))
                except Unforceable as exc:
                    raise ToolRefused(f"tool '{tool.name}': {exc} (longcat calls)", tools, i, param) from None
                rules.append(f"tool_{i}: {json_rule(schema)}")
        alternatives = " | ".join(f"tool_{i}" for i in range(len(tools)))
        return "\n".join(
            [
                "start: call (NL? call)*" if parallel else "start: call",
                f"call: {tag(self.call_start)} ({alternatives}) {tag(self.call_end)}",
                # A newline after the name and after each tag pair, as GLM-4.5's and LongCat's
                # templates write them; GLM-4.7's writes none. The parsers strip both.
                'NL: "\\n"',
                *rules,
            ]
        )

    def _tag_form(self, rule: str, name: str, parameters: Mapping[str, Any], tag: Tag) -> list[str]:
        if self.call_end in name or not self._reads_back(name, "k"):
            raise Unforceable("its name does not read back")
        if not all(isinstance(p, Mapping) for p in (parameters.get("properties") or {}).values()):
            raise Unforceable("a parameter's schema is not an object")  # the parsers look into each
        arguments = parameters_of(
            parameters, lambda key: self.call_end not in key and self._reads_back(name, key)
        )
        if not any(required for _, _, required in arguments):  # a call with no arguments
            if self._json_calls:
                raise Unforceable("a call without arguments")  # LongCat reads no name alone
            if not self._reads_back(name):
                raise Unforceable("its name does not read back alone")
        rules, parts = [], [lark_literal(name), "NL?"]
        for j, (key, schema, required) in enumerate(arguments):
            try:
                value, lines = self._value_rule(f"{rule}_{j}", name, key, schema, parameters, tag)
            except Unforceable as exc:
                if required:
                    raise Unforceable(f"its parameter {key!r}: {exc}") from None
                continue  # an optional parameter that cannot be written is never written
            opening = f"{tag(self._key[0])} {lark_literal(key)} {tag(self._key[1])} NL? {tag(self._value[0])}"
            rules += [f"{rule}_{j}: {opening} {value} NL?", *lines]
            parts.append(f"{rule}_{j}" if required else f"{rule}_{j}?")
        return [f"{rule}: {' '.join(parts)}", *rules]

    def _reads_back(self, name: str, key: str | None = None) -> bool:
        """Whether the parser reads `name` (and `key`, with a value) back as written, in both
        layouts the grammar allows."""
        want = (name, {} if key is None else {key: 1})
        return all(self._read(name, key, {"type": "integer"}, "1", nl) == want for nl in ("", "\n"))

    def _value_rule(
        self, rule: str, name: str, key: str, schema: Mapping[str, Any], root: Mapping[str, Any], tag: Tag
    ) -> tuple[str, list[str]]:
        """A value of `schema` and the closing value tag (a rule body), and the rules it takes."""
        close = tag(self._value[1])
        lexeme = f"V{rule.upper()}"
        # A closing tag written as text goes into the value's terminal: llguidance's lexemes are
        # greedy, so free text followed by a lexeme "</tag>" would take its "<" and never end.
        if close.startswith('"'):
            expr, lines = lexeme, [f"{lexeme}: {lexeme}_TEXT {close}"]
        else:
            expr, lines = f"{lexeme} {close}", [f"{lexeme}: {lexeme}_TEXT"]

        def reads_back(text: str, value: Any) -> bool:
            read = self._read(name, key, schema, text)
            return read is not _UNREAD and same_value(read, (name, {key: value}))

        if schema.get("type") == "string":  # kept as text: the parser converts nothing
            body = text_terminal(schema, self.words, require=[STRIPPED])
            if (values := listed_values(schema)) is not None:
                if not (texts := literals([v for v in values if isinstance(v, str)], reads_back)):
                    raise Unforceable("none of its values reads back as itself")
                body = f"({' | '.join(texts)}) & {body}"
            return expr, [f"{lexeme}_TEXT: {body}", *lines]
        if (values := enum_values(resolve(schema, root))) is not None:
            texts = [
                t for t in literals(values, reads_back) if not any(w in json.loads(t) for w in self.words)
            ]
            if not texts:
                raise Unforceable("none of its values reads back as itself")
            return expr, [f"{lexeme}_TEXT: {' | '.join(texts)}", *lines]
        return f"json_{rule} {close}", [
            f"json_{rule}: {json_rule(guard_json(standalone(schema, root), self.words))}"
        ]

    def _read(
        self, name: str, key: str | None = None, schema: Any = None, text: str = "", layout: str = ""
    ) -> Any:
        """(name, arguments) as the family's parser reads a call of `name` with, when `key` is
        given, one argument of `schema` written as `text`, `layout` after the name and each tag
        pair; _UNREAD where it fails."""
        body, parameters = name + layout, {}
        if key is not None:
            body += f"{self._key[0]}{key}{self._key[1]}{layout}{self._value[0]}{text}{self._value[1]}{layout}"
            parameters = {"type": "object", "properties": {key: schema}}
        try:
            calls = self.parse(
                body, [{"type": "function", "function": {"name": name, "parameters": parameters}}]
            )
            return (calls[0]["name"], calls[0]["arguments"]) if len(calls) == 1 else _UNREAD
        except Exception:  # each parser fails in its own way on what it cannot read
            return _UNREAD

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        # The name is whole once the first key tag began; the arguments are those whose value
        # tag closed, read by the family's own parser (so with the final call's conversions).
        if self._json_calls and body.lstrip().startswith("{"):
            return JsonTools().partial(body, tools)
        at = body.find(self._key[0])
        if at < 0:
            return []
        name = body[:at].strip()
        end = body.rfind(self._value[1])
        if end < at:
            return [PartialCall(name, "{")]
        try:
            calls = self.parse(body[: end + len(self._value[1])], tools)
        except Exception:  # a body its parser cannot read yet streams whole at its end
            return [PartialCall(name)]
        arguments = calls[0].get("arguments") if len(calls) == 1 and isinstance(calls[0], dict) else None
        return [PartialCall(name, arguments_prefix(arguments) if isinstance(arguments, dict) else "")]


def listed_values(schema: Mapping[str, Any]) -> list[Any] | None:
    """The values a schema's `enum` and `const` allow (those in both); None when it has neither."""
    if "enum" not in schema and "const" not in schema:
        return None
    values = schema["enum"] if "enum" in schema else [schema["const"]]
    if not isinstance(values, list):
        raise Unforceable("its enum is not a list")
    return [v for v in values if "const" not in schema or same_value(v, schema["const"])]


def enum_values(schema: Mapping[str, Any]) -> list[Any] | None:
    """The values of a schema that is an enum or a const beside at most a type and annotations,
    each of that type; None for any other schema (whose values llguidance's JSON enforces)."""
    if (values := listed_values(schema)) is None or set(schema) - _ENUM_KEYWORDS:
        return None
    kinds = types_of(schema)
    return [v for v in values if json_type(v) in kinds or (json_type(v) == "integer" and "number" in kinds)]


def json_type(value: Any) -> str:
    """The JSON type of a value, "integer" for a whole number."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    kinds = {float: "number", str: "string", list: "array", dict: "object", type(None): "null"}
    return kinds.get(type(value), "")


def _call_schema(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A whole call as one JSON object (LongCat's other form), the name first."""
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": rebase(parameters, "#/properties/arguments")},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


FORMATS: Final = {
    "glm47": ArgKeys("glm47", "", json_calls=False),
    # Laguna's parser is GLM's (mlx_lm.tool_parsers.laguna re-exports it), under its own name.
    "laguna": ArgKeys("laguna", "", json_calls=False),
    "longcat": ArgKeys("longcat", "longcat_", json_calls=True),
}
