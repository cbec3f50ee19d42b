"""A tool's parameters in a family's own key/value notation, as Lark: the part of JSON Schema that
such a notation can force soundly.

Gemma 4, FunctionGemma and LFM2 do not write a call's arguments as one JSON object but as
`key:value` (or `key=value`) pairs, and the Gemmas write values in their own notation: strings raw
between a delimiter (`<|"|>`, `<escape>`), bare keys, no escapes. llguidance's `%json` cannot write
that, so `Values` compiles the schema itself, for the keywords whose meaning it can enforce (types,
string lengths, enums and consts, numeric bounds through `%json`, array lengths, object properties,
`anyOf`, local `$ref`s). Whatever else would constrain a value raises `Unwritable`, which the family
turns into a `ToolRefused` naming the tool: a keyword is never skipped. Keywords JSON Schema does
not define are annotations to a validator, and are ignored here too.

Objects are written with their declared properties only (required ones always, optional ones
maybe): sound whatever `additionalProperties` says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

from mlxhost.worker.engine.tool_formats import Tag, json_rule

__all__ = ["Notation", "Unwritable", "Values", "constraints", "members_rule", "object_members"]


class Unwritable(ValueError):
    """A part of a schema the notation cannot force soundly; the message says which and why, and
    `path` names the property it is in (outermost first)."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def within(self, name: str) -> Unwritable:
        """The same refusal, seen from the object holding property `name`."""
        return Unwritable(self.message, (name, *self.path))

    def __str__(self) -> str:
        return f"parameter '{'.'.join(self.path)}': {self.message}" if self.path else self.message


# Keywords that constrain a value of the given type (JSON Schema 2020-12 and the drafts before it).
_STRING: Final = frozenset({"minLength", "maxLength", "pattern", "format"})
_NUMBER: Final = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_ARRAY: Final = frozenset(
    {"items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains"}
    | {"minItems", "maxItems", "uniqueItems", "unevaluatedItems"}
)
_OBJECT: Final = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties", "propertyNames"}
    | {"minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies"}
    | {"unevaluatedProperties"}
)
_ANY: Final = frozenset(
    {"type", "enum", "const", "$ref", "anyOf", "allOf", "oneOf", "not", "if", "then", "else"}
    | {"$dynamicRef", "$recursiveRef"}
)
_ASSERTIONS: Final = _STRING | _NUMBER | _ARRAY | _OBJECT | _ANY
# Those this module never enforces, whatever the type.
_NEVER: Final = frozenset(
    {"allOf", "oneOf", "not", "if", "then", "else", "$dynamicRef", "$recursiveRef", "pattern", "format"}
    | {"prefixItems", "additionalItems", "contains", "minContains", "maxContains", "unevaluatedItems"}
    | {"patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies"}
)
_TYPES: Final = ("string", "integer", "number", "boolean", "null", "array", "object")
_BY_TYPE: Final = {
    "string": _STRING,
    "integer": _NUMBER,
    "number": _NUMBER,
    "array": _ARRAY,
    "object": _OBJECT,
}
_CANNOT: Final = "cannot be enforced in this model's call syntax"
# A JSON number that is a finite float: llguidance's own may be 1e999, which Python reads as inf
# (no JSON), and cannot bound a float range that wide. Up to 200 digits times 10^99 stays finite.
_FINITE: Final = r"/-?(0|[1-9][0-9]{0,199})(\.[0-9]+)?([eE][+-]?[0-9]{1,2})?/"
# A key the Gemmas' parsers read back bare: mlx-lm quotes `\w+` keys (ASCII here, the subset on
# which Python's `re` and `regex` agree).
WORD_KEY: Final = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Notation:
    """How a family writes values other than JSON's numbers, booleans and null."""

    delimiter: str  # a string's two ends, e.g. '<|"|>'; a string holds it never
    nested: bool  # arrays and objects may be values (else: scalars only)
    key_ok: Callable[[str], bool]  # a property name it can write as a key
    sort_keys: bool  # keys in Jinja's `dictsort` order (case-insensitive), as the templates write them
    excluded: tuple[str, ...] = ()  # what else a string may not hold (FunctionGemma's `}`)


def constraints(schema: Mapping[str, Any]) -> frozenset[str]:
    """The keywords of `schema` that constrain a value (JSON Schema's; others are annotations)."""
    return frozenset(schema) & _ASSERTIONS


