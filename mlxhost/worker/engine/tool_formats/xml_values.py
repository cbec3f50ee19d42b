"""Argument values written inside XML-like elements: the schema side of forcing them.

The XML families (qwen3_coder, minimax_m2, minicpm5, muse_spark) write each argument as the text of
an element and convert it by their own rules (a string as it is, other types as JSON, "null" as
None…). Each family decides which form a parameter's value takes; this module and xml_text.py (raw
text, and the regexes that force it; re-exported here) build the forms:

- `tools_rules`, `arguments_rules`: each tool's call and its arguments as Lark rules (an optional
  argument no form carries left out, a required one refusing its tool);
- `parameters_of`: the arguments a call may write, and what of the whole object is refused;
- `guard_json`: a JSON schema whose strings (and keys) are kept from holding the words that would
  end the element early, for a value written as JSON inside it;
- `literals`: a parameter's finite set of values (enum, const), each checked by the family's own
  parser to read back as itself;
- `bounded`: numbers kept within what a float conversion reads back exactly;
- `resolve`, `standalone`: a parameter's schema out of the tool's, its references kept.

Hand-written because no library builds these: llguidance takes the pieces, and mlx-lm's parsers
are the judges of what each text reads as. A schema the forms cannot carry soundly raises
`Unforceable`, which the family turns into a ToolRefused naming the tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import ToolRefused
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters
from mlxhost.worker.engine.tool_formats.xml_text import (
    ANY_TEXT,
    PY_SPACE,
    STRIPPED,
    Unforceable,
    ValueRules,
    avoiding,
    ecma_regex,
    lark_literal,
    regex_escape,
    text_terminal,
)

__all__ = [
    "ANY_TEXT",
    "INTEGER_LIMIT",
    "JSON_TYPES",
    "NUMBER_LIMIT",
    "PY_SPACE",
    "STRIPPED",
    "Unforceable",
    "ValueRules",
    "arguments_rules",
    "avoiding",
    "bounded",
    "disjoint",
    "ecma_regex",
    "guard_json",
    "json_type",
    "lark_literal",
    "literals",
    "parameters_of",
    "regex_escape",
    "resolve",
    "same_value",
    "standalone",
    "text_terminal",
    "tools_rules",
    "types_of",
]

JSON_TYPES: Final = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})
# A number read through float() or json.loads: past 1e15 its digits are lost, and an exponent may
# overflow to inf (llguidance's own bounded numbers have no exponent).
NUMBER_LIMIT: Final = 1e15
INTEGER_LIMIT: Final = 2**53  # an integer read through float()


def tools_rules(
    tools: Sequence[ToolSpec],
    param: str,
    family: str,
    call: Callable[[str, str, Mapping[str, Any]], list[str]],
) -> list[str]:
    """The rules of each tool's call, `c<i>`, by `call(rule, name, parameters)`; a tool it cannot
    force is refused, named, with the family's syntax (`family`) in the message."""
    if not tools:
        raise GrammarError("no tools to call", param)
    rules: list[str] = []
    for i, tool in enumerate(tools):
        parameters = checked_parameters(tools, i, param)
        try:
            rules += call(f"c{i}", tool.name, parameters)
        except Unforceable as exc:
            raise ToolRefused(f"tool '{tool.name}': {exc} ({family})", tools, i, param) from None
    return rules


def arguments_rules(
    rule: str,
    parameters: Mapping[str, Any],
    fits: Callable[[str], bool],
    value: Callable[[str, str, Any], list[str]],
    opening: Callable[[str], str],
) -> tuple[list[str], list[str]]:
    """A call's arguments in schema order, each `opening(key)` then the value rule `value(name,
    key, schema)` defines (its close included): the parts to write in order (an optional one
    marked "?") and the rules they need. An optional argument no form carries is never written."""
    parts: list[str] = []
    rules: list[str] = []
    for j, (key, schema, required) in enumerate(parameters_of(parameters, fits)):
        name = f"{rule}_{j}"
        try:
            rules += value(f"v{name}", key, schema)
        except Unforceable as exc:
            if required:
                raise Unforceable(f"its parameter {key!r}: {exc}") from None
            continue
        rules.append(f"{name}: {lark_literal(opening(key))} v{name}")
        parts.append(name if required else f"{name}?")
    return parts, rules


