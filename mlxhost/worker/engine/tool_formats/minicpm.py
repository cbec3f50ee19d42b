"""Calls as <function> elements with no wrapper (MiniCPM5): mlx-lm's minicpm5.

<function name="get_weather"><param name="city">Paris</param><param name="note"><![CDATA[a < b
and c]]></param></function>

Each call is its own element: the start marker is `<function name=`, the end `</function>`, and
parallel calls stand one after another. A value holding "<", "&" or a line break is written in a
CDATA section (kept as it is), any other plainly (its parser strips the space around it); either is
then converted as MiniMax-M2's parser does (minimax.py's MinimaxValues chooses the forms).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, Tag, ToolFormat, arguments_prefix
from mlxhost.worker.engine.tool_formats.minimax import MinimaxValues, Text
from mlxhost.worker.engine.tool_formats.xml_values import (
    PY_SPACE,
    STRIPPED,
    Unforceable,
    ValueRules,
    arguments_rules,
    lark_literal,
    same_value,
    text_terminal,
    tools_rules,
)

__all__ = ["FORMATS", "MiniCpm", "written"]

CLOSE: Final = "</param>"
CDATA: Final = ("<![CDATA[", "]]>")
# A plain value holds none of these (the template puts such a value in a CDATA section).
PLAIN: Final = r"[^<&\n]*"
_QUOTED: Final = r"\"[^\"]*\"|'[^']*'|[^\s\"'<>]+"  # a name, as the parser reads one
_NAME: Final = re.compile(rf"\s*({_QUOTED})\s*>")
_PARAM: Final = re.compile(rf"<param\s+name\s*=\s*(?:{_QUOTED})\s*>.*?</param>", re.DOTALL)


def written(text: str) -> str:
    """A value's text as the chat template writes it: plainly, or in a CDATA section when it holds
    "<", "&" or a line break or has space at either end (which the plain form would lose)."""
    if text == text.strip() and not set(text) & set("<&\n"):
        return text
    return CDATA[0] + text + CDATA[1]


class MiniCpm(ToolFormat):
    parser = "minicpm5"

    def __init__(self) -> None:
        self.words = (CLOSE, self.call_end)  # a value's end, and the call's (the output parser's)
        self.values = MinimaxValues(self.words, self._reads_back)

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """Each call one element, its parameters right inside it, as the chat template writes them;
        parallel calls one after another."""
        rules = tools_rules(tools, param, "MiniCPM5's XML calls", self._call)
        calls = " | ".join(f"c{i}" for i in range(len(tools)))
        head = [
            "start: call+" if parallel else "start: call",
            f"call: {tag(self.call_start)} ({calls}) {tag(self.call_end)}",
        ]
        return "\n".join(head + rules)

    def _call(self, rule: str, name: str, parameters: Mapping[str, Any]) -> list[str]:
        if not _fits(name):
            raise Unforceable("its name must hold no quote, '<', '>' or space at either end")

        def value(rule: str, key: str, schema: Any) -> list[str]:
            forms = ValueRules(rule, CLOSE)
            for form in self.values.forms(key, schema, parameters):
                if isinstance(form, str):
                    forms.literal(written(form))
                elif isinstance(form, Text):
                    self._text(forms, form)
                else:
                    forms.json(form)  # JSON holds no line break, and no end tag (guarded)
            return forms.rules()

        parts, rules = arguments_rules(rule, parameters, _fits, value, lambda key: f'<param name="{key}">')
        opening = lark_literal(f'"{name}">')
        return [f"{rule}: {' '.join([opening, *parts])}", *rules]

    def _text(self, forms: ValueRules, form: Text) -> None:
        # Plain: stripped, no "<", "&" or line break. In CDATA: anything but the section's end and
        # the closing tags, kept as it is.
        # CDATA's text reaches the conversion unstripped, where int(), float() and the boolean
        # words would still read it with space around.
        plain = [STRIPPED, PLAIN, *form.require]
        forms.text(text_terminal(form.schema, self.words, exclude=form.exclude, require=plain))
        spaced = [f"[{PY_SPACE}]*(?:{e})[{PY_SPACE}]*" for e in form.exclude]
        cdata = text_terminal(form.schema, (*self.words, CDATA[1]), exclude=spaced, require=form.require)
        forms.text(cdata, opening=CDATA[0], closing=CDATA[1])

    def _reads_back(self, key: str, text: str, schema: Any, value: Any) -> bool:
        shown = written(text)
        if any(w in shown for w in self.words) or CDATA[1] in text:
            return False
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {key: schema}}}}]
        try:
            [call] = self.parse(f'"f"><param name="{key}">{shown}{CLOSE}', tools)
            return same_value(call["arguments"][key], value)
        except Exception:  # the parser's own errors: this text does not read back
            return False

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        """The call once its name is written; its arguments parameter by parameter, each once its
        element closed, read by the family's parser from the body cut after it. The call's end
        marker never is in the body, so its arguments are never known to be complete here."""
        head = _NAME.match(body)
        if head is None:
            return []
        name = head.group(1).strip()
        name = name[1:-1] if len(name) > 1 and name[0] == name[-1] and name[0] in "\"'" else name
        done = max((m.end() for m in _PARAM.finditer(body, head.end())), default=head.end())
        try:
            [call] = self.parse(body[:done], tools)
        except Exception:  # a value the parser cannot convert: the finished call will not parse either
            return [PartialCall(name, "{")]
        return [PartialCall(name, arguments_prefix(call["arguments"]))]


def _fits(name: str) -> bool:
    return bool(name) and name == name.strip() and not set(name) & set("\"'<>")


FORMATS: Final = {"minicpm5": MiniCpm()}
