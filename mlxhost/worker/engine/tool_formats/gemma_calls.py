"""What Gemma 4's and FunctionGemma's forced calls share: `call:NAME{key:value,…}` in Gemma's
notation (notation.py), each call between its own markers. Each family says its notation, the
names its parser reads, and how it streams."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace

from mlxhost.worker.engine.grammar import GrammarError, ToolSpec
from mlxhost.worker.engine.tool_formats import Tag, ToolFormat, ToolRefused
from mlxhost.worker.engine.tool_formats.notation import Notation, Unwritable, Values
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters

__all__ = ["GemmaCalls"]


class GemmaCalls(ToolFormat):
    family: str  # as the refusals name it
    notation: Notation
    name: re.Pattern[str]  # a tool name the parser reads whole
    name_rule: str  # the same, as the refusals say it

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """Each call in its own markers, as the template writes them (several when `parallel`)."""
        if not tools:
            raise GrammarError("no tools to call", param)
        # A string holding the end marker's text would end the call there (the output is read
        # as text): strings never do.
        notation = replace(self.notation, excluded=(*self.notation.excluded, self.call_end))
        rules: list[str] = []
        branches = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            if not self.name.fullmatch(tool.name):
                raise ToolRefused(
                    f"tool '{tool.name}': {self.family} calls a tool by a name of {self.name_rule}",
                    tools,
                    i,
                    param,
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
