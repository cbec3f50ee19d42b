"""Calls as XTML elements (Moonshot's Kimi K3): mlx-lm's kimi_k3.

    <|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>
    <|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>
    <|open|>argument key="days" type="integer"<|sep|>3<|close|>argument<|sep|>
    <|close|>call<|sep|><|close|>tools<|sep|>

(on one line: the template writes nothing between elements). A turn's calls share one `tools`
element, numbered from 1. The parser keeps an argument's text as it is when its `type` is
"string" and reads it as JSON otherwise; a call may instead hold all its arguments as one
`<|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>` element. The grammar writes each
argument as the template does (a string bare, typed "string"; any other value as JSON, typed by
its schema), and a call whose parameters an element per argument cannot carry (a parameter of no
`type`, keywords on the whole object, ...) as the JSON element. Names and keys are attribute
values (`&` and `"` escaped), each read back by the parser before the grammar writes it.
"""

from __future__ import annotations

import re
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
from mlxhost.worker.engine.tool_formats.arg_keys import enum_values, json_type
from mlxhost.worker.engine.tool_formats.partial_json import arguments_so_far
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters
from mlxhost.worker.engine.tool_formats.xml_values import (
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

__all__ = ["FORMATS", "KimiK3"]

OPEN: Final = "<|open|>"
CLOSE: Final = "<|close|>"
SEP: Final = "<|sep|>"
# Text no value may hold: every element (an argument, a call, the section) ends at its first
# "<|close|>", and a "<|open|>json" anywhere in a call makes the parser read that instead.
WORDS: Final = (OPEN, CLOSE)
MAX_CALLS: Final = 64  # in one section; each call's `index` attribute numbers it from 1
QUOTE: Final = '"'

_CALL: Final = re.compile(r"<\|open\|>call((?:(?!<\|sep\|>).)*)<\|sep\|>", re.DOTALL)
_CALL_END: Final = f"{CLOSE}call{SEP}"
_JSON: Final = re.compile(r"<\|open\|>json(?:(?!<\|sep\|>).)*<\|sep\|>", re.DOTALL)
_ARGUMENT_END: Final = f"{CLOSE}argument{SEP}"


class KimiK3(ToolFormat):
    parser = "kimi_k3"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """One `tools` element holding one call (one or more when `parallel`), each a `call`
        element of one of `tools`."""
        if not tools:
            raise GrammarError("no tools to call", param)
        rules = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            try:
                if self._read(_opening(tool.name)) != (tool.name, {}):
                    raise Unforceable("its name does not read back")
                try:
                    body, lines = self._arguments(f"t{i}", tool.name, parameters, tag)
                except Unforceable:  # the JSON element carries whatever llguidance's JSON can
                    body, lines = f"json_t{i}", [f"json_t{i}: {self._json_element(parameters, tag)}"]
            except Unforceable as exc:
                raise ToolRefused(f"tool '{tool.name}': {exc} (kimi_k3 calls)", tools, i, param) from None
            head = lark_literal(f'call tool="{_attribute(tool.name)}" index="')
            rules += [
                f"t{i}::_ : {tag(OPEN)} {head} index::_ {lark_literal(QUOTE)} {tag(SEP)} {body}",
                *lines,
            ]
        # The calls are numbered from 1 (the parameter of `calls`, `call` and `index` counts them).
        calls = " | ".join(f"t{i}::_" for i in range(len(tools)))
        more = f" | call::_ calls::incr([0:8]) %if lt([0:8], {MAX_CALLS})" if parallel else ""
        numbers = " | ".join(f'"{n}" %if eq([0:8], {n})' for n in range(1, MAX_CALLS + 1 if parallel else 2))
        return "\n".join(
            [
                f"start: {_marker(self.call_start, tag)} calls::1 {_marker(self.call_end, tag)}",
                f"calls::_ : call::_{more}",
                f"call::_ : ({calls}) {_marker(_CALL_END, tag)}",
                f"index::_ : {numbers}",
                *rules,
            ]
        )

    def _arguments(
        self, rule: str, name: str, parameters: Mapping[str, Any], tag: Tag
    ) -> tuple[str, list[str]]:
        """An element per argument, in the schema's order (the required, the optional maybe)."""
        parts, lines = [], []
        for j, (key, schema, required) in enumerate(parameters_of(parameters, lambda key: True)):
            if self._read(_opening(name) + _argument(key, "integer", "1")) != (name, {key: 1}):
                raise Unforceable(f"parameter {key!r} does not read back")
            at = f"{rule}_{j}"
            branches = self._typed_values(at, name, key, resolve(schema, parameters), parameters, tag)
            attributes = f'argument key="{_attribute(key)}" type="'
            head = f"{tag(OPEN)} {lark_literal(attributes)}"
            ending = f"{lark_literal('argument')} {tag(SEP)}"
            lines.append(f"{at}: {head} ({' | '.join(b for b, _ in branches)}) {ending}")
            lines += [line for _, more in branches for line in more]
            parts.append(at if required else f"{at}?")
        return " ".join(parts), lines

    def _typed_values(
        self, at: str, name: str, key: str, schema: Mapping[str, Any], root: Mapping[str, Any], tag: Tag
    ) -> list[tuple[str, list[str]]]:
        """The ways to write a value of `schema`, each (its type's name and the close of the type
        attribute, the value, the closing tag; the rules it takes)."""
        close = tag(CLOSE)
        folded = close.startswith('"')  # a closing tag written as text ends the value's terminal

        def text(kind: str, n: int, body: str) -> tuple[str, list[str]]:
            lexeme = f"V{at.upper()}_{n}"
            first = f"{lark_literal(kind + QUOTE)} {tag(SEP)} {lexeme}"
            if folded:
                return first, [f"{lexeme}_TEXT: {body}", f"{lexeme}: {lexeme}_TEXT {close}"]
            return f"{first} {close}", [f"{lexeme}_TEXT: {body}", f"{lexeme}: {lexeme}_TEXT"]

        def reads_back(text: str, value: Any) -> bool:
            element = _argument(key, json_type(value), text)
            read = self._read(_opening(name) + element)
            return (
                not any(w in text for w in WORDS)
                and read is not None
                and same_value(read, (name, {key: value}))
            )

        if (values := enum_values(schema)) is not None:
            kinds = sorted({json_type(v) for v in values})
            branches = [
                text(kind, n, " | ".join(texts))
                for n, kind in enumerate(kinds)
                if (texts := literals([v for v in values if json_type(v) == kind], reads_back))
            ]
            if not branches:
                raise Unforceable(f"no value of parameter {key!r} reads back")
            return branches
        if "type" not in schema or ("enum" in schema or "const" in schema):
            raise Unforceable(f"parameter {key!r} has no single type to write")
        branches = []
        for n, kind in enumerate(sorted(types_of(schema))):
            if kind == "string":
                branches.append(text("string", n, text_terminal(schema, WORDS)))
            else:
                value = json_rule(guard_json(standalone({**schema, "type": kind}, root), WORDS))
                first = f"{lark_literal(kind + QUOTE)} {tag(SEP)} json_{at}_{n} {close}"
                branches.append((first, [f"json_{at}_{n}: {value}"]))
        return branches

    def _json_element(self, parameters: Mapping[str, Any], tag: Tag) -> str:
        """All the arguments as one JSON object, in the `json` element."""
        opening = f"{tag(OPEN)} {lark_literal(f'json type={QUOTE}object{QUOTE}')} {tag(SEP)}"
        return f"{opening} {json_rule(guard_json(parameters, WORDS))} {_marker(f'{CLOSE}json{SEP}', tag)}"

    def _read(self, call: str) -> Any:
        """(name, arguments) of the one call `call` (its opening and its arguments; the closing
        tag is added) as the parser reads it, or None."""
        try:
            calls = self.parse(call + _CALL_END, None)
            return (calls[0]["name"], calls[0]["arguments"]) if len(calls) == 1 else None
        except Exception:  # the parser's own errors: it does not read this back
            return None

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        # A call's name is whole once its opening tag closed; its arguments are those whose
        # element closed, or the complete members of its JSON element. A call whose element
        # closed is read whole by the parser, which leaves out one it cannot read (so does this).
        out = []
        openings = list(_CALL.finditer(body))
        for n, opening in enumerate(openings):
            end = body.find(_CALL_END, opening.end())
            if end >= 0 and (n + 1 == len(openings) or end < openings[n + 1].start()):
                if (read := self._read(body[opening.start() : end])) is not None:
                    out.append(PartialCall(read[0], arguments_prefix(read[1], complete=True)))
                continue
            call = body[opening.start() :]
            if (started := self._read(opening.group(0))) is not None:
                out.append(
                    PartialCall(started[0], self._arguments_so_far(call, opening.end() - opening.start()))
                )
            break
        return out

    def _arguments_so_far(self, call: str, opening: int) -> str:
        """The arguments' JSON text so far of an open call (`call` from its opening tag, which
        is `opening` long): at least "{", as the parser's arguments are always an object."""
        if (block := _JSON.search(call)) is not None:
            return arguments_so_far(call[block.end() :]) or "{"
        end = call.rfind(_ARGUMENT_END)
        read = self._read(call[: end + len(_ARGUMENT_END)] if end >= 0 else call[:opening])
        return "{" if read is None else arguments_prefix(read[1])


def _attribute(value: str) -> str:
    """`value` as an XTML attribute's text (the parser unescapes these two)."""
    return value.replace("&", "&amp;").replace('"', "&quot;")


def _opening(name: str) -> str:
    return f'{OPEN}call tool="{_attribute(name)}" index="1"{SEP}'


def _argument(key: str, kind: str, text: str) -> str:
    return f'{OPEN}argument key="{_attribute(key)}" type="{kind}"{SEP}{text}{_ARGUMENT_END}'


def _marker(text: str, tag: Tag) -> str:
    """An XTML marker as grammar: its special tokens each by `tag`, the words between as text."""
    return " ".join(
        tag(p) if p.startswith("<|") else lark_literal(p) for p in re.split(r"(<\|\w+\|>)", text) if p
    )


FORMATS: Final = {"kimi_k3": KimiK3()}
