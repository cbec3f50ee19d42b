"""The API dialects mlxhost speaks, and how each one words an error.

    CHAT         POST /v1/chat/completions          OpenAI
    COMPLETIONS  POST /v1/completions               OpenAI
    RESPONSES    POST /v1/responses                 OpenAI Responses
    MESSAGES     POST /v1/messages(/count_tokens)   Anthropic Messages

The path names the dialect, so whoever answers a request (the front door, the parent, the worker)
words its errors the way that request's client parses them, with nothing but the path to go on.
OpenAI's dialects share one error body, `APIError.body()`; Anthropic's is
`{"type": "error", "error": {"type", "message"}}`, its type read from the status, and mlxhost's own
code kept in `error.details.error_code` (where Anthropic's SDK reads a cause's stable code).

Streams differ more: chat and text completions end in `data: [DONE]`; the Responses and Messages
streams have no such marker, and every frame names its event (`event: <type>`, the same `type` as
its JSON).
"""

from __future__ import annotations

import enum
import json
from typing import Any

from mlxhost.wire.errors import APIError

__all__ = ["Dialect", "anthropic_error_type", "error_body", "sse_error", "sse_event"]


class Dialect(enum.Enum):
    CHAT = "chat"
    COMPLETIONS = "completions"
    RESPONSES = "responses"
    MESSAGES = "messages"

    @classmethod
    def of_path(cls, path: str) -> Dialect:
        """The dialect of a request to `path`; any path that is not another's is CHAT's (OpenAI's)."""
        # Paths under a dialect's route (a route mlxhost lacks, as /v1/messages/batches) still get
        # their 404 worded as that dialect's SDK reads it.
        if path == "/v1/messages" or path.startswith("/v1/messages/"):
            return cls.MESSAGES
        if path == "/v1/responses" or path.startswith("/v1/responses/"):
            return cls.RESPONSES
        if path == "/v1/completions":
            return cls.COMPLETIONS
        return cls.CHAT


# Anthropic's error types by status, as its API documents them; another 4xx is an invalid request.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    return _ANTHROPIC_TYPES.get(status) or ("invalid_request_error" if 400 <= status < 500 else "api_error")


def error_body(error: APIError, dialect: Dialect) -> dict[str, Any]:
    """The body of a whole response that answers with `error`."""
    if dialect is not Dialect.MESSAGES:
        return error.body()
    return {"type": "error", "error": _anthropic_error(error)}


def sse_error(error: APIError, dialect: Dialect) -> bytes:
    """The frames that end a stream with `error`, once its status (200) has gone out."""
    if dialect is Dialect.MESSAGES:
        return sse_event({"type": "error", "error": _anthropic_error(error)})
    if dialect is Dialect.RESPONSES:
        # The relay cannot know how many events went before: Responses clients do not check.
        return sse_event(
            {
                "type": "error",
                "code": error.code,
                "message": error.message,
                "param": error.param,
                "sequence_number": 0,
            }
        )
    return b"data: " + _dumps(error.body()) + b"\n\ndata: [DONE]\n\n"


def sse_event(payload: dict[str, Any]) -> bytes:
    """One frame of a Responses or Messages stream: the event named by the payload's `type`."""
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + _dumps(payload) + b"\n\n"


def _anthropic_error(error: APIError) -> dict[str, Any]:
    body: dict[str, Any] = {"type": anthropic_error_type(error.status_code), "message": error.message}
    if error.code is not None:
        body["details"] = {"error_code": error.code}
    return body


def _dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
