"""Calls as a JSON object between tags (Hermes, Qwen 2.5/3, the demo model): mlx-lm's json_tools.

<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call>
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import (
    JSON_OPTIONS,
    PartialCall,
    Tag,
    ToolFormat,
)
from mlxhost.worker.engine.tool_formats.partial_json import arguments_so_far
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters, rebase

__all__ = ["FORMATS", "JsonTools"]

_NAME: Final = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*', re.DOTALL)


class JsonTools(ToolFormat):
    parser = "json_tools"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """The body is one JSON schema, an anyOf with one branch per tool, each an object whose
        "name" is that tool's and whose "arguments" are its parameters (llguidance keeps "name"
        first). Laid out as chat templates write a call: the tags on lines of their own."""
        if not tools:
            raise GrammarError("no tools to call", param)
        branches = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            # The parameters move into a larger document: their local references must follow.
            arguments = rebase(parameters, f"#/anyOf/{i}/properties/arguments")
            branches.append(
                {
                    "type": "object",
                    "properties": {"name": {"const": tool.name}, "arguments": arguments},
                    "required": ["name", "arguments"],
                    "additionalProperties": False,
                }
            )
        body = json.dumps({"anyOf": branches, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)
        rules = [
            "start: call (NL call)*" if parallel else "start: call",
            f"call: {tag(self.call_start)} NL body NL {tag(self.call_end)}",
            f"body: %json {body}",
            'NL: "\\n"',
        ]
        return "\n".join(rules)

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        # Models write "name" first (the template and the grammar both do); a body that puts
        # "arguments" first streams whole at its end.
        match = _NAME.match(body)
        if match is None:
            return []
        try:
            name = json.loads(match.group(1))
        except ValueError:
            return []
        text = arguments_so_far(body[match.end() :])
        if text is None:
            return [PartialCall(name)]
        return [PartialCall(name, text)]


FORMATS: Final = {"json_tools": JsonTools()}
