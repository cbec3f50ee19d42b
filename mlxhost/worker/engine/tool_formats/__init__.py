"""Each model family's tool-call syntax, as mlx-lm reads it: how to force it, and how to stream it.

mlx-lm picks a parser per family from the chat template (`tokenizer.tool_parser`, a module of
`mlx_lm.tool_parsers`) and reads a call only once its end marker came. A `ToolFormat` adds the two
things a server needs on top of that, for the same syntax:

- `grammar`: the family's calls as a Lark grammar for llguidance, so that a forced `tool_choice`
  yields calls that the family's own parser reads and whose arguments validate against the tool's
  schema;
- `partial`: what is known of the calls while their body is still being written (the name, then
  the arguments as a growing prefix of their final JSON text), so that a stream can send them as
  deltas.

One module per syntax; `tool_format(parser)` finds the one for a parser's module name. A family
whose syntax has no `ToolFormat` yet is refused when a call is forced (the 400 names
`tool_choice`), never silently unenforced, and its calls stream whole.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec

__all__ = [
    "FORMATS",
    "JSON_OPTIONS",
    "PartialCall",
    "Tag",
    "ToolFormat",
    "ToolRefused",
    "arguments_prefix",
    "available",
    "json_rule",
    "tool_format",
]

# A literal of the grammar, as Lark source: a marker that is one token of the model's vocabulary
# (a special token) is matched by its id, anything else as a quoted string.
Tag = Callable[[str], str]

# JSON as Python's json.dumps and Qwen-family models write it: ", " and ": ", no other whitespace
# (a model given room for whitespace may loop on it until max_tokens). Whatever llguidance cannot
# enforce is refused rather than skipped, so an output the grammar allows always validates.
JSON_OPTIONS: Final = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": False,
    "coerce_one_of": False,
}


class ToolRefused(GrammarError):
    """A tool the family's syntax cannot force: `tool` is its index in the tools given."""

    def __init__(self, message: str, tools: Sequence[ToolSpec], tool: int, param: str) -> None:
        super().__init__(message, tools[tool].param or param)
        self.tool = tool


@dataclass(frozen=True)
class PartialCall:
    """One call as far as its body was written.

    `arguments` is always a prefix of the JSON text the finished call's arguments will have
    (`json.dumps(arguments, ensure_ascii=False)` of what the family's parser returns), so a
    stream may send it piece by piece and the pieces assemble to exactly the whole call.
    """

    name: str | None  # None until the model wrote the whole name
    arguments: str = ""
    id: str | None = None  # the model's own id for the call, in families that write one


class ToolFormat(ABC):
    """A family's tool-call syntax. Subclasses name mlx-lm's parser module (`parser`) and its
    markers, which are the parser module's own `tool_call_start` and `tool_call_end`."""

    parser: str  # the module's name in mlx_lm.tool_parsers, e.g. "qwen3_coder"

    @property
    def call_start(self) -> str:
        return str(self._module().tool_call_start)

    @property
    def call_end(self) -> str:
        return str(self._module().tool_call_end)

    def parse(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
        """The calls in a finished body, by mlx-lm's own parser: each {"name", "arguments"[, "id"]}.
        `tools` in OpenAI's function form (the parser reads the parameters' types from them)."""
        parsed = self._module().parse_tool_call(body, tools)
        return parsed if isinstance(parsed, list) else [parsed]

    @abstractmethod
    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """The Lark grammar (llguidance's dialect) of the output when a call is forced: the start
        marker, one call to one of `tools` (one or more when `parallel`), the end marker, laid out
        as the family's chat template writes calls. Raises GrammarError naming `param`, or
        ToolRefused for one tool whose parameters the syntax cannot carry."""

    @abstractmethod
    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        """The calls begun in `body`, the text after the start marker so far (the end marker not
        yet come). Must not raise: a body it cannot read yet is [] or a call with what is known."""

    def _module(self) -> Any:
        return importlib.import_module(f"mlx_lm.tool_parsers.{self.parser}")


def json_rule(schema: Mapping[str, Any]) -> str:
    """A Lark rule body forcing one JSON value of `schema`, in the layout of `JSON_OPTIONS`."""
    options = {k: v for k, v in schema.items() if k != "x-guidance"}
    return "%json " + json.dumps({**options, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)


def arguments_prefix(arguments: Mapping[str, Any], complete: bool = False) -> str:
    """The JSON text of `arguments` as a finished call writes it; without its closing brace when
    not `complete` (more keys may follow), which keeps it a prefix of the final text."""
    text = json.dumps(dict(arguments), ensure_ascii=False)
    return text if complete else text[:-1]


# The module in this package of each parser mlx-lm 0.32 has (several parsers share a syntax).
FORMATS: Final[dict[str, str]] = {
    "json_tools": "json_tools",
    "qwen3_coder": "qwen3_coder",
    "minimax_m2": "minimax",
    "minicpm5": "minicpm",
    "muse_spark": "muse_spark",
    "glm47": "arg_keys",
    "laguna": "arg_keys",
    "longcat": "arg_keys",
    "kimi_k3": "kimi_k3",
    "kimi_k2": "kimi_k2",
    "mistral": "mistral",
    "pythonic": "pythonic",
    "gemma4": "gemma4",
    "function_gemma": "function_gemma",
}


def tool_format(parser: str | None) -> ToolFormat | None:
    """The format of mlx-lm's parser `parser` (its module's name), or None if there is none."""
    if parser is None or parser not in FORMATS:
        return None
    name = f"{__name__}.{FORMATS[parser]}"
    if importlib.util.find_spec(name) is None:
        return None
    formats: dict[str, ToolFormat] = importlib.import_module(name).FORMATS
    return formats.get(parser)


def available() -> list[str]:
    """The parsers that have a format here, sorted."""
    return sorted(p for p in FORMATS if tool_format(p) is not None)