def parameters_of(parameters: Mapping[str, Any], fits: Callable[[str], bool]) -> list[tuple[str, Any, bool]]:
    """The arguments a call may write, in schema order: (name, schema, required). A call writes
    declared properties only (an undeclared one would read back as a string); an optional one whose
    name the syntax cannot hold (`fits` says) is left out; keywords on the whole object that an
    element per argument cannot keep to are refused."""
    if types_of(parameters) - {"object"} and "type" in parameters:
        raise Unforceable("its parameters are not an object")
    unsupported = sorted(set(parameters) & _OBJECT_CONSTRAINTS)
    if unsupported:
        raise Unforceable(f"its parameters' {', '.join(unsupported)} cannot be kept to")
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        raise Unforceable("its properties must be an object and required a list")
    missing = [name for name in required if name not in properties]
    if missing:
        raise Unforceable(f"it requires {missing[0]!r} but does not declare it")
    out = []
    for name, schema in properties.items():
        needed = name in required
        if schema is False or not fits(name):
            if needed:
                raise Unforceable(f"its parameter {name!r} cannot be written in this syntax")
            continue
        out.append((name, schema, needed))
    return out


# Keywords on the parameters object that constrain which arguments appear together.
_OBJECT_CONSTRAINTS: Final = frozenset(
    "allOf anyOf oneOf not if then else $ref enum const minProperties maxProperties dependentRequired "
    "dependentSchemas patternProperties propertyNames".split()
)


def types_of(schema: Mapping[str, Any]) -> frozenset[str]:
    """The JSON types a schema's own `type` keyword allows (every type when it has none)."""
    kind = schema.get("type")
    if kind is None:
        return JSON_TYPES
    kinds = [kind] if isinstance(kind, str) else kind
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in JSON_TYPES for k in kinds):
        raise Unforceable(f"'type' {json.dumps(kind)} is not a JSON schema type")
    return frozenset(kinds)


def resolve(schema: Any, root: Mapping[str, Any]) -> Mapping[str, Any]:
    """`schema` with a bare local `$ref` followed (within `root`, the tool's parameters); a `$ref`
    beside other constraining keywords is not followed (the caller then refuses it)."""
    seen = set()
    while isinstance(schema, Mapping) and isinstance(ref := schema.get("$ref"), str):
        if set(schema) - _ANNOTATIONS - {"$ref"} or ref in seen or not ref.startswith("#"):
            break
        seen.add(ref)
        target: Any = root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            raise Unforceable(f"the reference {ref!r} leads nowhere")
        schema = target
    if schema is True or schema == {}:
        return {}
    if not isinstance(schema, Mapping):
        raise Unforceable("a parameter's schema must be a JSON object")
    return schema


_ANNOTATIONS: Final = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)


