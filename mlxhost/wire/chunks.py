"""The JSON shapes of chat and text completions, whole and streamed (SSE `data:` frames).

A `Delta` is one piece of a session's output as the worker's engine produces it; the formats
below write deltas as OpenAI's chunks. Their reader, for the parent, is reading.py.
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
    "ChatFormat",
    "CompletionFormat",
    "Delta",
    "FinishReason",
    "TokenLogprob",
    "Usage",
    "sse",
]

FinishReason = Literal["stop", "length", "cancelled", "error"]

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"


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
