"""Gemma 4's calls: mlx-lm's gemma4 parser.

<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

Keys are bare, strings are raw text between `<|"|>` delimiters (no escapes: a string can hold
anything but the delimiter), numbers, booleans and null are JSON's, objects and arrays nest in the
same notation; Gemma 4's template writes keys in `dictsort` order, without spaces, each call in
its own markers. The parser turns the delimited strings into JSON strings and quotes the bare keys,
then reads the result as JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.tool_formats import PartialCall, arguments_prefix
from mlxhost.worker.engine.tool_formats.gemma_calls import GemmaCalls
from mlxhost.worker.engine.tool_formats.notation import WORD_KEY, Notation

__all__ = ["FORMATS", "Gemma4"]

QUOTE: Final = '<|"|>'
NOTATION: Final = Notation(delimiter=QUOTE, nested=True, key_ok=WORD_KEY.fullmatch, sort_keys=True)
# The parser reads a name as `[\w-]+`.
_NAME: Final = re.compile(r"[\w-]+")
_CALL: Final = re.compile(r"call:([\w-]+)\{")


class Gemma4(GemmaCalls):
    family = "Gemma 4"
    notation = NOTATION
    name = _NAME
    name_rule = r"[\w-]+"
    parser = "gemma4"

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