def standalone(schema: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` taken out of the tool's parameters `root`, carrying the definitions its references
    use; a reference to anywhere else in `root` would lose its target, so it is refused."""
    for ref in _refs(schema) | _refs({k: v for k, v in root.items() if k in ("$defs", "definitions")}):
        if ref != "#" and not ref.startswith(("#/$defs/", "#/definitions/")):
            raise Unforceable(f"the reference {ref!r} points outside the schema's definitions")
        if ref == "#":
            raise Unforceable("a reference to the whole parameters cannot be carried into one value")
    out = dict(schema)
    for key in ("$defs", "definitions"):
        if isinstance(root.get(key), Mapping) and key not in out:
            out[key] = root[key]
    return out


def _refs(value: Any) -> set[str]:
    if isinstance(value, Mapping):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        for item in value.values():
            found |= _refs(item)
        return found
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def guard_json(schema: Any, words: Sequence[str]) -> Any:
    """`schema` with every string it allows, values and object keys, kept from holding `words`
    (the closing tags that would end the element a JSON value is written in).

    A string gains a pattern (beside its own, in an allOf: llguidance intersects them). An object
    that may hold keys it does not declare takes them only by a pattern that avoids the words, or,
    when it also declares properties, takes no others (a pattern would also reach the declared
    ones): a narrower grammar, never an unsound one. Values the schema leaves free become a guarded
    "any JSON value", defined once in the result's $defs."""
    guard = _Guard(words)
    out = guard.schema(schema)
    if guard.any_used:
        out = {"anyOf": [out]} if not isinstance(out, Mapping) else dict(out)
        out["$defs"] = {**out.get("$defs", {}), _ANY: guard.free()}
    return out


_ANY: Final = "xml-any-value"


class _Guard:
    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.safe = "^" + avoiding(words) + "$"
        self.any_used = False

    def free(self) -> dict[str, Any]:
        """Any JSON value, its strings and keys guarded."""
        ref = {"$ref": f"#/$defs/{_ANY}"}
        return {
            "pattern": self.safe,
            "items": ref,
            "patternProperties": {self.safe: ref},
            "additionalProperties": False,
        }

    def schema(self, schema: Any) -> Any:
        if schema is True or (isinstance(schema, Mapping) and not set(schema) - _ANNOTATIONS):
            self.any_used = True
            return {"$ref": f"#/$defs/{_ANY}"}
        if not isinstance(schema, Mapping):
            return schema
        if any(k in schema for k in ("not", "if", "then", "else", "patternProperties", "propertyNames")):
            raise Unforceable("a JSON value under 'not', 'if' or 'patternProperties' cannot be guarded")
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "dependentSchemas") and isinstance(
                value, Mapping
            ):
                out[key] = {k: self.schema(v) for k, v in value.items()}
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
                out[key] = [self.schema(v) for v in value]
            elif key in ("items", "additionalProperties", "contains", "additionalItems", "unevaluatedItems"):
                out[key] = self.schema(value)
            else:
                out[key] = value
        words = ", ".join(self.words)
        for key in ("enum", "const"):
            values = out.get(key, []) if key == "enum" else [out.get(key)]
            if key in out and any(any(w in s for w in self.words) for s in _strings(values)):
                raise Unforceable(f"a value of its '{key}' holds one of {words}")
        if "enum" in out or "const" in out:
            return out
        if any(k in out for k in ("anyOf", "oneOf", "allOf", "$ref")):
            return out  # a value meets a guarded branch or target: guards beside them would only clash
        kinds = types_of(out)
        if "number" in kinds:
            out = bounded(out, NUMBER_LIMIT)  # json.loads reads a larger exponent as inf
        if isinstance(out.get("pattern"), str):
            out["pattern"] = ecma_regex(out["pattern"])  # llguidance reads patterns as Rust's
        if "string" in kinds:
            if "pattern" in out:
                out["allOf"] = [*out.get("allOf", []), {"pattern": self.safe}]
            else:
                out["pattern"] = self.safe
        if "array" in kinds and out.get("items", True) is True:
            out["items"] = self.schema(True)
        if "object" in kinds and out.get("additionalProperties", True) is not False:
            names = out.get("properties") or {}
            if any(w in name for name in names for w in self.words):
                raise Unforceable(f"a property's name holds one of {words}")
            if names:
                out["additionalProperties"] = False
            else:
                extra = out.pop("additionalProperties", True)
                out["patternProperties"] = {self.safe: extra if extra is not True else self.schema(True)}
                out["additionalProperties"] = False
        return out


def _strings(values: Iterable[Any]) -> Iterable[str]:
    for value in values:
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            yield from value.keys()
            yield from _strings(value.values())
        elif isinstance(value, list):
            yield from _strings(value)


def bounded(schema: Mapping[str, Any], limit: float) -> dict[str, Any]:
    """`schema` (an integer or a number) with its bounds kept within ±`limit`: the families read
    numbers through float(), where a larger one loses digits or overflows (int(inf) raises)."""
    out = dict(schema)
    low = [out.get("minimum"), out.get("exclusiveMinimum")]
    high = [out.get("maximum"), out.get("exclusiveMaximum")]
    numbers = [b for b in (*low, *high) if b is not None]
    if any(isinstance(b, bool) or not isinstance(b, (int, float)) for b in numbers):
        raise Unforceable("a bound that is not a number")
    if any(b is not None and b > limit for b in low) or any(b is not None and b < -limit for b in high):
        raise Unforceable(f"numbers beyond ±{limit:g} cannot be written exactly")
    for key, sign in (("minimum", -1), ("maximum", 1)):
        exclusive = "exclusiveM" + key[1:]
        if exclusive in out and abs(out[exclusive]) > limit:
            del out[exclusive]
        if key not in out or abs(out[key]) > limit:
            out[key] = sign * limit
    return out


def literals(values: Sequence[Any], reads_back: Callable[[str, Any], bool]) -> list[str]:
    """The texts (each a Lark literal) of `values` that the family's parser reads back as the
    value itself: a string as it is or as JSON, anything else as JSON."""
    out = []
    for value in values:
        forms = [value] if isinstance(value, str) else []
        forms.append(json.dumps(value, ensure_ascii=False))
        for text in forms:
            if reads_back(text, value):
                out.append(lark_literal(text))
                break
    return out


def same_value(a: Any, b: Any) -> bool:
    """Equal as JSON values are (True is not 1; 1.0 is 1), for checking what a text reads back as."""
    return json.dumps(_canonical(a), sort_keys=True) == json.dumps(_canonical(b), sort_keys=True)


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def json_type(value: Any) -> str:
    """The JSON type of a value (a float with no fraction is an integer, as JSON schema has it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "?")


def disjoint(kinds: Sequence[frozenset[str]]) -> bool:
    """Whether no value has two of these sets of types (oneOf branches that read as anyOf's)."""
    seen: set[str] = set()
    for k in kinds:
        k = k | {"number"} if "integer" in k else k | {"integer"} if "number" in k else k
        if seen & k:
            return False
        seen |= k
    return True
