"""Each dialect's errors, whole and mid-stream, read as that dialect's own SDK reads them."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic.types import ErrorResponse, RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseErrorEvent, ResponseStreamEvent

from mlxhost.wire.dialect import Dialect, anthropic_error_type, error_body, sse_error, sse_event
from mlxhost.wire.errors import (
    AdmissionRefused,
    APIError,
    Cancelled,
    ClientClosed,
    Forbidden,
    HTTPVersionNotSupported,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServiceUnavailable,
    TimedOut,
    Unauthorized,
    UnsupportedMediaType,
    WorkerFailed,
)
from mlxhost.wire.reading import ErrorReport, StreamReader

OPENAI = [Dialect.CHAT, Dialect.COMPLETIONS, Dialect.RESPONSES]
SHUTTING_DOWN = ServiceUnavailable("the server is shutting down", code="shutting_down")


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/chat/completions", Dialect.CHAT),
        ("/v1/completions", Dialect.COMPLETIONS),
        ("/v1/responses", Dialect.RESPONSES),
        ("/v1/responses/resp_1", Dialect.RESPONSES),
        ("/v1/messages", Dialect.MESSAGES),
        ("/v1/messages/count_tokens", Dialect.MESSAGES),
        ("/v1/messages/batches", Dialect.MESSAGES),
        ("/v1/models", Dialect.CHAT),
        ("/health", Dialect.CHAT),
        ("/v1/messagesX", Dialect.CHAT),
        ("/admin/state", Dialect.CHAT),
        ("", Dialect.CHAT),
    ],
)
def test_the_path_names_the_dialect(path: str, dialect: Dialect) -> None:
    assert Dialect.of_path(path) is dialect


@pytest.mark.parametrize("dialect", OPENAI)
def test_openai_dialects_answer_with_openai_error_bodies(dialect: Dialect) -> None:
    error = NotFound("the model 'x' does not exist", param="model", code="model_not_found")
    assert error_body(error, dialect) == error.body()
    assert error_body(error, dialect) == {
        "error": {
            "message": "the model 'x' does not exist",
            "type": "not_found_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


ANTHROPIC_TYPES = [
    (InvalidRequest("bad"), "invalid_request_error"),
    (Unauthorized("who"), "authentication_error"),
    (Forbidden("no"), "permission_error"),
    (NotFound("none"), "not_found_error"),
    (MethodNotAllowed("GET"), "invalid_request_error"),
    (RequestTimeout("slow"), "invalid_request_error"),
    (PayloadTooLarge("big"), "request_too_large"),
    (UnsupportedMediaType("xml"), "invalid_request_error"),
    (ClientClosed("gone"), "invalid_request_error"),
    (AdmissionRefused("full"), "rate_limit_error"),
    (InternalError("boom"), "api_error"),
    (WorkerFailed("died"), "api_error"),
    (SHUTTING_DOWN, "overloaded_error"),
    (Cancelled("stopped"), "overloaded_error"),
    (TimedOut("late"), "timeout_error"),
    (HTTPVersionNotSupported("h2"), "api_error"),
]


@pytest.mark.parametrize(("error", "kind"), ANTHROPIC_TYPES, ids=lambda e: type(e).__name__)
def test_messages_answers_with_anthropic_error_bodies(error: APIError, kind: str) -> None:
    body = error_body(error, Dialect.MESSAGES)
    assert body == {
        "type": "error",
        "error": {"type": kind, "message": error.message, "details": {"error_code": error.code}},
    }
    if kind != "request_too_large":  # documented by Anthropic's API, but missing from its SDK's types
        assert ErrorResponse.model_validate(body).error.message == error.message


def test_anthropic_error_types_by_status() -> None:
    expected = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error"}
    expected |= {404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error"}
    expected |= {500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}
    expected |= {418: "invalid_request_error", 502: "api_error", 504: "timeout_error"}
    assert {status: anthropic_error_type(status) for status in expected} == expected


def test_an_anthropic_error_without_a_code_has_no_details() -> None:
    assert error_body(APIError("plain"), Dialect.MESSAGES) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "plain"},
    }


def anthropic_stream(data: bytes) -> list[Any]:
    """The events Anthropic's SDK reads from a Messages stream of `data`."""
    request = httpx2.Request("POST", "http://mlxhost/v1/messages")
    response = httpx2.Response(
        200, content=data, headers={"content-type": "text/event-stream"}, request=request
    )
    client = anthropic.Anthropic(api_key="unused", base_url="http://mlxhost")
    cast_to: Any = RawMessageStreamEvent  # a union: the SDK takes it, its annotation wants a class
    return list(anthropic.Stream(cast_to=cast_to, response=response, client=client))


