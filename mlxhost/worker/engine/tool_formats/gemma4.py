"""Gemma 4's calls: mlx-lm's gemma4 parser.

<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Keys are bare, strings are raw text between `<|"|>` delimiters (no escapes: a string can hold
anything but the delimiter), numbers, booleans and null are JSON's, objects and arrays nest in the
same notation; Gemma 4's template writes keys in `dictsort` order, without spaces, each call in
its own markers. The parser turns the delimited strings into JSON strings and quotes the bare keys,
then reads the result as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, Tag, ToolFormat, ToolRefused, arguments_prefix
from mlxhost.worker.engine.tool_formats.notation import WORD_KEY, Notation, Unwritable, Values
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters

__all__ = ["FORMATS", "Gemma4"]

QUOTE: Final = '<|"|>'
NOTATION: Final = Notation(delimiter=QUOTE, nested=True, key_ok=WORD_KEY.fullmatch, sort_keys=True)
# The parser reads a name as `[\w-]+`.
_NAME: Final = re.compile(r"[\w-]+")
_CALL: Final = re.compile(r"call:([\w-]+)\{")


class Gemma4(ToolFormat):
    parser = "gemma4"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """Each call in its own markers, as the template writes them (several when `parallel`)."""
        if not tools:
            raise GrammarError("no tools to call", param)
        # A string holding the end marker's text would end the call there (the output is read
        # as text): strings never do.
        notation = replace(NOTATION, excluded=(*NOTATION.excluded, self.call_end))
        rules: list[str] = []
        branches = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            if not _NAME.fullmatch(tool.name):
                raise ToolRefused(
                    f"tool '{tool.name}': Gemma 4 calls a tool by a name of [\\w-]+", tools, i, param
                )
            values = Values(parameters, notation, tag, f"t{i}")
            try:
                members = values.arguments('","')
            except Unwritable as exc:
                raise ToolRefused(f"tool '{tool.name}': {exc}", tools, i, param) from None
            rules += values.rules
            branches.append(f't{i}: {json.dumps(f"call:{tool.name}{{", ensure_ascii=False)} {members} "}}"')
        rules += branches
        alternatives = " | ".join(f"t{i}" for i in range(len(tools)))
        start = "start: call+" if parallel else "start: call"
        return "\n".join(
            [start, f"call: {tag(self.call_start)} ({alternatives}) {tag(self.call_end)}", *rules]
        )

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        # Member by member: the members whose value ended (a top-level "," came after it) are
        # read by mlx-lm's own parser, as if the object closed there.
        calls = []
        pos = 0
        while (match := _CALL.search(body, pos)) is not None:
            name = match.group(1)
            close, last = _scan(body, match.end())
            end = close if close is not None else last
            arguments = self._read(name, body[match.end() : end])
            if arguments is None:
                calls.append(PartialCall(name))
            else:
                calls.append(PartialCall(name, arguments_prefix(arguments, complete=close is not None)))
            if close is None:
                break
            pos = close + 1
        return calls

    def _read(self, name: str, members: str) -> dict[str, Any] | None:
        try:
            calls = self.parse(f"call:{name}{{{members}}}", None)
        except (ValueError, TypeError, RecursionError):
            return None
        arguments = calls[0].get("arguments") if len(calls) == 1 else None
        return arguments if isinstance(arguments, dict) else None


def _scan(body: str, start: int) -> tuple[int | None, int]:
    """(the index of the brace closing the object opened just before `start`, or None; the end
    of its last member followed by a top-level comma, or `start`)."""
    depth = 1
    last = start
    i = start
    while i < len(body):
        if body.startswith(QUOTE, i):
            end = body.find(QUOTE, i + len(QUOTE))
            if end < 0:
                break
            i = end + len(QUOTE)
            continue
        char = body[i]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i, last
        elif char == "," and depth == 1:
            last = i
        i += 1
    return None, last


FORMATS: Final = {"gemma4": Gemma4()}
