"""The chunks' reader reads back what their writers wrote: streamed frames however the reads split
them, pretty-printed or compact, and whole answers. Here the OpenAI chat and completion chunks;
the Anthropic Messages and OpenAI Responses dialects are in test_reading_dialects.py."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from mlxhost.wire.chunks import DONE, KEEPALIVE, ChatFormat, CompletionFormat, Delta, TokenLogprob, Usage, sse
from mlxhost.wire.errors import APIError, InternalError, ServiceUnavailable
from mlxhost.wire.reading import MAX_FRAME, ErrorReport, Reading, StreamReader, read_whole
from tests.unit.reading_helpers import TRICKY, Encode, pretty, read, spaced

Format = ChatFormat | CompletionFormat

LOGPROBS = [TokenLogprob("é", -0.25, (("é", -0.25), ("e", -1.5))), TokenLogprob("日", -2.0, ())]
DELTAS = [
    Delta("", 0, [TokenLogprob("", -0.5)]),  # logprobs of a token whose text is held back: no text yet
    Delta("Hello", 1, [TokenLogprob("Hello", -0.1, (("Hello", -0.1), ("Hi", -2.3)))]),
    Delta(TRICKY, 7, LOGPROBS),
    Delta(" café 🙂", 9, None),
]


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
    written = Usage(10, 4, 6, drafted_tokens=5, accepted_tokens=3).to_json()
    assert written == {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "total_tokens": 14,
        "prompt_tokens_details": {"cached_tokens": 6},
        "completion_tokens_details": {"accepted_prediction_tokens": 3, "rejected_prediction_tokens": 2},
    }
    assert Usage.from_json(written) == Usage(10, 4, 6, drafted_tokens=5, accepted_tokens=3)
    assert Usage.from_json(Usage(10, 4, 6).to_json()) == Usage(10, 4, 6)
    assert Usage.from_json({"prompt_tokens": 1, "completion_tokens": 2}) == Usage(1, 2, 0)
    assert Usage.from_json({"prompt_tokens": 1}) is None

