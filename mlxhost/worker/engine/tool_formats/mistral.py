"""Mistral's calls: mlx-lm's mistral parser.

[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]ping[ARGS]{}

Current templates (v11 tokenizers and later: Mistral Small 3.x, Devstral, Magistral, Ministral 3)
write each call as `[TOOL_CALLS]NAME[ARGS]` and its arguments as JSON; older ones wrote one JSON
list, `[TOOL_CALLS] [{"name": …, "arguments": {…}}]`, which the parser reads too. There is no end
marker: a body runs to the end of the output, holding every call after the first `[TOOL_CALLS]`,
so a forced call is written in the current form and ends the output.
"""

from __future__ import annotations

import json
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
from mlxhost.worker.engine.tool_formats.partial_json import arguments_so_far, object_end
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters

__all__ = ["FORMATS", "Mistral"]

ARGS: Final = "[ARGS]"
# The parser finds a call by its header, `NAME[ARGS]` (NAME as `[\w-]+`), then reads one JSON value.
_HEADER: Final = re.compile(r"([\w-]+)\s*\[ARGS\]\s*")
_NAME: Final = re.compile(r"[\w-]+")
# A call of the older JSON list, its "name" first as those templates write it.
_LISTED: Final = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*', re.DOTALL)


class Mistral(ToolFormat):
    parser = "mistral"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """Each call after its own `[TOOL_CALLS]`, as the current templates write them."""
        if not tools:
            raise GrammarError("no tools to call", param)
        rules = []
        for i, tool in enumerate(tools):
            parameters = dict(checked_parameters(tools, i, param))
            if not _NAME.fullmatch(tool.name):
                raise ToolRefused(
                    f"tool '{tool.name}': Mistral calls a tool by a name of [\\w-]+", tools, i, param
                )
            kind = parameters.get("type", "object")
            if kind != "object" and not (isinstance(kind, list) and "object" in kind):
                raise ToolRefused(
                    f"tool '{tool.name}': its arguments must be an object, but the schema's type is "
                    f"{json.dumps(kind)}",
                    tools,
                    i,
                    param,
                )
            # The parser takes any JSON value for the arguments: the grammar, an object only.
            parameters["type"] = "object"
            name = json.dumps(tool.name, ensure_ascii=False)
            rules.append(f"t{i}: {name} {tag(ARGS)} {json_rule(parameters)}")
        calls = " | ".join(f"t{i}" for i in range(len(tools)))
        start = "start: call+" if parallel else "start: call"
        return "\n".join([start, f"call: {tag(self.call_start)} ({calls})", *rules])

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        if body.lstrip().startswith("["):
            return _listed(body.lstrip()[1:])
        calls = []
        pos = 0
        while (header := _HEADER.search(body, pos)) is not None:
            name = header.group(1)
            rest = body[header.end() :]
            end = object_end(rest)
            if end is not None:
                try:
                    arguments = json.loads(rest[:end])
                except ValueError:
                    return [*calls, PartialCall(name)]
                calls.append(PartialCall(name, arguments_prefix(arguments, complete=True)))
                pos = header.end() + end
                continue
            so_far = arguments_so_far(rest)
            calls.append(PartialCall(name) if so_far is None else PartialCall(name, so_far))
            break
        return calls


def _listed(text: str) -> list[PartialCall]:
    """The calls of the older JSON list, `text` the list after its `[`: each once its name came,
    its arguments member by member while they are an object."""
    calls = []
    while (match := _LISTED.match(text)) is not None:
        try:
            name = json.loads(match.group(1))
        except ValueError:
            break
        end = object_end(text)
        if end is None:
            so_far = arguments_so_far(text[match.end() :])
            calls.append(PartialCall(name) if so_far is None else PartialCall(name, so_far))
            break
        try:
            call = json.loads(text[:end])
        except ValueError:
            break
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # as the parser does: some templates write a JSON string
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if not isinstance(arguments, dict):
            calls.append(PartialCall(name))
            break
        call_id = call.get("id") if isinstance(call.get("id"), str) else None
        calls.append(PartialCall(name, arguments_prefix(arguments, complete=True), call_id))
        comma = re.match(r"\s*,", text[end:])
        if comma is None:
            break
        text = text[end + comma.end() :]
    return calls


FORMATS: Final = {"mistral": Mistral()}
