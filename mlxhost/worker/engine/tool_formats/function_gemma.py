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

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.tool_formats import PartialCall, arguments_prefix
from mlxhost.worker.engine.tool_formats.gemma_calls import GemmaCalls
from mlxhost.worker.engine.tool_formats.notation import Notation

__all__ = ["FORMATS", "FunctionGemma"]

ESCAPE: Final = "<escape>"


def _key_ok(name: str) -> bool:
    # A key runs to the first ":", and "}" ends the call; anything else is read back as written
    # (but "<", which might start the end marker's text).
    return bool(name) and not any(c in name for c in ":}<")


NOTATION: Final = Notation(delimiter=ESCAPE, nested=False, key_ok=_key_ok, sort_keys=True, excluded=("}",))
_NAME: Final = re.compile(r"\w+")  # the parser reads a name as `\w+`
_CALL: Final = re.compile(r"call:(\w+)\{")


class FunctionGemma(GemmaCalls):
    family = "FunctionGemma"
    notation = NOTATION
    name = _NAME
    name_rule = r"\w+"
    parser = "function_gemma"

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