def _regex_literal(text: str) -> str:
    """`text` as a Rust regex matching it literally (hex escapes: safe inside Lark's /.../)."""
    return "".join(c if c.isalnum() else f"\\x{{{ord(c):X}}}" for c in text)


def object_members(schema: Mapping[str, Any], key_ok: Callable[[str], bool]) -> list[tuple[str, Any, bool]]:
    """The properties an object of `schema` is written with, (name, schema, required), in the
    schema's order. Raises Unwritable for an object the notation cannot force."""
    kind = schema.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise Unwritable(f"its arguments must be an object, but the schema's type is {json.dumps(kind)}")
    refused = sorted(k for k in schema if k in (_ANY - {"type"}) | (_NEVER & _OBJECT))
    if refused:
        raise Unwritable(f"'{refused[0]}' on an object {_CANNOT}")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise Unwritable("'properties' must be an object and 'required' a list")
    for name in required:
        if name not in properties:
            raise Unwritable(f"required property '{name}' has no schema under 'properties'")
    members = []
    for name, sub in properties.items():
        if sub is False:
            if name in required:
                raise Unwritable(f"required property '{name}' allows no value")
            continue
        if not key_ok(name):
            raise Unwritable(f"property name '{name}' cannot be written as a key in this model's call syntax")
        members.append((name, sub, name in required))
    if schema.get("minProperties", 0) > len([m for m in members if m[2]]):
        raise Unwritable("'minProperties' above the required properties cannot be enforced")
    if schema.get("maxProperties", len(members)) < len(members):
        raise Unwritable("'maxProperties' below the number of properties cannot be enforced")
    return members


def members_rule(rules: list[str], name: str, pairs: Sequence[tuple[str, str, bool]], separator: str) -> str:
    """Lark for the members of one object, in `pairs`' order, each (its key as a Lark literal,
    its value as a Lark expression, required): required ones always, optional ones maybe, with
    `separator` (a Lark literal) between two. Adds its rules to `rules`, named from `name`;
    returns an expression ("" when the object can only be empty)."""
    # rest[i][after]: the members from i on, `after` one was written (so a separator comes first).
    rest: list[list[str]] = [["", ""] for _ in range(len(pairs) + 1)]
    for i in range(len(pairs) - 1, -1, -1):
        key, value, required = pairs[i]
        for after in (0, 1):
            written = " ".join(p for p in (separator if after else "", key, value, rest[i + 1][1]) if p)
            skipped = rest[i + 1][after]
            body = written if required else f"({written})?" if not skipped else f"{written} | {skipped}"
            rest[i][after] = f"{name}_{i}_{after}"
            rules.append(f"{rest[i][after]}: {body}")
    return rest[0][0]