def openai_stream(data: bytes, path: str, cast_to: Any) -> list[Any]:
    """The events OpenAI's SDK reads from a stream of `data`."""
    request = httpx2.Request("POST", f"http://mlxhost{path}")
    response = httpx2.Response(
        200, content=data, headers={"content-type": "text/event-stream"}, request=request
    )
    client = openai.OpenAI(api_key="unused", base_url="http://mlxhost/v1")
    return list(openai.Stream(cast_to=cast_to, response=response, client=client))


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "tiny",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
}


def test_a_messages_stream_ends_in_an_error_event_the_sdk_raises() -> None:
    frame = sse_error(SHUTTING_DOWN, Dialect.MESSAGES)
    assert frame.startswith(b"event: error\ndata: ") and frame.endswith(b"\n\n") and b"[DONE]" not in frame
    assert json.loads(frame.split(b"data: ", 1)[1]) == error_body(SHUTTING_DOWN, Dialect.MESSAGES)
    with pytest.raises(anthropic.APIStatusError) as raised:
        anthropic_stream(sse_event(MESSAGE_START) + frame)
    assert raised.value.type == "overloaded_error" and raised.value.error_code == "shutting_down"
    assert raised.value.api_message == "the server is shutting down"
    reader = StreamReader()
    reader.feed(sse_event(MESSAGE_START) + frame)
    assert reader.error == ErrorReport("the server is shutting down", "overloaded_error", "shutting_down")


def test_a_responses_stream_ends_in_an_error_event() -> None:
    error = InvalidRequest("the field 'x' is wrong", param="x", code="invalid_value")
    frame = sse_error(error, Dialect.RESPONSES)
    assert frame.startswith(b"event: error\ndata: ") and b"[DONE]" not in frame
    (event,) = openai_stream(frame, "/v1/responses", ResponseStreamEvent)
    assert event == ResponseErrorEvent(
        type="error", code="invalid_value", message="the field 'x' is wrong", param="x", sequence_number=0
    )
    reader = StreamReader()
    reader.feed(frame)
    assert reader.error == ErrorReport("the field 'x' is wrong", None, "invalid_value") and not reader.done


@pytest.mark.parametrize("dialect", [Dialect.CHAT, Dialect.COMPLETIONS])
def test_a_chat_or_completions_stream_ends_in_an_error_chunk_and_done(dialect: Dialect) -> None:
    frame = sse_error(SHUTTING_DOWN, dialect)
    assert frame == b"data: " + json.dumps(SHUTTING_DOWN.body(), separators=(",", ":")).encode() + (
        b"\n\ndata: [DONE]\n\n"
    )
    with pytest.raises(openai.APIError, match="shutting down"):
        openai_stream(frame, "/v1/chat/completions", ChatCompletionChunk)
    reader = StreamReader()
    reader.feed(frame)
    assert reader.error == ErrorReport("the server is shutting down", "service_unavailable", "shutting_down")
    assert reader.done


def test_an_event_frame_is_named_by_its_type() -> None:
    frame = sse_event(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "é"}}
    )
    assert (
        frame
        == (
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            '"delta":{"type":"text_delta","text":"é"}}\n\n'
        ).encode()
    )
