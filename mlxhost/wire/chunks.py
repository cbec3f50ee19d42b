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
    "ToolCall",
    "Usage",
    "sse",
]

FinishReason = Literal["stop", "length", "cancelled", "error"]
# What a client is told: a generation that stopped after calling tools ends in "tool_calls".
AnswerFinish = Literal["stop", "length", "tool_calls"]

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """A call the model made, read from its output: `arguments` is the JSON text of an object."""

    id: str
    name: str
    arguments: str


@dataclass
class Delta:
    """New output since the previous delta; the last one of a session carries `finish_reason`."""

    text: str = ""
    completion_tokens: int = 0  # running total
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None
    error: str | None = None  # why, when finish_reason is "cancelled" or "error"
    cached_tokens: int = 0  # prompt tokens served from the prompt cache
    stop_sequence: str | None = None  # the stop string that ended it, when one did

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
            stop_sequence=later.stop_sequence,
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

    def content_chunk(self, delta: Delta, text: str | None = None) -> dict[str, Any]:
        """The delta's text (or `text`, what of it is the answer) and its logprobs."""
        content = delta.text if text is None else text
        return self._chunk([_choice({"content": content}, _chat_logprobs(delta.logprobs))])

    def reasoning_chunk(self, text: str) -> dict[str, Any]:
        # Clients disagree on the name (vLLM and DeepSeek say reasoning_content, OpenRouter and
        # Ollama reasoning): both are sent.
        return self._chunk([_choice({"reasoning_content": text, "reasoning": text})])

    def tool_call_chunks(self, index: int, call: ToolCall) -> list[dict[str, Any]]:
        """As OpenAI streams a call: its id and name first, then its arguments."""
        head = {"index": index, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
        arguments = {"index": index, "function": {"arguments": call.arguments}}
        return [self._chunk([_choice({"tool_calls": [head]})]), self._chunk([_choice({"tool_calls": [arguments]})])]

    def finish_chunk(self, finish_reason: str) -> dict[str, Any]:
        return self._chunk([_choice({}, None, finish_reason)])

    def whole(
        self,
        text: str,
        logprobs: list[TokenLogprob] | None,
        final: Delta,
        *,
        reasoning: str = "",
        tool_calls: tuple[ToolCall, ...] = (),
        finish_reason: str | None = None,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not tool_calls else None}
        if reasoning:
            message["reasoning_content"] = message["reasoning"] = reasoning
        if tool_calls:
            message["tool_calls"] = [_tool_call(call) for call in tool_calls]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": _chat_logprobs(logprobs),
                    "finish_reason": finish_reason or final.finish_reason,
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


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


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
