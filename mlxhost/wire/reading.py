"""Reading a response back as it goes past: what it says about itself.

`StreamReader` reads a stream's frames (the parent's relay feeds it every chunk it forwards), and
`read_whole` a whole answer, each telling what the response said about itself (whether text has
started, how each choice finished, the usage, an error, `[DONE]`) by parsing the JSON, so the
parent depends on the shapes the worker's writers produce (chunks.py) and not on how compactly
the worker writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mlxhost.wire.chunks import Usage

__all__ = ["MAX_FRAME", "ErrorReport", "Reading", "StreamReader", "read_whole"]

# The most bytes of one unfinished frame a reader holds: the worker's largest (a merged delta
# with top logprobs) is tens of kilobytes. A longer one is dropped, not held without bound.
MAX_FRAME = 1 << 20



@dataclass(frozen=True)
class ErrorReport:
    """An error body ({"error": {...}}, see wire.errors) read back from a response."""

    message: str
    type: str | None = None
    code: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErrorReport:
        kind, code = data.get("type"), data.get("code")
        return cls(
            str(data.get("message", "")),
            None if kind is None else str(kind),
            None if code is None else str(code),
        )


@dataclass
class Reading:
    """What a response has said about itself so far."""

    text_seen: bool = False  # some choice carried text (a role alone, or "", is not text)
    finish_reasons: dict[int, str] = field(default_factory=dict)  # by choice index
    finish_reason: str | None = None  # the last one read, of any choice
    usage: Usage | None = None
    error: ErrorReport | None = None
    done: bool = False  # the stream's `data: [DONE]`
    frames: int = 0  # JSON objects read

    def note(self, data: dict[str, Any]) -> None:
        """Take in one chunk, whole answer or error body."""
        self.frames += 1
        error = data.get("error")
        if isinstance(error, dict):
            self.error = ErrorReport.from_json(error)
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage.from_json(usage) or self.usage
        choices = data.get("choices")
        if not isinstance(choices, list):
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
            payload = frame[6:]  # the worker's frames: one data line
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