class Values:
    """The rules for values of one tool's parameters (`root`, against which `$ref`s resolve) in
    `notation`; rule names start with `prefix` (lowercase)."""

    def __init__(self, root: Mapping[str, Any], notation: Notation, tag: Tag, prefix: str) -> None:
        self.root = root
        self.notation = notation
        self.tag = tag
        self.prefix = prefix
        self.rules: list[str] = []
        self._count = 0
        self._refs: dict[str, str] = {}
        self._strings: dict[tuple[int, int | None], str] = {}
        self._any: str | None = None

    def arguments(self, separator: str) -> str:
        """The top level's members (`key:value`), an expression ("" for none)."""
        members = object_members(self.root, self.notation.key_ok)
        return self._members(members, separator, ":")

    def value(self, schema: Any) -> str:
        """A Lark expression for one value of `schema`."""
        if schema is True or schema == {}:
            return self._any_value()
        if not isinstance(schema, Mapping):
            raise Unwritable("a schema that allows no value (false) cannot be forced")
        if "$ref" in schema:
            self._alone(schema, "$ref")
            return self._ref(schema["$ref"])
        if "anyOf" in schema:
            self._alone(schema, "anyOf")
            branches = schema["anyOf"]
            if not isinstance(branches, list) or not branches:
                raise Unwritable("'anyOf' must be a non-empty list")
            return self._rule(" | ".join(self.value(b) for b in branches))
        refused = sorted(k for k in schema if k in _NEVER & _ANY)
        if refused:
            raise Unwritable(f"'{refused[0]}' {_CANNOT}")
        if not set(schema) & _ASSERTIONS:
            return self._any_value()
        types = self._types(schema)
        if "const" in schema or "enum" in schema:
            return self._enum(schema, types)
        if "number" in types and "integer" in types:
            types.remove("integer")  # every integer is a number: one branch, no ambiguity
        if len(types) == 1:
            return self._typed(types[0], schema)
        return self._rule(" | ".join(self._typed(t, schema) for t in types))

    def _typed(self, kind: str, schema: Mapping[str, Any]) -> str:
        refused = sorted(k for k in schema if k in _NEVER & _BY_TYPE.get(kind, frozenset()))
        if refused:
            raise Unwritable(f"'{refused[0]}' on a value of type {kind} {_CANNOT}")
        if kind == "string":
            return self._string(schema.get("minLength", 0), schema.get("maxLength"))
        if kind == "number" and not set(schema) & _NUMBER:
            return _FINITE
        if kind in ("integer", "number"):
            return self._rule(json_rule({"type": kind, **{k: schema[k] for k in _NUMBER if k in schema}}))
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"null"'
        if not self.notation.nested:
            raise Unwritable(
                f"an {kind} cannot be a value in this model's call syntax (flat key:value pairs only)"
            )
        if kind == "array":
            return self._array(schema)
        return self._object(schema)

    def _array(self, schema: Mapping[str, Any]) -> str:
        if schema.get("uniqueItems") is True:
            raise Unwritable(f"an array's 'uniqueItems' {_CANNOT}")
        items = schema.get("items", True)
        if isinstance(items, list):
            raise Unwritable(f"a list of 'items' schemas {_CANNOT}")
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        item = self.value(items) if high != 0 else ""
        more = f'("," {item}){{{max(low - 1, 0)},{"" if high is None else high - 1}}}'
        full = f'"[" {item} {more} "]"'
        return self._rule(full if low > 0 else f'"[" "]" | {full}' if item else '"[" "]"')

    def _object(self, schema: Mapping[str, Any]) -> str:
        extra = schema.get("additionalProperties", True)
        if not schema.get("properties") and extra is not False and "unevaluatedProperties" not in schema:
            # A free-form object: keys of the model's own (bare words, as long as any real one),
            # each value of `additionalProperties`; a key written twice counts once, so only an
            # upper bound on their number holds.
            object_members({k: v for k, v in schema.items() if k != "maxProperties"}, WORD_KEY.fullmatch)
            high = schema.get("maxProperties")
            if high == 0:
                return '"{" "}"'
            member = self._rule(f'/[A-Za-z0-9_]{{1,64}}/ ":" {self.value(extra)}')
            more = f'("," {member}){{0,{"" if high is None else high - 1}}}'
            return self._rule(f'"{{" "}}" | "{{" {member} {more} "}}"')
        members = self._members(object_members(schema, self.notation.key_ok), '","', ":")
        return self._rule(f'"{{" {members} "}}"' if members else '"{" "}"')

    def _members(self, members: list[tuple[str, Any, bool]], separator: str, between: str) -> str:
        if self.notation.sort_keys:
            members = sorted(members, key=lambda m: m[0].lower())  # Jinja's dictsort
        pairs = []
        for key, sub, required in members:
            try:
                pairs.append((json.dumps(key + between, ensure_ascii=False), self.value(sub), required))
            except Unwritable as exc:
                raise exc.within(key) from None
        name = self._name()
        return members_rule(self.rules, name, pairs, separator)

    def _enum(self, schema: Mapping[str, Any], types: list[str]) -> str:
        others = sorted(k for k in schema if k in _ASSERTIONS - {"type", "enum", "const"})
        if others:
            raise Unwritable(f"'{others[0]}' beside an enum or const {_CANNOT}")
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise Unwritable("'enum' must be a list")
        literals = [self.literal(v) for v in values if _has_type(v, types)]
        kept = [lit for lit in literals if lit is not None]
        if not kept:
            raise Unwritable("no value of the enum or const can be written in this model's call syntax")
        return self._rule(" | ".join(dict.fromkeys(kept)))

    def literal(self, value: Any) -> str | None:
        """`value` as a Lark sequence of literals, or None if the notation cannot write it."""
        if isinstance(value, str):
            if self._bad_text(value):
                return None
            quote = self.tag(self.notation.delimiter)
            return f"{quote} {json.dumps(value, ensure_ascii=False)} {quote}" if value else f"{quote} {quote}"
        if value is None or isinstance(value, (bool, int, float)):
            return json.dumps(json.dumps(value))
        if not self.notation.nested:
            return None
        if isinstance(value, list):
            items = [self.literal(v) for v in value]
            if any(i is None for i in items):
                return None
            return " ".join(['"["', ' "," '.join(i for i in items if i), '"]"'])
        if isinstance(value, dict):
            keys = sorted(value, key=str.lower) if self.notation.sort_keys else list(value)
            if not all(isinstance(k, str) and WORD_KEY.fullmatch(k) for k in keys):
                return None
            items = [self.literal(value[k]) for k in keys]
            if any(i is None for i in items):
                return None
            pairs = [f"{json.dumps(k + ':')} {i}" for k, i in zip(keys, items, strict=True)]
            return " ".join(['"{"', ' "," '.join(pairs), '"}"'])
        return None

    def _bad_text(self, text: str) -> bool:
        return any(bad in text for bad in (self.notation.delimiter, *self.notation.excluded))

    def _string(self, low: int, high: int | None) -> str:
        key = (low, high)
        quote = self.tag(self.notation.delimiter)
        if high == 0:
            return f"{quote} {quote}"
        if key not in self._strings:
            name = self._name().upper()
            bad = "|".join(_regex_literal(s) for s in (self.notation.delimiter, *self.notation.excluded))
            # Between two special tokens, an empty text is no lexeme at all: one character or more.
            special = quote.startswith("<[")
            least = max(low, 1) if special else low
            upto = "" if high is None else high
            self.rules.append(f"{name}: /(?s:.{{{least},{upto}}})/ & ~/(?s:.*)({bad})(?s:.*)/")
            if special:
                self._strings[key] = self._rule(f"{quote} {name}{'' if low else '?'} {quote}")
            else:
                # One lexeme from delimiter to delimiter: no text the lexer must look past.
                self.rules.append(f"{name}_Q: {quote} {name} {quote}")
                self._strings[key] = f"{name}_Q"
        return self._strings[key]

    def _any_value(self) -> str:
        if self._any is None:
            self._any = self._name()
            scalars = [self._string(0, None), _FINITE, '"true"', '"false"', '"null"']
            if self.notation.nested:
                scalars += [f'"[" "]" | "[" {self._any} ("," {self._any})* "]"']
                member = f'/[A-Za-z0-9_]{{1,64}}/ ":" {self._any}'
                scalars += [f'"{{" "}}" | "{{" {member} ("," {member})* "}}"']
            self.rules.append(f"{self._any}: {' | '.join(scalars)}")
        return self._any

    def _ref(self, ref: Any) -> str:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            raise Unwritable(f"'$ref' {json.dumps(ref)} is not a reference within the schema")
        if ref not in self._refs:
            target: Any = self.root
            for part in ref[2:].split("/") if ref != "#" else []:
                part = unquote(part).replace("~1", "/").replace("~0", "~")
                if isinstance(target, Mapping) and part in target:
                    target = target[part]
                elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target = target[int(part)]
                else:
                    raise Unwritable(f"'$ref' {json.dumps(ref)} points at nothing in the schema")
            name = self._refs[ref] = self._name()  # before the target: it may refer to itself
            self.rules.append(f"{name}: {self.value(target)}")
        return self._refs[ref]

    def _types(self, schema: Mapping[str, Any]) -> list[str]:
        kind = schema.get("type")
        if kind is None:
            # No type: the kinds its keywords are about (an object for "properties"), or any.
            found = [t for t in _TYPES if t in _BY_TYPE and _BY_TYPE[t] & set(schema) and t != "integer"]
            types = found or list(_TYPES)
        else:
            types = [kind] if isinstance(kind, str) else list(kind) if isinstance(kind, list) else []
        if not types or any(t not in _TYPES for t in types):
            raise Unwritable(f"'type' {json.dumps(kind)} is not a JSON Schema type")
        return types

    @staticmethod
    def _alone(schema: Mapping[str, Any], keyword: str) -> None:
        others = sorted(k for k in schema if k in _ASSERTIONS and k != keyword)
        if others:
            raise Unwritable(f"'{others[0]}' beside '{keyword}' {_CANNOT}")

    def _name(self) -> str:
        self._count += 1
        return f"{self.prefix}_{self._count}"

    def _rule(self, body: str) -> str:
        name = self._name()
        self.rules.append(f"{name}: {body}")
        return name


def _has_type(value: Any, types: list[str]) -> bool:
    if isinstance(value, bool):
        return "boolean" in types
    if isinstance(value, (int, float)):
        return "number" in types or ("integer" in types and (isinstance(value, int) or value.is_integer()))
    kinds = {str: "string", type(None): "null", list: "array", dict: "object"}
    return kinds.get(type(value)) in types
