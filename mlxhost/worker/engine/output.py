"""A generation's text, split as it streams into the answer, its reasoning, and its tool calls.

A model that thinks writes its reasoning between markers (`<think>` … `</think>`), and one that
calls a tool writes each call between its own (`<tool_call>` … `</tool_call>`); mlx-lm's tokenizer
knows both, and the parser for the call's body. This reads the text as it comes and sorts it: the
answer and the reasoning go out as they arrive, a call once its closing marker came and its body
parsed. A tail that could be the start of a marker is held back until the next text tells.

mlx-lm's own splitter lives inside its HTTP server module (not an API it offers), so this is our
own, kept to the markers the tokenizer names.
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlxhost.wire.chunks import ToolCall

__all__ = ["Markers", "Output", "OutputParser", "new_call_id"]

logger = logging.getLogger("mlxhost.engine")

ToolParser = Callable[[str, Any], Any]  # mlx-lm's: a call's body (and the tools) -> {name, arguments}


@dataclass(frozen=True)
class Markers:
    """The marker strings a model writes around its reasoning and its tool calls (None: it has none)."""

    think_start: str | None = None
    think_end: str | None = None
    call_start: str | None = None
    call_end: str | None = None


@dataclass
class Output:
    """What one piece of text turned out to be."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)

    def add(self, other: Output) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        self.tool_calls += other.tool_calls


class _Mode(enum.Enum):
    ANSWER = "answer"
    REASONING = "reasoning"
    CALL = "call"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class OutputParser:
    """Feed it text as it comes (`feed`), then `finish`; each returns what is now known of it.

    `parse_call` is None when calls are not to be read (no tools were offered, or `tool_choice`
    was "none"): then their markers are just text. `reasoning` says the prompt left the model
    inside a think block (a template that opens it in the generation prompt).
    """

    def __init__(
        self,
        markers: Markers,
        parse_call: ToolParser | None = None,
        tools: Sequence[Any] | None = None,
        reasoning: bool = False,
    ) -> None:
        self._markers = markers
        self._parse_call = parse_call if markers.call_start and markers.call_end else None
        self._tools = tools
        self._thinks = bool(markers.think_start and markers.think_end)
        self._mode = _Mode.REASONING if reasoning and self._thinks else _Mode.ANSWER
        self._held = ""  # text not yet sorted: a marker may be starting in it
        self._call = ""  # the body of the call being written
        # Just past a marker: the newlines a template writes after one are layout, not text.
        self._trim = self._mode is _Mode.REASONING
        self.calls_made = 0
        self.calls_cut = 0  # calls the text ended inside of

    def feed(self, text: str) -> Output:
        out = Output()
        text = self._held + text
        self._held = ""
        while text:
            markers = self._awaited()
            found = [(at, m) for m in markers if (at := text.find(m)) >= 0]
            if found:
                at, marker = min(found)
                self._emit(out, text[:at])
                text = text[at + len(marker) :]
                self._cross(marker, out)
                continue
            keep = max((_partial(text, m) for m in markers), default=0)
            self._emit(out, text[: len(text) - keep])
            self._held = text[len(text) - keep :]
            break
        return out

    def finish(self) -> Output:
        """The text ended: whatever is held is what it is; a call never closed is dropped."""
        out = Output()
        held, self._held = self._held, ""
        if self._mode is _Mode.CALL:
            # Cut off (by max_tokens, or a stop string): not a call the client could make, and its
            # markup is not an answer either (as text it would read as one, ahead of the calls
            # that did complete). The finish reason says the output was cut.
            logger.info("a tool call was cut off before its end marker; it is dropped")
            self.calls_cut += 1
            self._call = ""
            self._mode = _Mode.ANSWER
        else:
            self._emit(out, held)
        return out

    def _awaited(self) -> list[str]:
        """The markers that would change the mode now."""
        m = self._markers
        if self._mode is _Mode.REASONING:
            return [m.think_end] if m.think_end else []
        if self._mode is _Mode.CALL:
            return [m.call_end] if m.call_end else []
        starts = [m.think_start if self._thinks else None, m.call_start if self._parse_call else None]
        return [s for s in starts if s]

    def _emit(self, out: Output, text: str) -> None:
        if self._trim and self._mode is not _Mode.CALL:  # a call's body is kept as written
            text = text.lstrip("\n")
            self._trim = not text
        if not text:
            return
        if self._mode is _Mode.REASONING:
            out.reasoning += text
        elif self._mode is _Mode.CALL:
            self._call += text
        else:
            out.content += text

    def _cross(self, marker: str, out: Output) -> None:
        m = self._markers
        self._trim = True
        if self._mode is _Mode.REASONING:
            self._mode = _Mode.ANSWER
        elif self._mode is _Mode.CALL:
            out.tool_calls += self._read_call(out)
            self._call = ""
            self._mode = _Mode.ANSWER
        elif marker == m.think_start:
            self._mode = _Mode.REASONING
        else:
            self._mode = _Mode.CALL

    def _read_call(self, out: Output) -> list[ToolCall]:
        assert self._parse_call is not None
        try:
            parsed = self._parse_call(self._call, self._tools)
        except Exception as exc:  # each parser raises its own kind of error on a malformed body
            logger.info("a tool call did not parse (%s); answering it as text", type(exc).__name__)
            out.content += f"{self._markers.call_start}{self._call}{self._markers.call_end}"
            return []
        calls = []
        for item in parsed if isinstance(parsed, list) else [parsed]:
            call = _tool_call(item)
            if call is None:
                out.content += f"{self._markers.call_start}{self._call}{self._markers.call_end}"
                return []
            calls.append(call)
        self.calls_made += len(calls)
        return calls


def _tool_call(item: Any) -> ToolCall | None:
    if not isinstance(item, dict) or not isinstance(name := item.get("name"), str) or not name:
        return None
    arguments = item.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    call_id = item.get("id")
    return ToolCall(call_id if isinstance(call_id, str) and call_id else new_call_id(), name, arguments)


def _partial(text: str, marker: str) -> int:
    """The length of the longest tail of `text` that is a proper prefix of `marker`."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
