"""The chunks' reader reads back what their writers wrote: streamed frames however the reads split
them, pretty-printed or compact, and whole answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest

from mlxhost.wire.chunks import DONE, KEEPALIVE, ChatFormat, CompletionFormat, Delta, TokenLogprob, Usage, sse
from mlxhost.wire.dialect import Dialect, error_body, sse_error, sse_event
from mlxhost.wire.errors import APIError, InternalError, NotFound, ServiceUnavailable
from mlxhost.wire.reading import MAX_FRAME, ErrorReport, Reading, StreamReader, read_whole

Format = ChatFormat | CompletionFormat
Encode = Callable[[dict[str, Any]], bytes]

# Text that a pattern over the bytes would take for structure.
TRICKY = 'say "finish_reason":"length" and "content":"x"\n\ndata: [DONE]\n\n'
LOGPROBS = [TokenLogprob("é", -0.25, (("é", -0.25), ("e", -1.5))), TokenLogprob("日", -2.0, ())]
DELTAS = [
    Delta("", 0, [TokenLogprob("", -0.5)]),  # logprobs of a token whose text is held back: no text yet
    Delta("Hello", 1, [TokenLogprob("Hello", -0.1, (("Hello", -0.1), ("Hi", -2.3)))]),
    Delta(TRICKY, 7, LOGPROBS),
    Delta(" café 🙂", 9, None),
]


def pretty(payload: dict[str, Any]) -> bytes:
    """One frame whose JSON spans several `data:` lines, as SSE allows."""
    lines = json.dumps(payload, indent=2, ensure_ascii=False).split("\n")
    return "".join(f"data: {line}\n" for line in lines).encode() + b"\n"


def spaced(payload: dict[str, Any]) -> bytes:
    """One line, with json.dumps's default separators, CRLF line ends and no space after the colon."""
    return b"data:" + json.dumps(payload).encode() + b"\r\n\r\n"


ENCODINGS: dict[str, Encode] = {"compact": sse, "pretty": pretty, "spaced": spaced}


def stream(fmt: Format, finish: str = "stop", encode: Encode = sse, error: dict[str, Any] | None = None) -> bytes:
    """A stream as the worker's routes write it: content, then the finish (and usage), or an error."""
    frames = []
    if (first := fmt.first_chunk()) is not None:
        frames.append(encode(first))
    frames.append(KEEPALIVE)
    for delta in DELTAS:
        frames.append(encode(fmt.content_chunk(delta)))
    if error is None:
        frames.append(encode(fmt.finish_chunk(finish)))
        if fmt.include_usage:
            frames.append(encode(fmt.usage_chunk(Delta("", 9, finish_reason="stop", cached_tokens=4))))
    else:
        frames.append(encode(error))
    frames.append(b"data:[DONE]\r\n\r\n" if encode is spaced else DONE)
    return b"".join(frames)


def read(data: bytes, *splits: int) -> StreamReader:
    reader = StreamReader()
    start = 0
    for end in (*splits, len(data)):
        reader.feed(data[start:end])
        start = end
    return reader


def formats() -> list[Format]:
    return [
        ChatFormat("m", prompt_tokens=5, include_usage=True),
        CompletionFormat("m", prompt_tokens=5, include_usage=True),
        ChatFormat("m", prompt_tokens=5),
        CompletionFormat("m", prompt_tokens=5),
    ]


@pytest.mark.parametrize("fmt", formats(), ids=lambda f: f"{type(f).__name__}-usage={f.include_usage}")
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_stream_reads_back_its_finish_usage_and_done(fmt: Format, encoding: str) -> None:
    reader = read(stream(fmt, "length", ENCODINGS[encoding]))
    assert reader.text_seen and reader.done and reader.error is None and reader.dropped == 0
    assert reader.finish_reason == "length" and reader.finish_reasons == {0: "length"}
    assert reader.usage == (Usage(5, 9, 4) if fmt.include_usage else None)
    first = 1 if isinstance(fmt, ChatFormat) else 0
    assert reader.frames == first + len(DELTAS) + 1 + fmt.include_usage


@pytest.mark.parametrize("fmt", formats()[:2], ids=lambda f: type(f).__name__)
def test_text_is_seen_at_the_first_frame_that_carries_some(fmt: Format) -> None:
    reader = StreamReader()
    if (first := fmt.first_chunk()) is not None:
        reader.feed(sse(first))  # the role, and content ""
    reader.feed(sse(fmt.content_chunk(DELTAS[0])))  # logprobs, no text
    reader.feed(sse(fmt.finish_chunk("stop"))[:-1])  # not a frame until its blank line
    assert not reader.text_seen and reader.finish_reason is None
    reader.feed(b"\n" + sse(fmt.content_chunk(Delta("a", 2))))
    assert reader.text_seen and reader.finish_reason == "stop"


