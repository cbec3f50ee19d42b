"""Calls as <atem:invoke> elements in an <atem:function_calls> block (Muse Spark): mlx-lm's muse_spark.

<atem:function_calls>
<atem:invoke name="get_weather">
<atem:parameter name="city">Paris</atem:parameter>
<atem:parameter name="days">3</atem:parameter>
</atem:invoke>
</atem:function_calls>

A block holds one call or several. The parser reads a value as JSON whenever it parses as JSON,
whatever the tool declares, and as the stripped text otherwise. So any value may be written as
JSON, and a string may also be written as it is when it could not read as JSON (as the chat
template writes strings).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, Tag, ToolFormat, arguments_prefix
from mlxhost.worker.engine.tool_formats.xml_values import (
    STRIPPED,
    Unforceable,
    ValueRules,
    arguments_rules,
    guard_json,
    lark_literal,
    literals,
    resolve,
    same_value,
    standalone,
    text_terminal,
    tools_rules,
    types_of,
)

__all__ = ["FORMATS", "MuseSpark"]

CLOSE: Final = "</atem:parameter>\n"
# A text json.loads cannot read: empty, or opening with none of JSON's first characters, and not
# one of the constants Python's json reads.
NOT_JSON: Final = r"(?:[^\"\[{\-0-9](?s:.*))?"
JSON_WORDS: Final = r"true|false|null|NaN|Infinity"
_INVOKE: Final = re.compile(r"<atem:invoke\b[^>]*?\bname=\"([^\"]+)\">")
_PARAMETER: Final = re.compile(
    r"<atem:parameter\b[^>]*?\bname=\"[^\"]+\"[^>]*?>.*?</atem:parameter>", re.DOTALL
)
_ENUM_KEYS: Final = frozenset({"type", "enum", "const", "title", "description", "default", "examples"})
_COMBINATORS: Final = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref"})


class MuseSpark(ToolFormat):
    parser = "muse_spark"
    WORDS: Final = ("</atem:parameter>", "</atem:invoke>", "</atem:function_calls>")

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """One block, laid out as the chat template writes it: each invoke and each parameter on a
        line of its own, the value right inside its tags; one invoke, or one or more."""
        rules = tools_rules(tools, param, "Muse Spark's XML calls", self._invoke)
        calls = " | ".join(f"c{i}" for i in range(len(tools)))
        start, end = tag(self.call_start), tag(self.call_end)
        head = [f'start: {start} "\\n" invoke{"+" if parallel else ""} {end}', f"invoke: {calls}"]
        return "\n".join(head + rules)

    def _invoke(self, rule: str, name: str, parameters: Mapping[str, Any]) -> list[str]:
        if not _fits(name):
            raise Unforceable("its name must hold no '\"', '<' or '>'")

        def value(rule: str, key: str, schema: Any) -> list[str]:
            forms = ValueRules(rule, CLOSE)
            resolved = resolve(schema, parameters)
            if "enum" in resolved or "const" in resolved:
                if set(resolved) - _ENUM_KEYS:
                    raise Unforceable("an enum beside other keywords cannot be forced")
                values = resolved["enum"] if "enum" in resolved else [resolved["const"]]
                if not isinstance(values, list):
                    raise Unforceable("its enum must be a list")
                for text in literals(values, lambda text, v: self._reads_back(key, text, v)):
                    forms.literal(json.loads(text))
                return forms.rules()
            kinds = types_of(resolved)
            if set(resolved) & _COMBINATORS:
                forms.json(guard_json(standalone(resolved, parameters), self.WORDS))
                return forms.rules()
            # true, false and null as literals, each one lexeme with the close: as JSON, the lexer
            # would lose them to a text that starts alike.
            for word, kind in (("null", "null"), ("true", "boolean"), ("false", "boolean")):
                if kind in kinds:
                    forms.literal(word)
            # A string with a format is written as JSON only, where llguidance checks the format.
            if "string" in kinds and "format" not in resolved:
                strings = {k: v for k, v in resolved.items() if k != "type"}
                require = [STRIPPED, NOT_JSON]
                forms.text(text_terminal(strings, self.WORDS, exclude=[JSON_WORDS], require=require))
            if rest := sorted(kinds - {"null", "boolean"}):
                forms.json(guard_json(standalone({**resolved, "type": rest}, parameters), self.WORDS))
            # (guard_json bounds numbers: json.loads reads a larger exponent as inf.)
            return forms.rules()

        parts, rules = arguments_rules(rule, parameters, _fits, value, _opening)
        written = [lark_literal(f'<atem:invoke name="{name}">\n'), *parts, lark_literal("</atem:invoke>\n")]
        return [f"{rule}: {' '.join(written)}", *rules]

    def _reads_back(self, key: str, text: str, value: Any) -> bool:
        if any(w in text for w in self.WORDS):
            return False
        body = f'\n<atem:invoke name="f">\n<atem:parameter name="{key}">{text}{CLOSE}</atem:invoke>\n'
        try:
            return same_value(self.parse(body, None)[0]["arguments"][key], value)
        except Exception:  # the parser's own errors: this text does not read back
            return False

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        """Each invoke once its name is written; its arguments parameter by parameter, each once its
        element closed, read by the family's parser from the invoke cut after it."""
        calls: list[PartialCall] = []
        at = 0
        while (head := _INVOKE.search(body, at)) is not None:
            end = body.find("</atem:invoke>", head.end())
            text = body[head.start() : len(body) if end < 0 else end]
            done = max((m.end() for m in _PARAMETER.finditer(text)), default=head.end() - head.start())
            try:
                [call] = self.parse(text[:done] + "</atem:invoke>", tools)
                arguments = arguments_prefix(call["arguments"], complete=end >= 0)
            except Exception:  # the parser's own errors: the finished call will not parse either
                arguments = "{"
            calls.append(PartialCall(head.group(1), arguments))
            if end < 0:
                break
            at = end + len("</atem:invoke>")
        return calls


def _opening(key: str) -> str:
    return f'<atem:parameter name="{key}">'


def _fits(name: str) -> bool:
    return bool(name) and not set(name) & set('"<>')


FORMATS: Final = {"muse_spark": MuseSpark()}
