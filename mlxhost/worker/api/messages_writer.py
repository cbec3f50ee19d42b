"""An answer as Anthropic writes a message: whole, or as its stream of block events.

Blocks in the order the model wrote them: thinking, text, and one `tool_use` block per call. A
stream opens with `message_start` and a ping, streams each block as start, deltas and stop (a call's
input as `input_json_delta` pieces while the model writes it), and ends with `message_delta` (the
stop reason and the usage) and `message_stop`. A call the token limit cut off ends its block in a
stream as far as it got; a whole message leaves it out.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlxhost.wire.chunks import AnswerFinish, Delta, ToolCall
from mlxhost.wire.dialect import Dialect, sse_error, sse_event
from mlxhost.wire.errors import APIError
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.parts import CallArguments, CallBegun, CallEnded, Output, Text

__all__ = ["MessagesWriter"]


@dataclass
class MessagesWriter:
    """A generation as Anthropic writes a message: whole, or as its stream of block events."""

    model: str
    prompt_tokens: int
    id: str = field(default_factory=lambda: f"msg_{uuid.uuid4().hex[:24]}")
    _open: str | None = None  # the kind of block being streamed ("thinking", "text", "tool_use")
    _blocks: int = 0  # blocks started so far: each has its index

    def opening(self) -> Iterable[bytes]:
        # How much of the prompt the cache served is known once the generation starts: the
        # message_delta at the end tells the split (its usage replaces this one's).
        usage = _usage(self.prompt_tokens, Delta())
        start = {"type": "message_start", "message": self._message([], None, None, usage)}
        return [sse_event(start), sse_event({"type": "ping"})]

    def output(self, out: Output, delta: Delta) -> Iterable[bytes]:
        frames = []
        for part in out.parts:
            if isinstance(part, Text) and part.kind == "reasoning":
                frames += self._into("thinking", {"type": "thinking_delta", "thinking": part.text})
            elif isinstance(part, Text):
                frames += self._into("text", {"type": "text_delta", "text": part.text})
            elif isinstance(part, CallBegun):
                frames += self._close()
                block = {"type": "tool_use", "id": _tool_use_id(part.id), "name": part.name, "input": {}}
                frames.append(self._start(block))
                self._open = "tool_use"
            elif isinstance(part, CallArguments):
                frames.append(self._delta({"type": "input_json_delta", "partial_json": part.text}))
            else:
                frames += self._close()
        return frames

    def closing(self, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        reason, sequence = _stop_reason(final, finish)
        ending = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": _usage(self.prompt_tokens, final),
        }
        return [*self._close(), sse_event(ending), sse_event({"type": "message_stop"})]

    def failure(self, error: APIError) -> Iterable[bytes]:
        return [sse_error(error, Dialect.MESSAGES)]

    def whole(self, answer: Answer) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        for part in answer.output.parts:
            if isinstance(part, Text) and part.kind == "reasoning":
                content.append({"type": "thinking", "thinking": part.text, "signature": ""})
            elif isinstance(part, Text):
                content.append({"type": "text", "text": part.text})
            elif isinstance(part, CallEnded) and part.call is not None:
                content.append(_tool_use(part.call))
        reason, sequence = _stop_reason(answer.final, answer.finish)
        return self._message(content, reason, sequence, _usage(self.prompt_tokens, answer.final))

    def _message(
        self, content: list[dict[str, Any]], reason: str | None, sequence: str | None, usage: dict[str, int]
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage,
        }

    def _into(self, kind: str, delta: dict[str, Any]) -> list[bytes]:
        """`delta` in a block of `kind`: the open one, or a new one after closing another."""
        frames = []
        if self._open != kind:
            frames += self._close()
            empty = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else None
            frames.append(self._start(empty or {"type": "text", "text": ""}))
            self._open = kind
        frames.append(self._delta(delta))
        return frames

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        frames = []
        if self._open == "thinking":
            # Anthropic signs its thinking so that it can be handed back unchanged; nothing here
            # checks a signature, so it is empty.
            frames.append(self._delta({"type": "signature_delta", "signature": ""}))
        self._open = None
        return [*frames, sse_event({"type": "content_block_stop", "index": self._blocks - 1})]

    def _start(self, block: dict[str, Any]) -> bytes:
        self._blocks += 1
        return sse_event({"type": "content_block_start", "index": self._blocks - 1, "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_event({"type": "content_block_delta", "index": self._blocks - 1, "delta": delta})


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    # Anthropic's input is always an object; a call whose arguments are not one (only a model not
    # held by a grammar writes such) has no input the client could use.
    return {
        "type": "tool_use",
        "id": _tool_use_id(call.id),
        "name": call.name,
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else f"toolu_{call_id.removeprefix('call_')}"


def _stop_reason(final: Delta, finish: AnswerFinish) -> tuple[str, str | None]:
    """Anthropic's stop_reason, and the stop sequence that ended the message if one did."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if final.stop_sequence is not None:
        return "stop_sequence", final.stop_sequence
    return "end_turn", None


def _usage(prompt_tokens: int, final: Delta) -> dict[str, int]:
    # Anthropic counts the prompt tokens read from its cache apart from input_tokens.
    cached = final.cached_tokens
    return {
        "input_tokens": prompt_tokens - cached,
        "output_tokens": final.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }
