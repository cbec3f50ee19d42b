"""The JSON shapes of chat and text completions, whole and streamed (SSE `data:` frames).

A `Delta` is one piece of a session's output as the worker's engine produces it; the formats
below write deltas as OpenAI's chunks. Beside the writers is their reader: `StreamReader` reads a
stream's frames back as they go past (the parent's relay feeds it every chunk it forwards), and
`read_whole` a whole answer, each telling what the response said about itself (whether text has
started, how each choice finished, the usage, an error, `[DONE]`) by parsing the JSON, so the
parent depends on the shapes written here and not on how compactly the worker writes them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DONE",
    "KEEPALIVE",
    "MAX_FRAME",
    "ChatFormat",
    "CompletionFormat",
    "Delta",
    "ErrorReport",
    "FinishReason",
    "Reading",
    "StreamReader",
    "TokenLogprob",
    "Usage",
    "read_whole",
    "sse",
]

FinishReason = Literal["stop", "length", "cancelled", "error"]

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"
# The most bytes of one unfinished frame a reader holds: the worker's largest (a merged delta
# with top logprobs) is tens of kilobytes. A longer one is dropped, not held without bound.
MAX_FRAME = 1 << 20


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass
class Delta:
    """New output since the previous delta; the last one of a session carries `finish_reason`."""

    text: str = ""
    completion_tokens: int = 0  # running total
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None
    error: str | None = None  # why, when finish_reason is "cancelled" or "error"
    cached_tokens: int = 0  # prompt tokens served from the prompt cache

    def merge(self, later: Delta) -> Delta:
        logprobs = None
        if self.logprobs is not None or later.logprobs is not None:
            logprobs = (self.logprobs or []) + (later.logprobs or [])
        return Delta(
            text=self.text + later.text,
            completion_tokens=later.completion_tokens,
            logprobs=logprobs,
            finish_reason=later.finish_reason,
            error=later.error,
            cached_tokens=later.cached_tokens,
        )


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens served from the prompt cache

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            # As OpenAI reports prompt caching: these prompt tokens were not computed again.
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage | None:
        """The usage `data` reports; None when it lacks the token counts."""
        prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return None
        details = data.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return cls(prompt, completion, cached if isinstance(cached, int) else 0)


def usage(prompt_tokens: int, final: Delta) -> dict[str, Any]:
    return Usage(prompt_tokens, final.completion_tokens, final.cached_tokens).to_json()


@dataclass
class _Format:
    model: str
    prompt_tokens: int
    include_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def usage_chunk(self, final: Delta) -> dict[str, Any]:
        return self._chunk([], usage=usage(self.prompt_tokens, final))

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        chunk = {
            "id": self.id,
            "object": self.chunk_object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None  # OpenAI's streams say usage: null until the usage chunk
        chunk.update(extra)
        return chunk

    chunk_object = ""


@dataclass
class ChatFormat(_Format):
    chunk_object = "chat.completion.chunk"

    def __post_init__(self) -> None:
        self.id = self.id or f"chatcmpl-{uuid.uuid4().hex}"

    def first_chunk(self) -> dict[str, Any]:
        return self._chunk([_choice({"role": "assistant", "content": ""})])

    def content_chunk(self, delta: Delta) -> dict[str, Any]:
        return self._chunk([_choice({"content": delta.text}, _chat_logprobs(delta.logprobs))])

    def finish_chunk(self, finish_reason: str) -> dict[str, Any]:
        return self._chunk([_choice({}, None, finish_reason)])

    def whole(self, text: str, logprobs: list[TokenLogprob] | None, final: Delta) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": _chat_logprobs(logprobs),
                    "finish_reason": final.finish_reason,
                }
            ],
            "usage": usage(self.prompt_tokens, final),
        }


@dataclass
class CompletionFormat(_Format):
    chunk_object = "text_completion"
    _offset: int = 0

    def __post_init__(self) -> None:
        self.id = self.id or f"cmpl-{uuid.uuid4().hex}"

    def first_chunk(self) -> None:
        return None

    def content_chunk(self, delta: Delta) -> dict[str, Any]:
        return self._chunk([self._text_choice(delta.text, delta.logprobs, None)])

    def finish_chunk(self, finish_reason: str) -> dict[str, Any]:
        return self._chunk([self._text_choice("", None, finish_reason)])

    def whole(self, text: str, logprobs: list[TokenLogprob] | None, final: Delta) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [self._text_choice(text, logprobs, final.finish_reason)],
            "usage": usage(self.prompt_tokens, final),
        }

    def _text_choice(
        self, text: str, logprobs: list[TokenLogprob] | None, finish_reason: str | None
    ) -> dict[str, Any]:
        return {
            "index": 0,
            "text": text,
            "logprobs": self._logprobs(logprobs),
            "finish_reason": finish_reason,
        }

    def _logprobs(self, logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
        if logprobs is None:
            return None
        offsets = []
        for item in logprobs:
            offsets.append(self._offset)
            self._offset += len(item.token)
        return {
            "tokens": [item.token for item in logprobs],
            "token_logprobs": [item.logprob for item in logprobs],
            "top_logprobs": [dict(item.top) for item in logprobs],
            "text_offset": offsets,
        }


def _choice(
    delta: dict[str, Any], logprobs: dict[str, Any] | None = None, finish_reason: str | None = None
) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def _chat_logprobs(logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
    if logprobs is None:
        return None
    return {
        "content": [
            {
                "token": item.token,
                "logprob": item.logprob,
                "bytes": list(item.token.encode()),
                "top_logprobs": [
                    {"token": token, "logprob": value, "bytes": list(token.encode())}
                    for token, value in item.top
                ],
            }
            for item in logprobs
        ]
    }


# -- reading responses back -----------------------------------------------------------------


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
