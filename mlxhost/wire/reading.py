"""Reading a response back as it goes past: what it says about itself.

`StreamReader` reads a stream's frames (the parent's relay feeds it every chunk it forwards), and
`read_whole` a whole answer, each telling what the response said about itself (whether text has
started, how it finished, the usage, an error, its end) by parsing the JSON, so the parent
depends on the shapes the worker's writers produce and not on how compactly the worker writes
them. Every dialect (see dialect.py) reads into the same `Reading`:

    OpenAI chat, completions   no "type": `choices`, `usage`, `error`, then `data: [DONE]`
    Anthropic Messages         "type": message_start, content_block_delta, message_delta,
                               message_stop, error; whole, "message" (or an "error" body)
    OpenAI Responses           "type": response.*.delta, response.completed / incomplete /
                               failed, error; whole, an object "response"

Finish reasons are told in the chat vocabulary the session records use (stop, length,
tool_calls), and usage as `Usage`: prompt tokens in all (Anthropic counts cache reads and writes
apart from `input_tokens`; they are added back), completion tokens, cached prompt tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlxhost.wire.chunks import Usage

__all__ = ["MAX_FRAME", "ErrorReport", "Reading", "StreamReader", "read_whole"]

# The most bytes of one unfinished frame a reader holds: the worker's largest (a merged delta
# with top logprobs) is tens of kilobytes. A longer one is dropped, not held without bound.
MAX_FRAME = 1 << 20


@dataclass(frozen=True)
class ErrorReport:
    """An error (an error body's `error`, or an error event) read back from a response."""

    message: str
    type: str | None = None
    code: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErrorReport:
        kind, code = data.get("type"), data.get("code")
        if code is None and isinstance(details := data.get("details"), dict):
            code = details.get("error_code")  # where Anthropic's errors keep mlxhost's code
        return cls(
            str(data.get("message", "")),
            None if kind is None else str(kind),
            None if code is None else str(code),
        )


@dataclass
class Reading:
    """What a response has said about itself so far."""

    text_seen: bool = False  # the model's output has begun (a role alone, or "", is not text)
    finish_reasons: dict[int, str] = field(default_factory=dict)  # by choice index
    finish_reason: str | None = None  # the last one read, of any choice
    usage: Usage | None = None
    error: ErrorReport | None = None
    done: bool = False  # the stream said it ended: `data: [DONE]`, message_stop, response.completed...
    frames: int = 0  # JSON objects read

    def note(self, data: dict[str, Any]) -> None:
        """Take in one chunk or event, whole answer or error body."""
        self.frames += 1
        kind = data.get("type")
        if kind is not None:  # Anthropic's or Responses' (OpenAI's chat and completions have none)
            if isinstance(kind, str) and (read := _BY_TYPE.get(kind)) is not None:
                read(self, data)
            return
        error = data.get("error")
        if isinstance(error, dict):
            self.error = ErrorReport.from_json(error)
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage.from_json(usage) or self.usage
        choices = data.get("choices")
        if not isinstance(choices, list):
            if data.get("object") == "response":  # a whole Responses answer
                self._response(data)
            return
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                continue
            if not self.text_seen:
                text = _text_of(choice)
                self.text_seen = isinstance(text, str) and text != ""
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                index = choice.get("index")
                self.finish_reasons[index if isinstance(index, int) else position] = finish
                self.finish_reason = finish

    def _finish(self, reason: str) -> None:
        self.finish_reasons[0] = reason
        self.finish_reason = reason

    # -- Anthropic Messages ----------------------------------------------------------------------

    def _message_start(self, data: dict[str, Any]) -> None:
        if isinstance(message := data.get("message"), dict):
            self.usage = _anthropic_usage(message.get("usage"), self.usage)

    def _content_block_delta(self, data: dict[str, Any]) -> None:
        if not self.text_seen and isinstance(delta := data.get("delta"), dict):
            kind = delta.get("type")
            text = delta.get(_DELTA_TEXT.get(kind, "")) if isinstance(kind, str) else None
            self.text_seen = isinstance(text, str) and text != ""

    def _message_delta(self, data: dict[str, Any]) -> None:
        if isinstance(delta := data.get("delta"), dict) and isinstance(stop := delta.get("stop_reason"), str):
            self._finish(_STOP_REASONS.get(stop, stop))
        self.usage = _anthropic_usage(data.get("usage"), self.usage)

    def _message_stop(self, data: dict[str, Any]) -> None:
        self.done = True

    def _message(self, data: dict[str, Any]) -> None:
        content = data.get("content")
        if isinstance(content, list):
            self.text_seen = any(_block_has_text(block) for block in content)
        if isinstance(stop := data.get("stop_reason"), str):
            self._finish(_STOP_REASONS.get(stop, stop))
        self.usage = _anthropic_usage(data.get("usage"), self.usage)

    def _error(self, data: dict[str, Any]) -> None:
        error = data.get("error")
        if isinstance(error, dict):  # Anthropic's: {"type": "error", "error": {type, message}}
            self.error = ErrorReport.from_json(error)
        else:  # Responses': {"type": "error", code, message, param}
            code = data.get("code")
            self.error = ErrorReport(str(data.get("message", "")), None, None if code is None else str(code))

    # -- OpenAI Responses ------------------------------------------------------------------------

    def _text_delta(self, data: dict[str, Any]) -> None:
        if not self.text_seen:
            delta = data.get("delta")
            self.text_seen = isinstance(delta, str) and delta != ""

    def _response_ended(self, data: dict[str, Any]) -> None:
        self.done = True
        if isinstance(response := data.get("response"), dict):
            self._response(response)

    def _response(self, response: dict[str, Any]) -> None:
        """A Responses answer: whole, or carried by the stream's last event."""
        if isinstance(usage := response.get("usage"), dict):
            self.usage = _responses_usage(usage) or self.usage
        output = response.get("output")
        items = [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []
        if not self.text_seen:
            self.text_seen = any(_item_has_text(item) for item in items)
        status = response.get("status")
        if status == "completed":
            calls = any(item.get("type") == "function_call" for item in items)
            self._finish("tool_calls" if calls else "stop")
        elif status == "incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            self._finish("length" if reason == "max_output_tokens" else str(reason or "incomplete"))
        elif isinstance(error := response.get("error"), dict):
            self.error = ErrorReport.from_json(error)


class StreamReader(Reading):
    """Reads an SSE stream's `data:` frames as its bytes go past, however the reads split them.

    Only complete frames are parsed, each with one `json.loads`: the relay feeds this every chunk
    it forwards, so a chunk costs a search for the blank line that ends a frame, and a frame one
    parse. Lines may end in LF, CRLF or CR and a frame's data may span several `data:` lines (so
    pretty-printed JSON reads the same as compact); comments (keep-alives) and other fields are
    skipped. As SSE says, an unfinished frame at the end of the stream is not an event.
    """

    def __init__(self) -> None:
        super().__init__()
        self._pending = b""  # the start of a frame whose end has not come yet
        self.dropped = 0  # frames longer than MAX_FRAME, not read

    def feed(self, data: bytes) -> None:
        """Read every frame that `data` completes; keep an unfinished one for the next call."""
        if not data:
            return
        held = len(self._pending)
        pending = self._pending + data if held else data
        if b"\r" in pending:
            # The worker writes LF; other line ends become LF here. A CR at the very end waits:
            # it may be the first half of a CRLF.
            cr = pending.endswith(b"\r")
            body = pending[:-1] if cr else pending
            pending = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if cr else b"")
        # What was held had no blank line in it: search only where `data` may have made one.
        end = pending.rfind(b"\n\n", max(held - 2, 0))
        if end < 0:
            if len(pending) > MAX_FRAME:
                self.dropped += 1
                pending = b""
            self._pending = pending
            return
        self._pending = pending[end + 2 :]
        for frame in pending[:end].split(b"\n\n"):
            self._frame(frame)

    def _frame(self, frame: bytes) -> None:
        if frame.startswith(b"data: ") and b"\n" not in frame:
            payload = frame[6:]  # the worker's OpenAI frames: one data line
        elif (
            frame.startswith(b"event: ")
            and (at := frame.find(b"\ndata: ")) > 0
            and frame.find(b"\n", at + 1) < 0
        ):
            payload = frame[at + 7 :]  # its Anthropic and Responses frames: an event line, a data line
        else:
            values = []
            for line in frame.split(b"\n"):
                if line.startswith(b"data:"):
                    value = line[5:]
                    values.append(value[1:] if value.startswith(b" ") else value)
            if not values:
                return  # a comment, another field, or nothing
            payload = b"\n".join(values)
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):
            return
        if isinstance(data, dict):
            self.note(data)