@pytest.mark.parametrize("fmt", formats()[:2], ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_frames_split_at_every_byte_read_the_same(fmt: Format, encoding: str) -> None:
    data = stream(fmt, "stop", ENCODINGS[encoding])
    whole = asdict(read(data))
    assert whole["finish_reason"] == "stop" and whole["usage"] is not None
    # Where the first frame with text ends: text is seen once that many bytes went past, not before.
    end = b"\r\n\r\n" if encoding == "spaced" else b"\n\n"
    text_from = data.index(end, data.index(b"Hello")) + len(end)
    for split in range(len(data) + 1):
        reader = StreamReader()
        reader.feed(data[:split])
        assert reader.text_seen == (split >= text_from), split
        assert reader.done == (split == len(data))
        reader.feed(data[split:])
        assert asdict(reader) == whole, split
    assert asdict(read(data, *range(1, len(data)))) == whole  # a byte at a time


@pytest.mark.parametrize("fmt", formats()[:2], ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_an_error_frame_reads_back(fmt: Format, encoding: str) -> None:
    error = ServiceUnavailable("the server is shutting down", code="shutting_down")
    reader = read(stream(fmt, encode=ENCODINGS[encoding], error=error.body()))
    assert reader.error == ErrorReport("the server is shutting down", "service_unavailable", "shutting_down")
    assert reader.finish_reason is None and reader.finish_reasons == {} and reader.done
    assert reader.usage is None and reader.text_seen


def test_comments_other_fields_and_non_json_data_are_skipped() -> None:
    chunk = CompletionFormat("m", 3).finish_chunk("length")
    data = (
        b": keep-alive\n\nevent: message\nid: 7\nretry: 10\n\n"
        + b"data: not json\n\ndata: [1, 2]\n\ndata: {\"choices\": 3}\n\n"
        + b"event: chunk\ndata:" + json.dumps(chunk).encode() + b"\n\n\n\n"
    )
    reader = read(data)
    assert reader.finish_reason == "length" and reader.frames == 2 and not reader.done


def test_finish_reasons_are_kept_by_choice() -> None:
    def choice(index: int, finish: str | None) -> dict[str, Any]:
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish}

    reader = StreamReader()
    reader.feed(sse({"choices": [choice(0, None), choice(1, "length")]}))
    reader.feed(sse({"choices": [choice(0, "stop")]}))
    assert reader.finish_reasons == {0: "stop", 1: "length"} and reader.finish_reason == "stop"


def test_an_overlong_frame_is_dropped_and_the_stream_read_on() -> None:
    reader = StreamReader()
    huge = b"data: {\"pad\": \"" + b"x" * MAX_FRAME
    for start in range(0, len(huge), 65536):
        reader.feed(huge[start : start + 65536])
    reader.feed(b"\"}\n\n" + sse(CompletionFormat("m", 1).finish_chunk("stop")) + DONE)
    assert reader.dropped == 1
    assert reader.finish_reason == "stop" and reader.done and reader.frames == 1


@pytest.mark.parametrize("indent", [None, 2])
def test_a_whole_answer_reads_back(indent: int | None) -> None:
    final = Delta("", 12, finish_reason="length", cached_tokens=3)
    for fmt in (ChatFormat("m", 7), CompletionFormat("m", 7)):
        body = json.dumps(fmt.whole(TRICKY, LOGPROBS, final), indent=indent).encode()
        reading = read_whole(body)
        assert reading == Reading(
            text_seen=True, finish_reasons={0: "length"}, finish_reason="length", usage=Usage(7, 12, 3), frames=1
        )
        assert read_whole(json.dumps(fmt.whole("", None, final)).encode()).text_seen is False  # type: ignore[union-attr]


def test_an_error_body_reads_back_and_non_objects_do_not() -> None:
    reading = read_whole(json.dumps(InternalError("boom").body(), indent=1).encode())
    assert reading is not None and reading.error == ErrorReport("boom", "internal_error", "internal_error")
    assert reading.finish_reason is None and reading.usage is None
    reading = read_whole(json.dumps(APIError("no code").body()).encode())
    assert reading is not None and reading.error == ErrorReport("no code", "invalid_request_error", None)
    for body in (b"", b"Internal Server Error", b"[1]", b"\xff\xfe", b"[" * 100_000):
        assert read_whole(body) is None


def test_usage_writes_and_reads_as_openai_reports_it() -> None:
    written = Usage(10, 4, 6).to_json()
    assert written == {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 6},
    }
    assert Usage.from_json(written) == Usage(10, 4, 6)
    assert Usage.from_json({"prompt_tokens": 1, "completion_tokens": 2}) == Usage(1, 2, 0)
    assert Usage.from_json({"prompt_tokens": 1}) is None


# -- the Anthropic Messages and OpenAI Responses dialects -------------------------------------------
# Hand-written in the shapes the worker's writers produce, each checked against the SDKs' own types.

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
