"""The JSON shapes of chat and text completions, whole and streamed (SSE `data:` frames).

A `Delta` is one piece of a session's output as the worker's engine produces it; the formats
below write deltas as OpenAI's chunks. A request for `n` choices has one session per choice:
every chunk names its choice by `index`, and the usage counts the prompt once and the
completions of all the choices. Their reader, for the parent, is reading.py.
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
    # Speculative decoding (worker/engine/speculate/), running totals: draft tokens verified, and
    # those of them the model kept (each kept one is also in completion_tokens).
    drafted_tokens: int = 0
    accepted_tokens: int = 0

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
            drafted_tokens=later.drafted_tokens,
            accepted_tokens=later.accepted_tokens,
        )


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens served from the prompt cache
    drafted_tokens: int = 0  # draft tokens verified (speculative decoding)
    accepted_tokens: int = 0  # those of them the model kept: part of completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            # As OpenAI reports prompt caching: these prompt tokens were not computed again.
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            # As OpenAI reports Predicted Outputs: the drafts are mlxhost's own predictions.
            "completion_tokens_details": {
                "accepted_prediction_tokens": self.accepted_tokens,
                "rejected_prediction_tokens": self.drafted_tokens - self.accepted_tokens,
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Usage | None:
        """The usage `data` reports; None when it lacks the token counts."""
        prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
        if not isinstance(prompt, int) or not isinstance(completion, int):
            return None
        details = data.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        predictions = data.get("completion_tokens_details")
        predictions = predictions if isinstance(predictions, dict) else {}
        accepted = predictions.get("accepted_prediction_tokens")
        rejected = predictions.get("rejected_prediction_tokens")
        accepted = accepted if isinstance(accepted, int) else 0
        rejected = rejected if isinstance(rejected, int) else 0
        return cls(prompt, completion, cached if isinstance(cached, int) else 0, accepted + rejected, accepted)


def usage(prompt_tokens: int, *finals: Delta) -> dict[str, Any]:
    """The usage of one prompt and its choices' last deltas: their completions and drafts add up,
    and only the prompt tokens that every choice took from the cache count as cached."""
    return Usage(
        prompt_tokens,
        sum(final.completion_tokens for final in finals),
        min(final.cached_tokens for final in finals),
        sum(final.drafted_tokens for final in finals),
        sum(final.accepted_tokens for final in finals),
    ).to_json()


@dataclass
class _Format:
    model: str
    prompt_tokens: int
    include_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def usage_chunk(self, *finals: Delta) -> dict[str, Any]:
        """The chunk after every choice's finish, with the usage of all of them."""
        return self._chunk([], usage=usage(self.prompt_tokens, *finals))

    def whole_body(self, choices: list[dict[str, Any]], *finals: Delta) -> dict[str, Any]:
        """A whole answer: its choices, each as `whole_choice` writes it, and their usage."""
        return {
            "id": self.id,
            "object": self.whole_object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": usage(self.prompt_tokens, *finals),
        }

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
    whole_object = ""


@dataclass
class ChatFormat(_Format):
    chunk_object = "chat.completion.chunk"
    whole_object = "chat.completion"

    def __post_init__(self) -> None:
        self.id = self.id or f"chatcmpl-{uuid.uuid4().hex}"

    def first_chunk(self, index: int = 0) -> dict[str, Any]:
        return self._chunk([_choice(index, {"role": "assistant", "content": ""})])

    def content_chunk(self, delta: Delta, text: str | None = None, index: int = 0) -> dict[str, Any]:
        """The delta's text (or `text`, what of it is the answer) and its logprobs."""
        content = delta.text if text is None else text
        return self._chunk([_choice(index, {"content": content}, _chat_logprobs(delta.logprobs))])

    def reasoning_chunk(self, text: str, index: int = 0) -> dict[str, Any]:
        # Clients disagree on the name (vLLM and DeepSeek say reasoning_content, OpenRouter and
        # Ollama reasoning): both are sent.
        return self._chunk([_choice(index, {"reasoning_content": text, "reasoning": text})])

    def tool_call_start_chunk(
        self, call_index: int, call_id: str, name: str, index: int = 0
    ) -> dict[str, Any]:
        """As OpenAI streams a call: its id and name first (this chunk), then its arguments in
        pieces. `call_index` counts the calls of one choice, `index` is the choice."""
        head = {
            "index": call_index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        return self._chunk([_choice(index, {"tool_calls": [head]})])

    def tool_call_arguments_chunk(self, call_index: int, text: str, index: int = 0) -> dict[str, Any]:
        return self._chunk(
            [_choice(index, {"tool_calls": [{"index": call_index, "function": {"arguments": text}}]})]
        )

    def finish_chunk(self, finish_reason: str, index: int = 0) -> dict[str, Any]:
        return self._chunk([_choice(index, {}, None, finish_reason)])

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
        """A whole answer of one choice."""
        choice = self.whole_choice(
            0, text, logprobs, final, reasoning=reasoning, tool_calls=tool_calls, finish_reason=finish_reason
        )
        return self.whole_body([choice], final)

    def whole_choice(
        self,
        index: int,
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
            "index": index,
            "message": message,
            "logprobs": _chat_logprobs(logprobs),
            "finish_reason": finish_reason or final.finish_reason,
        }


@dataclass
class CompletionFormat(_Format):
    chunk_object = "text_completion"
    whole_object = "text_completion"
    # Where the next token's text starts, by choice: `text_offset` counts through a choice's text.
    _offsets: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.id = self.id or f"cmpl-{uuid.uuid4().hex}"

    def first_chunk(self) -> None:
        return None

    def content_chunk(self, delta: Delta, index: int = 0) -> dict[str, Any]:
        return self._chunk([self.text_choice(index, delta.text, delta.logprobs, None)])

    def finish_chunk(self, finish_reason: str, index: int = 0) -> dict[str, Any]:
        return self._chunk([self.text_choice(index, "", None, finish_reason)])

    def whole(self, text: str, logprobs: list[TokenLogprob] | None, final: Delta) -> dict[str, Any]:
        """A whole answer of one choice."""
        return self.whole_body([self.text_choice(0, text, logprobs, final.finish_reason)], final)

    def text_choice(
        self, index: int, text: str, logprobs: list[TokenLogprob] | None, finish_reason: str | None
    ) -> dict[str, Any]:
        """One choice, of a chunk or of a whole answer."""
        return {
            "index": index,
            "text": text,
            "logprobs": self._logprobs(index, logprobs),
            "finish_reason": finish_reason,
        }

    def _logprobs(self, index: int, logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
        if logprobs is None:
            return None
        offset = self._offsets.get(index, 0)
        offsets = []
        for item in logprobs:
            offsets.append(offset)
            offset += len(item.token)
        self._offsets[index] = offset
        return {
            "tokens": [item.token for item in logprobs],
            "token_logprobs": [item.logprob for item in logprobs],
            "top_logprobs": [dict(item.top) for item in logprobs],
            "text_offset": offsets,
        }


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _choice(
    index: int,
    delta: dict[str, Any],
    logprobs: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


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