def read_whole(body: bytes) -> Reading | None:
    """What a whole answer (or an error body) says; None when it is not a JSON object."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    reading = Reading()
    reading.note(data)
    return reading


def _text_of(choice: dict[str, Any]) -> Any:
    # A stream's chat chunk says `delta`, a whole chat answer `message`, a text completion `text`.
    for key in ("delta", "message"):
        if isinstance(part := choice.get(key), dict):
            return part.get("content")
    return choice.get("text")


# Anthropic's stop reasons in the chat vocabulary; any other (pause_turn, refusal) is kept as it is.
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
}
# Where each kind of content_block_delta carries the model's output.
_DELTA_TEXT = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}

_BY_TYPE: dict[str, Callable[[Reading, dict[str, Any]], None]] = {
    "message_start": Reading._message_start,
    "content_block_delta": Reading._content_block_delta,
    "message_delta": Reading._message_delta,
    "message_stop": Reading._message_stop,
    "message": Reading._message,
    "error": Reading._error,
    "response.output_text.delta": Reading._text_delta,
    "response.reasoning_text.delta": Reading._text_delta,
    "response.function_call_arguments.delta": Reading._text_delta,
    "response.completed": Reading._response_ended,
    "response.incomplete": Reading._response_ended,
    "response.failed": Reading._response_ended,
}


def _anthropic_usage(data: Any, known: Usage | None) -> Usage | None:
    """`known` updated with Anthropic's usage `data`; a message_delta's may hold output tokens only."""
    if not isinstance(data, dict):
        return known
    inputs, output = data.get("input_tokens"), data.get("output_tokens")
    read, written = data.get("cache_read_input_tokens"), data.get("cache_creation_input_tokens")
    read = read if isinstance(read, int) else None
    if isinstance(inputs, int):
        prompt = inputs + (read or 0) + (written if isinstance(written, int) else 0)
        cached = read or 0
    elif known is not None:
        prompt, cached = known.prompt_tokens, known.cached_tokens if read is None else read
    else:
        return None
    if not isinstance(output, int):
        output = known.completion_tokens if known is not None else 0
    return Usage(prompt, output, cached)


def _responses_usage(data: dict[str, Any]) -> Usage | None:
    inputs, output = data.get("input_tokens"), data.get("output_tokens")
    if not isinstance(inputs, int) or not isinstance(output, int):
        return None
    details = data.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(inputs, output, cached if isinstance(cached, int) else 0)


def _block_has_text(block: Any) -> bool:
    """Whether an Anthropic content block is output: text or thinking with some, or a tool call."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "tool_use":
        return True
    text = block.get("thinking" if kind == "thinking" else "text")
    return isinstance(text, str) and text != ""


def _item_has_text(item: dict[str, Any]) -> bool:
    """Whether a Responses output item is output: a call, or a message or reasoning with text."""
    if item.get("type") == "function_call":
        return True
    content = item.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and isinstance(text := part.get("text"), str) and text != ""
        for part in content
    )
