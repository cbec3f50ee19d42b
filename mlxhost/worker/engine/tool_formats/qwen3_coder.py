"""Calls as XML with an element per argument (Qwen3-Coder, Qwen3.5/3.6): mlx-lm's qwen3_coder.

<tool_call>
<function=get_weather>
<parameter=city>
Paris
</parameter>
<parameter=days>
3
</parameter>
</function>
</tool_call>

One call per <tool_call> block. The parser takes a value as the text between the element's lines
(one newline stripped at each end) and converts it by its parameter's declared `type`: a string as
it is (the text "null", in any case, reads as None whatever the type), an integer or a number
through float(), a boolean as "true"/"false", an object or an array as JSON; a list of types
through Python's ast.literal_eval; no `type` at all as JSON only when that is an object or an
array, else as the string. The grammar writes each value in a form the parser reads back as a
valid value of its schema, and refuses what no form carries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, Tag, ToolFormat, arguments_prefix
from mlxhost.worker.engine.tool_formats.xml_values import (
    INTEGER_LIMIT,
    NUMBER_LIMIT,
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

__all__ = ["FORMATS", "Qwen3Coder"]

# Text a value cannot hold: the parser ends it at the first "</parameter>", and the output parser
# ends the whole call at the first "</tool_call>".
WORDS: Final = ("</parameter>", "</tool_call>")
CLOSE: Final = "\n</parameter>\n"
# A name as the parser reads it after "<function=" or "<parameter=".
_NAME: Final = re.compile(r"\s*([^\s<>]+)")
_FUNCTION: Final = "<function="
_PARAMETER: Final = re.compile(r"<parameter=(.*?)</parameter>", re.DOTALL)
# The types whose values the parser keeps as written (mlx_lm.tool_parsers.qwen3_coder).
_STRING_TYPES: Final = frozenset({"string", "str", "text", "varchar", "char", "enum"})

NULL: Final = r"(?i:null)"  # read as None, whatever the parameter's type
# Texts json.loads might read as an object or an array (an untyped parameter's value then is one).
JSON_CONTAINER: Final = r"[ \t\n\r]*[\[{](?s:.*)"
_COMBINATORS: Final = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref"})
# What ast.literal_eval might read (a value of a parameter whose `type` is a list): a raw string is
# kept to an ASCII letter first, no quote after a leading word (b'…', r"…"), and no Python constant.
LITERAL_SAFE: Final = r"[A-Za-z](?s:.*)"
LITERAL_LIKE: Final = r"[A-Za-z0-9_]*['\"](?s:.*)|(?:True|False|None)(?:[^A-Za-z0-9_](?s:.*))?"


class Qwen3Coder(ToolFormat):
    parser = "qwen3_coder"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """Each call in a <tool_call> block of its own, laid out as the chat template writes it:
        the tags, the function and each parameter on lines of their own, the parameters in schema
        order (the required always, the optional maybe)."""
        rules = tools_rules(tools, param, "Qwen3-Coder's XML calls", self._call_rules)
        calls = " | ".join(f"c{i}" for i in range(len(tools)))
        head = [
            "start: call (NL call)*" if parallel else "start: call",
            f"call: {tag(self.call_start)} NL ({calls}) NL {tag(self.call_end)}",
            'NL: "\\n"',
        ]
        return "\n".join(head + rules)

    def _call_rules(self, rule: str, name: str, parameters: Mapping[str, Any]) -> list[str]:
        if not _fits(name):
            raise Unforceable("its name must be one word without '<' or '>'")
        parts, rules = arguments_rules(
            rule,
            parameters,
            _fits,
            lambda value, key, schema: self._value_rules(value, key, schema, parameters),
            lambda key: f"<parameter={key}>\n",
        )
        written = [lark_literal(f"{_FUNCTION}{name}>\n"), *parts, lark_literal("</function>")]
        return [f"{rule}: {' '.join(written)}", *rules]

    def _value_rules(self, name: str, key: str, schema: Any, root: Mapping[str, Any]) -> list[str]:
        """The rule `name`: one value of `schema` and the close of its element; its terminals beside."""
        resolved = resolve(schema, root)
        forms = ValueRules(name, CLOSE)
        if "enum" in resolved or "const" in resolved:
            for text in self._enumerated(key, schema, resolved):
                forms.literal(text)
        elif isinstance(schema, Mapping) and "type" in schema:
            self._typed(forms, resolved, root)
        else:
            self._untyped(forms, resolved, root)
        return forms.rules()

    def _enumerated(self, key: str, schema: Any, resolved: Mapping[str, Any]) -> list[str]:
        if set(resolved) - {"type", "enum", "const", "title", "description", "default", "examples"}:
            raise Unforceable("an enum beside other keywords cannot be forced")
        kinds = types_of(resolved)
        values = resolved["enum"] if "enum" in resolved else [resolved["const"]]
        if not isinstance(values, list):
            raise Unforceable("its enum must be a list")
        values = [
            v for v in values if json_type(v) in kinds or (json_type(v) == "integer" and "number" in kinds)
        ]
        form = {"type": "object", "properties": {key: schema}}
        tools = [{"type": "function", "function": {"name": "f", "parameters": form}}]

        def reads_back(text: str, value: Any) -> bool:
            if any(w in text for w in WORDS):
                return False
            try:
                body = f"\n{_FUNCTION}f>\n<parameter={key}>\n{text}{CLOSE}</function>\n"
                return same_value(self.parse(body, tools)[0]["arguments"][key], value)
            except Exception:  # the parser's own errors: this text does not read back
                return False

        texts = [json.loads(t) for t in literals(values, reads_back)]
        if not texts:
            raise Unforceable("none of its values reads back as itself")
        return texts

    def _typed(self, forms: ValueRules, schema: Mapping[str, Any], root: Mapping[str, Any]) -> None:
        kinds = types_of(schema)
        single = schema["type"] if isinstance(schema["type"], str) else None
        if set(schema) & _COMBINATORS and single not in ("integer", "number", "boolean", "object", "array"):
            # Only a value written as JSON is checked against them (by llguidance).
            raise Unforceable("a null, a text or a list of types beside a combinator cannot be forced")
        if single is not None:
            kind = single
            if kind == "string":
                forms.text(text_terminal(schema, WORDS, exclude=[NULL]))
            elif kind in ("integer", "number"):
                forms.json(_number(kind, schema))
            elif kind == "boolean":
                forms.json(schema)
            elif kind == "null":
                forms.literal("null")
            else:
                forms.json(guard_json(standalone(schema, root), WORDS))
            return
        # A list of types reads through ast.literal_eval: JSON's true/false/null are not Python's.
        if kinds & {"object", "array"}:
            raise Unforceable("an object or array among a list of types cannot be forced")
        one = {k: v for k, v in schema.items() if k != "type"}
        if "null" in kinds:
            forms.literal("null")
        if "boolean" in kinds:
            forms.literal("True")
            forms.literal("False")
        for kind in ("integer", "number"):
            if kind in kinds:
                forms.json(_number(kind, {**one, "type": kind}))
        if "string" in kinds:
            exclude = [NULL, LITERAL_LIKE]
            forms.text(text_terminal(one, WORDS, exclude=exclude, require=[LITERAL_SAFE]))

    def _untyped(self, forms: ValueRules, schema: Mapping[str, Any], root: Mapping[str, Any]) -> None:
        """No `type`: the parser reads an object or an array as JSON, "null" as None, and anything
        else as the string it is (never a number or a boolean)."""
        branches = [schema]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                if set(schema) - {key, "title", "description", "default", "examples"}:
                    raise Unforceable(f"'{key}' beside other keywords cannot be forced")
                branches = [resolve(b, root) for b in schema[key]]
                if key == "oneOf" and not disjoint([types_of(b) for b in branches]):
                    raise Unforceable("'oneOf' branches that may share a value cannot be forced")
        reachable = False
        for branch in branches:
            if "enum" in branch or "const" in branch or "anyOf" in branch or "oneOf" in branch:
                raise Unforceable("an enum or a choice nested in a choice cannot be forced")
            kinds = types_of(branch)
            if "null" in kinds and not set(branch) & _COMBINATORS:
                forms.literal("null")
            if "string" in kinds:
                strings = {k: v for k, v in branch.items() if k != "type"}
                forms.text(text_terminal(strings, WORDS, exclude=[NULL, JSON_CONTAINER]))
                reachable = True
            if containers := sorted(kinds & {"object", "array"}):
                forms.json(guard_json(standalone({**branch, "type": containers}, root), WORDS))
                reachable = True
        if not reachable:
            raise Unforceable("with no 'type', the parser reads only strings, objects, arrays and null")

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        """The call once its function's name is written; its arguments parameter by parameter, each
        once its element closed, read by the family's parser from the body cut after it."""
        start = body.find(_FUNCTION)
        if start < 0:
            return []
        rest = body[start + len(_FUNCTION) :]
        name = _NAME.match(rest)
        if name is None or name.end() == len(rest):
            return []  # the name may still grow
        done = 0
        for match in _PARAMETER.finditer(rest, name.end()):
            done = match.end()
        try:
            cut = f"{_FUNCTION}{rest[:done] if done else name.group(0) + '>'}\n</function>"
            arguments = self.parse(cut, tools)[0]["arguments"]
        except Exception:  # a value the parser cannot convert: the finished call will not parse either
            return [PartialCall(name.group(1), "{")]
        tail = rest[done:] if done else rest[name.end() :].lstrip(">")
        closed = tail.strip() == "</function>"
        text = arguments_prefix(arguments, complete=closed)
        if not closed:
            text += _open_text(tail, arguments, _declared(tools, name.group(1)))
        return [PartialCall(name.group(1), text)]


