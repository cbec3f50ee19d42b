"""Calls as a section of special tokens around JSON arguments (Moonshot's Kimi K2): mlx-lm's kimi_k2.

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(on one line: the template writes nothing between the tokens). A turn's calls share one section;
each call's id, `functions.NAME:IDX`, is the model's own (IDX counts the calls of the whole
conversation, which the grammar cannot know: it takes any number), and the parser returns it as
the call's id. The arguments are JSON, which the parser reads as they are.
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
    json_rule,
)
from mlxhost.worker.engine.tool_formats.partial_json import arguments_so_far
from mlxhost.worker.engine.tool_formats.schemas import checked_parameters
from mlxhost.worker.engine.tool_formats.xml_values import Unforceable, guard_json, lark_literal

__all__ = ["FORMATS", "KimiK2"]

CALL_BEGIN: Final = "<|tool_call_begin|>"
ARGUMENTS_BEGIN: Final = "<|tool_call_argument_begin|>"
CALL_END: Final = "<|tool_call_end|>"
# A call ends at its first end token, the section (for the output parser) at its own.
WORDS: Final = (CALL_END, "<|tool_calls_section_end|>")
INDEX: Final = (
    "/0|[1-9][0-9]{0,3}/"  # a conversation holds fewer calls than 10,000 (its context is too short)
)
# The id and the name, as the parser reads them from a call's head.
_HEAD: Final = re.compile(r"^\s*((?:functions\.)?(.+?):\d+)\s*<\|tool_call_argument_begin\|>", re.DOTALL)


class KimiK2(ToolFormat):
    parser = "kimi_k2"

    def grammar(self, tools: Sequence[ToolSpec], parallel: bool, tag: Tag, param: str) -> str:
        """One section holding one call (one or more when `parallel`) of one of `tools`."""
        if not tools:
            raise GrammarError("no tools to call", param)
        rules = []
        for i, tool in enumerate(tools):
            parameters = checked_parameters(tools, i, param)
            try:
                head = f"functions.{tool.name}:0"
                if self._read(f"{head}{ARGUMENTS_BEGIN}{{}}") != (tool.name, {}, head):
                    raise Unforceable("its name does not read back")
                arguments = json_rule(guard_json(parameters, WORDS))
            except Unforceable as exc:
                raise ToolRefused(f"tool '{tool.name}': {exc} (kimi_k2 calls)", tools, i, param) from None
            rules += [
                f"t{i}: {lark_literal(f'functions.{tool.name}:')} INDEX {tag(ARGUMENTS_BEGIN)} arguments_{i}",
                f"arguments_{i}: {arguments}",
            ]
        calls = " | ".join(f"t{i}" for i in range(len(tools)))
        return "\n".join(
            [
                f"start: {tag(self.call_start)} call{'+' if parallel else ''} {tag(self.call_end)}",
                f"call: {tag(CALL_BEGIN)} ({calls}) {tag(CALL_END)}",
                f"INDEX: {INDEX}",
                *rules,
            ]
        )

    def _read(self, call: str) -> tuple[str, Any, str] | None:
        """(name, arguments, id) of the one call `call` (between its begin and end tokens) as
        the parser reads it, or None."""
        try:
            calls = self.parse(f"{CALL_BEGIN}{call}{CALL_END}", None)
        except Exception:  # the parser's own errors: it does not read this back
            return None
        return (calls[0]["name"], calls[0]["arguments"], calls[0]["id"]) if len(calls) == 1 else None

    def partial(self, body: str, tools: Sequence[Mapping[str, Any]] | None) -> list[PartialCall]:
        # A call is known once its head (the id, and in it the name) reached the arguments
        # token; its arguments stream member by member, and whole once its end token came.
        out = []
        for chunk in body.split(CALL_BEGIN)[1:]:
            call, ended, _ = chunk.partition(CALL_END)
            if ended:
                if (read := self._read(call)) is None:
                    break  # the parser fails on the whole section
                name, arguments, call_id = read
                # Arguments that are not an object (a Python literal, a string) come at the end.
                text = json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, dict) else ""
                out.append(PartialCall(name, text, call_id))
                continue
            if (head := _HEAD.match(call)) is None:
                break
            text = arguments_so_far(call[head.end() :]) or ""
            out.append(PartialCall(head.group(2), text, head.group(1)))
            break
        return out


FORMATS: Final = {"kimi_k2": KimiK2()}
