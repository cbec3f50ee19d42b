"""What a piece of a generation's output turned out to be (output.py sorts it): its `Part`s in the
order the model wrote them (answer or reasoning `Text`, and each tool call as it is announced,
grows and ends), and the same summed up in an `Output`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mlxhost.wire.chunks import ToolCall

__all__ = ["CallArguments", "CallBegun", "CallEnded", "Output", "Part", "Text"]


@dataclass(frozen=True)
class Text:
    """Answer or reasoning text."""

    kind: Literal["content", "reasoning"]
    text: str


@dataclass(frozen=True)
class CallBegun:
    """A call's name is known: a stream announces the call (`index` counts the generation's calls)."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class CallArguments:
    """More of a begun call's arguments: the pieces, in order, are its arguments' JSON text."""

    index: int
    text: str


@dataclass(frozen=True)
class CallEnded:
    """A begun call is over: `call` is it whole, or None when it never finished (cut off by the
    token limit, or unreadable): a stream ends what it sent of it, a whole answer leaves it out."""

    index: int
    call: ToolCall | None


Part = Text | CallBegun | CallArguments | CallEnded


@dataclass
class Output:
    """What one piece of text turned out to be: its `parts` in the order they were written, and
    the same summed up (the answer, the reasoning, the calls that completed)."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Made from its sums alone (a writer's test, a stored answer): in the usual order.
        if self.parts:
            return
        if self.reasoning:
            self.parts.append(Text("reasoning", self.reasoning))
        if self.content:
            self.parts.append(Text("content", self.content))
        for i, call in enumerate(self.tool_calls):
            self.parts += [CallBegun(i, call.id, call.name), CallArguments(i, call.arguments)]
            self.parts.append(CallEnded(i, call))

    def __bool__(self) -> bool:
        return bool(self.parts)

    def add(self, other: Output) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        self.tool_calls += other.tool_calls
        for part in other.parts:
            self._append(part)

    def text(self, kind: Literal["content", "reasoning"], text: str) -> None:
        if not text:
            return
        if kind == "content":
            self.content += text
        else:
            self.reasoning += text
        self._append(Text(kind, text))

    def call_part(self, part: CallBegun | CallArguments | CallEnded) -> None:
        if isinstance(part, CallEnded) and part.call is not None:
            self.tool_calls.append(part.call)
        self._append(part)

    def _append(self, part: Part) -> None:
        last = self.parts[-1] if self.parts else None
        if isinstance(part, Text) and isinstance(last, Text) and last.kind == part.kind:
            self.parts[-1] = Text(part.kind, last.text + part.text)
        elif isinstance(part, CallArguments) and isinstance(last, CallArguments) and last.index == part.index:
            self.parts[-1] = CallArguments(part.index, last.text + part.text)
        else:
            self.parts.append(part)