def _declared(tools: Sequence[Mapping[str, Any]] | None, name: str) -> Mapping[str, Any]:
    """The properties the tool `name` declares (as the parser reads them), or {}."""
    for tool in tools or ():
        function = tool.get("function") or {}
        if function.get("name") == name:
            properties = (function.get("parameters") or {}).get("properties")
            return properties if isinstance(properties, Mapping) else {}
    return {}


def _open_text(tail: str, done: Mapping[str, Any], declared: Mapping[str, Any]) -> str:
    """More of the arguments' JSON text from a parameter still being written, when it is a string
    the parser keeps as written: its characters as they come, so that a long value (a file's
    content) streams as the model writes it, not at its end. What the parser may still change is
    held back: one newline at either end (it strips them), a tail that may be the closing tag, and
    a value that may yet read "null". "" for any other parameter: it comes whole once closed."""
    opened = re.match(r"\s*<parameter=([^\s<>]+)>", tail)
    if opened is None or opened.group(1) in done:
        return ""
    key = opened.group(1)
    schema = declared.get(key)
    if schema is not None and str(schema.get("type", "")).strip().lower() not in _STRING_TYPES:
        return ""  # converted by its type (or read as JSON): known only once whole
    value = tail[opened.end() :]
    if not value:
        return ""
    value = value.removeprefix("\n")
    for length in range(min(len(value), len(CLOSE) - 1), 0, -1):
        if "\n</parameter>".startswith(value[-length:]) or "</parameter>".startswith(value[-length:]):
            value = value[:-length]  # a newline there may be the one the parser strips
            break
    if "null".startswith(value.lower()):
        return ""  # "" or a start of "null": nothing is known yet
    return (
        (", " if done else "")
        + json.dumps(key, ensure_ascii=False)
        + ": "
        + json.dumps(value, ensure_ascii=False)[:-1]
    )


def _fits(name: str) -> bool:
    """A name the parser reads whole after "<function=" or "<parameter=": one run of characters
    that are not space, "<" or ">"."""
    return re.fullmatch(r"[^\s<>]+", name) is not None


def _number(kind: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    if kind == "integer":
        return bounded(schema, INTEGER_LIMIT)
    return bounded(schema, NUMBER_LIMIT)


FORMATS: Final = {"qwen3_coder": Qwen3Coder()}
