"""LFM2's calls, a Python list of calls: mlx-lm's pythonic parser.

<|tool_call_start|>[get_weather(city="Paris", days=3), ping()]<|tool_call_end|>

The parser reads the list with Python's `ast` (true/false/null read as True/False/None, as chat
templates write nested values in JSON), and falls back to a regex for text that is no Python. A
forced call is always Python: keyword arguments whose names are identifiers and no keywords, and
values as JSON text, which is a Python literal of the same value as llguidance writes JSON (its
strings use no `\\/` and no `\\u` escape but for control characters, the escapes where Python and
JSON differ). Top-level booleans and null are written as Python's True/False/None.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
import unicodedata
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
from mlxhost.worker.engine.tool_formats.notation import Unwritable, constraints, members_rule, object_members
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters, rebase

__all__ = ["FORMATS", "Pythonic"]

_CALL: Final = re.compile(r"\s*([^\W\d][\w.]*)\(")
_NEXT: Final = re.compile(r"\s*,")
_PYTHON: Final = {"boolean": '("True" | "False")', "null": '"None"'}


def _identifier(name: str) -> bool:
    """Whether Python reads `name` back as itself: an identifier, no keyword, unchanged by the
    NFKC normalisation the parser applies to identifiers."""
    return name.isidentifier() and not keyword.iskeyword(name) and unicodedata.normalize("NFKC", name) == name


class Pythonic(ToolFormat):
    parser = "pythonic"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """One list of calls between the markers (several calls in it when `parallel`)."""
        if not tools:
            raise GrammarError("no tools to call", param)
        rules: list[str] = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            if not all(_identifier(part) for part in tool.name.split(".")):
                raise ToolRefused(
                    f"tool '{tool.name}': a Python call needs a name that is an identifier", tools, i, param
                )
            try:
                members = object_members(parameters, _identifier)
            except Unwritable as exc:
                raise ToolRefused(f"tool '{tool.name}': {exc}", tools, i, param) from None
            pairs = [
                (json.dumps(f"{name}=", ensure_ascii=False), _value(parameters, name, sub), req)
                for name, sub, req in members
            ]
            arguments = members_rule(rules, f"t{i}", pairs, '", "')
            rules.append(f't{i}: {json.dumps(tool.name + "(", ensure_ascii=False)} {arguments} ")"')
        calls = " | ".join(f"t{i}" for i in range(len(tools)))
        listed = 'call (", " call)*' if parallel else "call"
        return "\n".join(
            [f'start: {tag(self.call_start)} "[" {listed} "]" {tag(self.call_end)}', f"call: {calls}", *rules]
        )

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        # Argument by argument: those followed by a top-level "," are read by mlx-lm's own parser,
        # as if the call closed there.
        start = body.find("[")
        if start < 0:
            return []
        calls = []
        pos = start + 1
        while (match := _CALL.match(body, pos)) is not None:
            name = match.group(1)
            close, last = _scan(body, match.end())
            end = close if close is not None else last
            arguments = self._read(name, body[match.end() : end])
            if arguments is None:
                calls.append(PartialCall(name))
            else:
                calls.append(PartialCall(name, arguments_prefix(arguments, complete=close is not None)))
            if close is None or (after := _NEXT.match(body, close + 1)) is None:
                break
            pos = after.end()
        return calls

    def _read(self, name: str, arguments: str) -> dict[str, Any] | None:
        text = f"[{name}({arguments})]"
        try:
            # Python only: the parser's regex fallback reads text that is no Python otherwise
            # than a whole body that is would be read.
            ast.parse(text, mode="eval")
            calls = self.parse(text, None)
        except (SyntaxError, ValueError, TypeError, RecursionError):
            return None
        found = calls[0].get("arguments") if len(calls) == 1 else None
        return found if isinstance(found, dict) else None


def _value(parameters: Mapping[str, Any], name: str, schema: Any) -> str:
    """A Lark expression for the value of parameter `name`."""
    if schema is True:
        schema = {}
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(kind, str) and kind in _PYTHON and constraints(schema) == {"type"}:
        return _PYTHON[kind]
    if '"$ref"' in json.dumps(parameters):
        # The parameter's schema moves into a document of its own: its references must still
        # reach the rest of the parameters, so the whole of them comes along.
        base = "#/$defs/parameters"
        return json_rule(
            {"$defs": {"parameters": rebase(parameters, base)}, "$ref": f"{base}/properties/{name}"}
        )
    return json_rule(schema)


def _scan(body: str, start: int) -> tuple[int | None, int]:
    """(the index of the parenthesis closing the call whose arguments begin at `start`, or
    None; the index of its last top-level comma, or `start`)."""
    depth = 0
    last = start
    quote = ""
    escaped = False
    for i in range(start, len(body)):
        char = body[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in "}])":
            if depth == 0:
                return (i, last) if char == ")" else (None, last)
            depth -= 1
        elif char == "," and depth == 0:
            last = i
    return None, last


FORMATS: Final = {"pythonic": Pythonic()}
