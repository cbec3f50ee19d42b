"""FunctionGemma's calls: mlx-lm's function_gemma parser.

<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>

FunctionGemma's template writes Gemma's notation (bare keys in `dictsort` order, strings raw
between `<escape>` delimiters, no spaces), but mlx-lm's parser reads only flat pairs: the call ends
at the first `}` anywhere, a key runs to the next `:`, a string to the next `<escape>` (and the
character after it is skipped), any other value to the next `,` and is `json.loads`-ed (or kept as
text). So a forced call writes only what that reading gets back whole: scalar values, strings
holding neither `<escape>` nor `}`; a tool with an array or object parameter is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, Tag, ToolFormat, ToolRefused, arguments_prefix
from mlxhost.worker.engine.tool_formats.notation import Notation, Unwritable, Values
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters

__all__ = ["FORMATS", "FunctionGemma"]

ESCAPE: Final = "<escape>"


def _key_ok(name: str) -> bool:
    # A key runs to the first ":", and "}" ends the call; anything else is read back as written
    # (but "<", which might start the end marker's text).
    return bool(name) and not any(c in name for c in ":}<")


NOTATION: Final = Notation(delimiter=ESCAPE, nested=False, key_ok=_key_ok, sort_keys=True, excluded=("}",))
_NAME: Final = re.compile(r"\w+")  # the parser reads a name as `\w+`
_CALL: Final = re.compile(r"call:(\w+)\{")


class FunctionGemma(ToolFormat):
    parser = "function_gemma"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """Each call in its own markers (several when `parallel`)."""
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
                    f"tool '{tool.name}': FunctionGemma calls a tool by a name of \\w+", tools, i, param
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
        # The parser reads the first call of a body only, and pair by pair: the pairs whose value
        # can no longer change are read by the parser itself, as if the call closed there.
        match = _CALL.search(body)
        if match is None:
            return []
        name = match.group(1)
        rest = body[match.end() :]
        close = rest.find("}")
        end = close if close >= 0 else _settled(rest)
        try:
            arguments = self.parse(f"call:{name}{{{rest[:end]}}}", None)[0]["arguments"]
        except (ValueError, TypeError, IndexError, KeyError):
            return [PartialCall(name)]
        if not isinstance(arguments, dict):
            return [PartialCall(name)]
        return [PartialCall(name, arguments_prefix(arguments, complete=close >= 0))]


def _settled(text: str) -> int:
    """The end of the pairs of `text` (a call's arguments, its `}` not yet come) that the parser
    reads the same whatever comes next: a string pair once its closing `<escape>` came, any other
    once the `,` after its value came."""
    settled = pos = 0
    while (colon := text.find(":", pos)) >= 0:
        value = colon + 1
        if text.startswith(ESCAPE, value):
            end = text.find(ESCAPE, value + len(ESCAPE))
            if end < 0:
                break
            settled = end + len(ESCAPE)
            pos = settled + 1  # the parser skips the character after a string (the ",")
        elif ESCAPE.startswith(text[value:]):
            break  # maybe a string's opening `<escape>`, not all written yet
        else:
            comma = text.find(",", value)
            if comma < 0:
                break
            settled = comma
            pos = comma + 1
    return settled


FORMATS: Final = {"function_gemma": FunctionGemma()}
