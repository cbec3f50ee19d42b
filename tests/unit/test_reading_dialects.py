"""The chunks' reader reads back the Anthropic Messages and OpenAI Responses dialects: streamed
events however the reads split them, pretty-printed or compact, their errors, and whole answers.
The events are hand-written in the shapes the worker's writers produce, each checked against the
SDKs' own types."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from mlxhost.wire.chunks import KEEPALIVE, Usage
from mlxhost.wire.dialect import Dialect, error_body, sse_error, sse_event
from mlxhost.wire.errors import APIError, NotFound, ServiceUnavailable
from mlxhost.wire.reading import ErrorReport, Reading, StreamReader, read_whole
from tests.unit.reading_helpers import TRICKY, Encode, pretty, read, spaced

Event = dict[str, Any]


def event_pretty(payload: Event) -> bytes:
    return f"event: {payload['type']}\n".encode() + pretty(payload)


def event_spaced(payload: Event) -> bytes:
    return f"event:{payload['type']}\r\n".encode() + spaced(payload)


EVENT_ENCODINGS: dict[str, Encode] = {"compact": sse_event, "pretty": event_pretty, "spaced": event_spaced}


def anthropic_usage(**counts: int) -> dict[str, int]:
    return {
        "input_tokens": 5,
        "output_tokens": 1,
        "cache_read_input_tokens": 4,
        "cache_creation_input_tokens": 0,
    } | counts


def anthropic_delta(index: int, kind: str, **fields: str) -> Event:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def message_start(**usage: int) -> Event:
    message: Event = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": anthropic_usage(**usage),
    }
    return {"type": "message_start", "message": message}


def message_delta(stop_reason: str | None, **usage: int) -> Event:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": usage,
    }


ANTHROPIC_EVENTS: list[Event] = [
    message_start(),
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "thinking", "thinking": "", "signature": ""},
    },
    {"type": "ping"},
    anthropic_delta(0, "thinking_delta", thinking=""),  # no text yet
    anthropic_delta(0, "thinking_delta", thinking=TRICKY),
    anthropic_delta(0, "signature_delta", signature="sig"),
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    anthropic_delta(1, "text_delta", text=" café 🙂"),
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    },
    anthropic_delta(2, "input_json_delta", partial_json=""),
    anthropic_delta(2, "input_json_delta", partial_json='{"city": "Paris"}'),
    {"type": "content_block_stop", "index": 2},
    message_delta("tool_use", output_tokens=9),
    {"type": "message_stop"},
]


def response_object(status: str, output: list[Event], **extra: Any) -> Event:
    usage = {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 0},
        "output_tokens": 12,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 19,
    }
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": status,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    } | extra


MESSAGE_ITEM: Event = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": TRICKY, "annotations": []}],
}
CALL_ITEM: Event = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "f",
    "arguments": '{"a": 1}',
}


def responses_events(last: Event) -> list[Event]:
    def delta(kind: str, text: str, **at: Any) -> Event:
        return {"type": kind, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text, **at}

    created = response_object("in_progress", [], usage=None)
    return [
        {"type": "response.created", "sequence_number": 0, "response": created},
        {"type": "response.in_progress", "sequence_number": 1, "response": created},
        delta("response.reasoning_text.delta", "", sequence_number=2),  # no text yet
        delta("response.reasoning_text.delta", "hmm", sequence_number=3),
        delta("response.output_text.delta", TRICKY, sequence_number=4, logprobs=[]),
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 1,
            "delta": "{",
            "sequence_number": 5,
        },
        last,
    ]


COMPLETED = {
    "type": "response.completed",
    "sequence_number": 6,
    "response": response_object("completed", [MESSAGE_ITEM]),
}


def encode_events(events: list[Event], encode: Encode = sse_event) -> bytes:
    return KEEPALIVE + b"".join(encode(event) for event in events)


def test_the_hand_written_events_are_what_the_sdks_read() -> None:
    import anthropic.types
    import openai.types.responses
    from pydantic import TypeAdapter

    messages: TypeAdapter[Any] = TypeAdapter(anthropic.types.RawMessageStreamEvent)
    for event in ANTHROPIC_EVENTS:
        if event["type"] != "ping":  # the SDK skips pings before it parses anything
            assert messages.validate_python(event).type == event["type"]
    responses: TypeAdapter[Any] = TypeAdapter(openai.types.responses.ResponseStreamEvent)
    for event in responses_events(COMPLETED):
        assert responses.validate_python(event).type == event["type"]
    openai.types.responses.Response.model_validate(response_object("completed", [MESSAGE_ITEM, CALL_ITEM]))


@pytest.mark.parametrize("encoding", sorted(EVENT_ENCODINGS))
def test_a_messages_stream_reads_back_its_finish_usage_and_end(encoding: str) -> None:
    reader = read(encode_events(ANTHROPIC_EVENTS, EVENT_ENCODINGS[encoding]))
    assert reader.text_seen and reader.done and reader.error is None and reader.dropped == 0
    assert reader.finish_reason == "tool_calls" and reader.finish_reasons == {0: "tool_calls"}
    # Anthropic counts cache reads apart from input_tokens: the prompt is both.
    assert reader.usage == Usage(9, 9, 4)
    assert reader.frames == len(ANTHROPIC_EVENTS)


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("pause_turn", "pause_turn"),
    ],
)
def test_anthropic_stop_reasons_read_as_finish_reasons(stop_reason: str, finish: str) -> None:
    reader = read(
        encode_events(
            [message_start(), message_delta(stop_reason, output_tokens=2), {"type": "message_stop"}]
        )
    )
    assert reader.finish_reason == finish and reader.usage == Usage(9, 2, 4)
    whole = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": anthropic_usage(output_tokens=2),
    }
    assert read_whole(json.dumps(whole).encode()) == Reading(
        text_seen=True, finish_reasons={0: finish}, finish_reason=finish, usage=Usage(9, 2, 4), frames=1
    )


def test_anthropic_usage_counts_cache_writes_and_takes_a_final_delta_whole() -> None:
    reader = read(encode_events([message_start(cache_creation_input_tokens=2)]))
    assert reader.usage == Usage(11, 1, 4)
    # A message_delta's usage may repeat the input counts: they replace the start's.
    reader.feed(
        sse_event(message_delta("end_turn", input_tokens=6, cache_read_input_tokens=0, output_tokens=3))
    )
    assert reader.usage == Usage(6, 3, 0)


@pytest.mark.parametrize(
    ("last", "finish"),
    [
        (COMPLETED, "stop"),
        ({**COMPLETED, "response": response_object("completed", [MESSAGE_ITEM, CALL_ITEM])}, "tool_calls"),
        (
            {
                "type": "response.incomplete",
                "sequence_number": 6,
                "response": response_object(
                    "incomplete", [], incomplete_details={"reason": "max_output_tokens"}
                ),
            },
            "length",
        ),
        (
            {
                "type": "response.incomplete",
                "sequence_number": 6,
                "response": response_object(
                    "incomplete", [], incomplete_details={"reason": "content_filter"}
                ),
            },
            "content_filter",
        ),
    ],
)
@pytest.mark.parametrize("encoding", sorted(EVENT_ENCODINGS))
def test_a_responses_stream_reads_back_its_finish_usage_and_end(
    last: Event, finish: str, encoding: str
) -> None:
    events = responses_events(last)
    reader = read(encode_events(events, EVENT_ENCODINGS[encoding]))
    assert reader.text_seen and reader.done and reader.error is None and reader.dropped == 0
    assert reader.finish_reason == finish and reader.finish_reasons == {0: finish}
    assert reader.usage == Usage(7, 12, 3) and reader.frames == len(events)


@pytest.mark.parametrize(
    ("events", "first_text"),
    [(ANTHROPIC_EVENTS, 5), (responses_events(COMPLETED), 4)],
    ids=["messages", "responses"],
)
@pytest.mark.parametrize("encoding", sorted(EVENT_ENCODINGS))
def test_event_frames_split_at_every_byte_read_the_same(
    events: list[Event], first_text: int, encoding: str
) -> None:
    data = encode_events(events, EVENT_ENCODINGS[encoding])
    whole = asdict(read(data))
    assert whole["finish_reason"] is not None and whole["usage"] is not None and whole["done"]
    # Text is seen once the frame with the first non-empty delta has ended, and not before.
    end = b"\r\n\r\n" if encoding == "spaced" else b"\n\n"
    text_from = len(KEEPALIVE)
    for _ in range(first_text):
        text_from = data.index(end, text_from) + len(end)
    for split in range(len(data) + 1):
        reader = StreamReader()
        reader.feed(data[:split])
        assert reader.text_seen == (split >= text_from), split
        reader.feed(data[split:])
        assert asdict(reader) == whole, split
    assert asdict(read(data, *range(1, len(data)))) == whole  # a byte at a time


@pytest.mark.parametrize("encoding", sorted(EVENT_ENCODINGS))
def test_an_anthropic_error_event_reads_back(encoding: str) -> None:
    error = ServiceUnavailable("the server is shutting down", code="shutting_down")
    events = [*ANTHROPIC_EVENTS[:5], json.loads(sse_error(error, Dialect.MESSAGES).split(b"data: ", 1)[1])]
    reader = read(encode_events(events, EVENT_ENCODINGS[encoding]))
    assert reader.error == ErrorReport("the server is shutting down", "overloaded_error", "shutting_down")
    assert reader.finish_reason is None and not reader.done and reader.text_seen


@pytest.mark.parametrize("encoding", sorted(EVENT_ENCODINGS))
def test_responses_errors_read_back(encoding: str) -> None:
    error = {
        "type": "error",
        "code": "shutting_down",
        "message": "stopping",
        "param": None,
        "sequence_number": 3,
    }
    reader = read(encode_events([*responses_events(COMPLETED)[:3], error], EVENT_ENCODINGS[encoding]))
    assert reader.error == ErrorReport("stopping", None, "shutting_down")
    assert reader.finish_reason is None and not reader.done
    failed = response_object("failed", [], error={"code": "server_error", "message": "the worker failed"})
    reader = read(encode_events([{"type": "response.failed", "sequence_number": 2, "response": failed}]))
    assert reader.error == ErrorReport("the worker failed", None, "server_error")
    assert reader.finish_reason is None and reader.done


def test_whole_messages_and_responses_answers_read_back() -> None:
    content = [
        {"type": "thinking", "thinking": "", "signature": "s"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    ]
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": content,
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": anthropic_usage(output_tokens=4),
    }
    assert read_whole(json.dumps(message, indent=2).encode()) == Reading(
        text_seen=True,
        finish_reasons={0: "tool_calls"},
        finish_reason="tool_calls",
        usage=Usage(9, 4, 4),
        frames=1,
    )
    message["content"] = [{"type": "text", "text": ""}]
    assert read_whole(json.dumps(message).encode()).text_seen is False  # type: ignore[union-attr]
    for output, finish in (([MESSAGE_ITEM], "stop"), ([MESSAGE_ITEM, CALL_ITEM], "tool_calls")):
        reading = read_whole(json.dumps(response_object("completed", output)).encode())
        assert reading == Reading(
            text_seen=True, finish_reasons={0: finish}, finish_reason=finish, usage=Usage(7, 12, 3), frames=1
        )
    empty = {**MESSAGE_ITEM, "content": [{"type": "output_text", "text": "", "annotations": []}]}
    incomplete = response_object("incomplete", [empty], incomplete_details={"reason": "max_output_tokens"})
    reading = read_whole(json.dumps(incomplete).encode())
    assert reading is not None and reading.finish_reason == "length" and not reading.text_seen


def test_anthropic_error_bodies_read_back() -> None:
    for error, kind in (
        (NotFound("no model", code="model_not_found"), "not_found_error"),
        (APIError("plain"), None),
    ):
        reading = read_whole(json.dumps(error_body(error, Dialect.MESSAGES)).encode())
        expected_kind = kind or "invalid_request_error"
        assert reading is not None and reading.error == ErrorReport(error.message, expected_kind, error.code)
        assert reading.finish_reason is None and reading.usage is None


def test_unknown_events_and_odd_types_are_skipped() -> None:
    reader = read(
        encode_events(
            [
                {"type": ["not", "a", "name"]},
                {"type": "content_block_delta", "delta": {"type": ["x"], "text": "t"}},
                {"type": "response.output_item.added", "item": CALL_ITEM},
                {"type": "message_delta", "delta": {"stop_reason": 7}, "usage": "none"},
                {"type": "response.completed", "response": "none"},
            ]
        )
    )
    assert (
        reader.frames == 5 and not reader.text_seen and reader.finish_reason is None and reader.usage is None
    )
    assert reader.done  # response.completed is the stream's end, whatever it carries
