"""Calls as <invoke> elements in a <minimax:tool_call> section (MiniMax-M2): mlx-lm's minimax_m2.

<minimax:tool_call>
<invoke name="get_weather">
<parameter name="city">Paris</parameter>
<parameter name="days">3</parameter>
</invoke>
</minimax:tool_call>

A section holds one call or several. The parser strips the space around a value and converts it
by the types it finds in the parameter's schema (its `type`, its enum's values, its anyOf, oneOf
and allOf; "string" when none, a `$ref` unfollowed), trying integer, number, boolean, object or
array (as JSON), then string, in that order; "null" (any case) is None. `MinimaxValues` chooses the
forms a value is written in so that this reads it back valid; MiniCPM5's parser converts the same
way and uses it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, Tag, ToolFormat, arguments_prefix
from mlxhost.worker.engine.tool_formats.xml_values import (
    INTEGER_LIMIT,
    JSON_TYPES,
    NUMBER_LIMIT,
    STRIPPED,
    Unforceable,
    ValueRules,
    arguments_rules,
    bounded,
    disjoint,
    guard_json,
    json_type,
    lark_literal,
    literals,
    resolve,
    same_value,
    standalone,
    text_terminal,
    tools_rules,
    types_of,
)

__all__ = ["FORMATS", "Minimax", "MinimaxValues", "Text", "reading_types", "write"]

# The texts each conversion would take, whole (the value is already stripped).
NULLS: Final = {False: r"(?i:null)", True: r"(?i:null|none|nil)"}
INTEGERS: Final = r"[+\-]?[\d_]+"
NUMBERS: Final = r"[+\-]?(?:[\d_]*\.?[\d_]*(?:[eE][+\-]?[\d_]+)?|(?i:inf|infinity|nan))"
BOOLEANS: Final = r"(?i:true|1|yes|on|false|0|no|off)"
NOT_NUMBER: Final = r"(?:[^\-0-9](?s:.*))?"
# What json.loads or ast.literal_eval might read: a raw string beside an object or an array is kept
# to an ASCII letter first, no quote after a leading word, and no constant of either language.
WORD_FIRST: Final = r"[A-Za-z](?s:.*)"
LITERAL_LIKE: Final = (
    r"[A-Za-z0-9_]*['\"](?s:.*)|(?:True|False|None|true|false|null|NaN|Infinity)(?:[^A-Za-z0-9_](?s:.*))?"
)
_ENUM_KEYS: Final = frozenset({"type", "enum", "const", "title", "description", "default", "examples"})
_COMBINATORS: Final = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref"})
# How the parser names an enum value's type (a float is a "number", whatever its fraction).
_ENUM_TYPES: Final = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def reading_types(schema: Any) -> frozenset[str]:
    """The types mlx-lm's minimax_m2 finds in a parameter's schema, lowercased, as it converts by."""
    if not isinstance(schema, Mapping):
        return frozenset({"string"})
    kind = schema.get("type")
    types = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
    if isinstance(schema.get("enum"), list):
        types |= {_ENUM_TYPES.get(type(v), "") for v in schema["enum"]}
    for key in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(key) if isinstance(schema.get(key), list) else []:
            types |= reading_types(branch)
    return frozenset(t.lower() for t in types if isinstance(t, str)) or frozenset({"string"})


class Text:
    """A raw text form: the string keywords of `schema`, with whole-text `exclude` and `require`
    regexes (what the conversion would read as another type)."""

    def __init__(self, schema: Mapping[str, Any], exclude: list[str], require: list[str]) -> None:
        self.schema, self.exclude, self.require = schema, exclude, require


class MinimaxValues:
    """The forms a value may take under minimax_m2's conversion: literals (an enum's, "null"), JSON
    (numbers, booleans, objects, arrays), or `Text` (a string). The family writes them."""

    def __init__(self, words: Sequence[str], reads_back: Callable[[str, str, Any, Any], bool]) -> None:
        self.words = words
        self.reads_back = reads_back  # (key, text, schema, value): the family's parser reads it so

    def forms(self, key: str, schema: Any, root: Mapping[str, Any]) -> list[str | dict[str, Any] | Text]:
        read = reading_types(schema)
        if read - JSON_TYPES:
            raise Unforceable(f"its types {sorted(read - JSON_TYPES)} are not JSON schema types")
        resolved = resolve(schema, root)
        if "enum" in resolved or "const" in resolved:
            if set(resolved) - _ENUM_KEYS:
                raise Unforceable("an enum beside other keywords cannot be forced")
            values = resolved["enum"] if "enum" in resolved else [resolved["const"]]
            if not isinstance(values, list):
                raise Unforceable("its enum must be a list")
            kinds = types_of(resolved) | ({"integer"} if "number" in types_of(resolved) else set())
            values = [v for v in values if json_type(v) in kinds]
            texts = literals(values, lambda text, value: self.reads_back(key, text, schema, value))
            if not texts:
                raise Unforceable("none of its values reads back as itself")
            return [json.loads(t) for t in texts]
        branches = [resolved]
        for key_word in ("anyOf", "oneOf"):
            if key_word in resolved:
                if set(resolved) - {key_word, "title", "description", "default", "examples"}:
                    raise Unforceable(f"'{key_word}' beside other keywords cannot be forced")
                branches = [resolve(b, root) for b in resolved[key_word]]
                if key_word == "oneOf" and not disjoint([types_of(b) for b in branches]):
                    raise Unforceable("'oneOf' branches that may share a value cannot be forced")
        out: list[str | dict[str, Any] | Text] = []
        for branch in branches:
            out += self._branch(branch, read, root)
        if all(f == "null" for f in out) and any(types_of(b) - {"null"} for b in branches):
            raise Unforceable(
                f"its parser reads a value as {', '.join(sorted(read))}, none of which it may be"
            )
        return out

    def _branch(
        self, branch: Mapping[str, Any], read: frozenset[str], root: Mapping[str, Any]
    ) -> list[str | dict[str, Any] | Text]:
        if "enum" in branch or "const" in branch or "anyOf" in branch or "oneOf" in branch:
            raise Unforceable("an enum or a choice nested in a choice cannot be forced")
        kinds = types_of(branch)
        free = not set(branch) & _COMBINATORS
        out: list[str | dict[str, Any] | Text] = []
        if "null" in kinds and free:
            out.append("null")
        if "boolean" in kinds and "boolean" in read:
            # As literals, each one lexeme with the close: JSON's would lose "true" to a text's start.
            out += ["true", "false"] if free else [{**branch, "type": "boolean"}]
        for kind in ("integer", "number"):
            if kind in kinds and (kind in read or (kind == "integer" and "number" in read)):
                schema = {**branch, "type": kind}
                # int() reads any integer; float() loses digits past 2**53 and overflows.
                limit = INTEGER_LIMIT if kind == "integer" else NUMBER_LIMIT
                out.append(schema if kind == "integer" and "integer" in read else bounded(schema, limit))
        containers = sorted(kinds & {"object", "array"})
        if containers and read & {"object", "array"}:
            out.append(guard_json(standalone({**branch, "type": containers}, root), self.words))
        if "string" in kinds and "string" in read:
            strings = {k: v for k, v in branch.items() if k != "type"}
            exclude = [NULLS["null" in read]]
            exclude += [
                r for t, r in (("integer", INTEGERS), ("number", NUMBERS), ("boolean", BOOLEANS)) if t in read
            ]
            # A text never opens as a JSON number does: the lexer would not let the number end.
            require = [NOT_NUMBER] if read & {"integer", "number"} else []
            if read & {"object", "array"}:
                exclude.append(LITERAL_LIKE)
                require.append(WORD_FIRST)
            out.append(Text(strings, exclude, require))
        return out


class Minimax(ToolFormat):
    parser = "minimax_m2"
    WORDS: Final = ("</parameter>", "</invoke>", "</minimax:tool_call>")

    def __init__(self) -> None:
        self.values = MinimaxValues(self.WORDS, self._reads_back)

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """One section, laid out as the chat template writes it: each <invoke> and each parameter
        on a line of its own, the value right inside its tags; one invoke, or one or more."""
        rules = tools_rules(tools, param, "MiniMax-M2's XML calls", self._invoke)
        calls = " | ".join(f"c{i}" for i in range(len(tools)))
        start, end = tag(self.call_start), tag(self.call_end)
        head = [f'start: {start} "\\n" invoke{"+" if parallel else ""} {end}', f"invoke: {calls}"]
        return "\n".join(head + rules)

    def _invoke(self, rule: str, name: str, parameters: Mapping[str, Any]) -> list[str]:
        if not _fits(name):
            raise Unforceable("its name must hold no '\"', '<', '>' or space at either end")

        def value(rule: str, key: str, schema: Any) -> list[str]:
            forms = ValueRules(rule, "</parameter>\n")
            for form in self.values.forms(key, schema, parameters):
                write(forms, form, self.WORDS)
            return forms.rules()

        parts, rules = arguments_rules(
            rule, parameters, _fits, value, lambda key: f'<parameter name="{key}">'
        )
        written = [lark_literal(f'<invoke name="{name}">\n'), *parts, lark_literal("</invoke>\n")]
        return [f"{rule}: {' '.join(written)}", *rules]

    def _reads_back(self, key: str, text: str, schema: Any, value: Any) -> bool:
        if any(w in text for w in self.WORDS) or text != text.strip():
            return False
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {key: schema}}}}]
        body = f'\n<invoke name="f">\n<parameter name="{key}">{text}</parameter>\n</invoke>\n'
        try:
            return same_value(self.parse(body, tools)[0]["arguments"][key], value)
        except Exception:  # the parser's own errors: this text does not read back
            return False

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        """Each invoke once its name is written; its arguments parameter by parameter, each once its
        element closed, read by the family's parser from the invoke cut after it."""
        calls: list[PartialCall] = []
        at = 0
        while (start := body.find(_INVOKE, at)) >= 0:
            start += len(_INVOKE)
            head = body.find(">", start)
            if head < 0:
                break  # the name may still grow
            end = body.find("</invoke>", head)
            text = body[start : len(body) if end < 0 else end]
            name = text[: head - start].strip()
            name = name[1:-1] if len(name) > 1 and name[0] == name[-1] and name[0] in "\"'" else name
            done = max((m.end() for m in _PARAMETER.finditer(text)), default=head - start + 1)
            try:
                [call] = self.parse(f"{_INVOKE}{text[:done]}</invoke>", tools)
                arguments = arguments_prefix(call["arguments"], complete=end >= 0)
            except Exception:  # a value the parser cannot convert: the finished call will not parse either
                arguments = "{"
            calls.append(PartialCall(name, arguments))
            if end < 0:
                break
            at = end + len("</invoke>")
        return calls


_INVOKE: Final = "<invoke name="
_PARAMETER: Final = re.compile(r"<parameter name=(.*?)</parameter>", re.DOTALL)


def write(value: ValueRules, form: str | dict[str, Any] | Text, words: Sequence[str]) -> None:
    """A form as MiniMax writes it: right inside the tags, the text stripped (its parser strips it)."""
    if isinstance(form, str):
        value.literal(form)
    elif isinstance(form, Text):
        value.text(text_terminal(form.schema, words, exclude=form.exclude, require=[STRIPPED, *form.require]))
    else:
        value.json(form)


def _fits(name: str) -> bool:
    return bool(name) and name == name.strip() and not set(name) & set('"<>')


FORMATS: Final = {"minimax_m2": Minimax()}
