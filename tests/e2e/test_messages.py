"""Anthropic's Messages API as its official SDK sees it, against the real tiny model: a message's
shape, streaming, stop sequences, token counting, what is refused, and the stream writer read by
the SDK offline. Tool use and structured output are in test_messages_tools.py.

The tiny model's weights are random: free output is noise, so these tests check shapes.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message

from mlxhost.wire.chunks import Delta, ToolCall
from mlxhost.worker.api.messages_writer import MessagesWriter
from mlxhost.worker.api.serving import shutting_down
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.parts import Output
from tests.e2e.messages_helpers import HELLO, WEATHER, client_fixture  # noqa: F401 - the `client` fixture

# SDK 2.15 dropped the sampling parameters from its signatures; the API (and older SDKs) take them.
GREEDY = {"temperature": 0.0}


def test_a_message_has_anthropics_shape(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="tiny", max_tokens=12, messages=HELLO, system="Be brief.", metadata={"user_id": "u1"}
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.stop_sequence is None
    assert all(block.type in ("text", "thinking") for block in message.content)
    usage = message.usage
    assert usage.input_tokens > 0 and usage.cache_read_input_tokens is not None
    assert usage.cache_creation_input_tokens == 0
    assert 0 <= usage.output_tokens <= 12
    if message.stop_reason == "max_tokens":
        assert usage.output_tokens == 12


def test_a_streamed_message_matches_its_events(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model="tiny", max_tokens=30, messages=HELLO, extra_headers={"anthropic-version": "2023-06-01"}
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "message_delta" in kinds
    deltas = "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    texts = [block.text for block in final.content if block.type == "text"]
    assert "".join(texts) == deltas
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert 0 <= final.usage.output_tokens <= 30
    # Each block is started, then has deltas, then is stopped, at indexes that count up from 0.
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == list(range(len(final.content)))


def test_the_stream_and_the_whole_message_agree(client: anthropic.Anthropic) -> None:
    whole = client.messages.create(model="tiny", max_tokens=20, messages=HELLO, extra_body=GREEDY)
    with client.messages.stream(model="tiny", max_tokens=20, messages=HELLO, extra_body=GREEDY) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    prompt = whole.usage.input_tokens + (whole.usage.cache_read_input_tokens or 0)
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == prompt


def test_a_stop_sequence_ends_the_message(client: anthropic.Anthropic) -> None:
    # The random model's greedy reply to this prompt, found first; then a piece of it stops it.
    free = client.messages.create(model="tiny", max_tokens=20, messages=HELLO, extra_body=GREEDY)
    text = "".join(block.text for block in free.content if block.type == "text")
    stop = text.strip()[3:6]
    if len(stop) < 3:
        pytest.skip("the model's reply is too short to hold a stop sequence")
    stopped = client.messages.create(
        model="tiny", max_tokens=20, messages=HELLO, extra_body=GREEDY, stop_sequences=[stop]
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == stop
    got = "".join(block.text for block in stopped.content if block.type == "text")
    assert stop not in got and text.startswith(got)
    with client.messages.stream(
        model="tiny", max_tokens=20, messages=HELLO, extra_body=GREEDY, stop_sequences=["zzzz-never", stop]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop


def test_count_tokens_counts_the_prompt_a_message_gets(client: anthropic.Anthropic) -> None:
    tools: Any = [WEATHER]
    counted = client.messages.count_tokens(model="tiny", messages=HELLO, system="Be brief.", tools=tools)
    message = client.messages.create(
        model="tiny", max_tokens=1, messages=HELLO, system="Be brief.", tools=tools
    )
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)
    bare = client.messages.count_tokens(model="tiny", messages=HELLO)
    assert 0 < bare.input_tokens < counted.input_tokens
    with pytest.raises(anthropic.BadRequestError):  # count_tokens takes no max_tokens
        client.post(
            "/v1/messages/count_tokens",
            body={"model": "tiny", "messages": HELLO, "max_tokens": 5},
            cast_to=object,
        )


@pytest.mark.parametrize(
    ("change", "param"),
    [
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "document", "source": {}}],
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0].content[0]",
        ),
        ({"tools": [{"name": "get_weather"}]}, "tools[0].input_schema"),
        ({"tools": [{"type": "teleporter_20990101", "name": "teleporter"}]}, "tools[0].type"),
        ({"tools": [WEATHER, WEATHER]}, "tools[1].name"),
        ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"teleport_mode": True}, "teleport_mode"),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {"type": "nonsense"}}}},
            "output_config.format.schema",
        ),
        ({"messages": [*HELLO, {"role": "assistant", "content": "Well,"}]}, "messages[1]"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}]}
                ]
            },
            "messages[0].content[0]",
        ),
        ({"temperature": 1.5}, "temperature"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ],
)
def test_what_cannot_be_served_is_refused_by_name(
    client: anthropic.Anthropic, change: dict[str, Any], param: str
) -> None:
    body = {"model": "tiny", "max_tokens": 4, "messages": HELLO, **change}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.post("/v1/messages", body=body, cast_to=object)
    error = caught.value
    assert error.status_code == 400
    assert isinstance(error.body, dict) and error.body["type"] == "error"
    details = error.body["error"]
    assert details["type"] == "invalid_request_error"
    assert details["message"].startswith(param) or f"'{param}'" in details["message"], details


def test_a_missing_max_tokens_is_refused(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.post("/v1/messages", body={"model": "tiny", "messages": HELLO}, cast_to=object)


def test_thinking_switches_are_accepted(client: anthropic.Anthropic) -> None:
    switches: list[Any] = [{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}]
    for thinking in switches:
        message = client.messages.create(
            model="tiny",
            max_tokens=6,
            messages=HELLO,
            thinking=thinking,
        )
        assert message.stop_reason in ("end_turn", "max_tokens")
        for block in message.content:
            if block.type == "thinking":
                assert block.signature == ""


def test_the_stream_a_writer_writes_builds_its_whole_message() -> None:
    """Read by the SDK itself: the events of a stream add up to the message the writer writes whole."""
    writer = MessagesWriter("tiny", 12)
    calls = [
        ToolCall("call_a1", "get_weather", '{"city": "Oslo", "unit": "c"}'),
        ToolCall("call_b2", "get_weather", '{"city": "Lima", "unit": "f"}'),
    ]
    pieces = [
        Output(reasoning="Two "),
        Output(reasoning="cities."),
        Output(content="Let me "),
        Output(content="check."),
        Output(tool_calls=calls[:1]),
        Output(tool_calls=calls[1:]),
    ]
    final = Delta(completion_tokens=40, finish_reason="stop", cached_tokens=5)
    frames = [*writer.opening()]
    for piece in pieces:
        frames += writer.output(piece, Delta())
    frames += writer.closing(final, "tool_calls")
    output = Output()
    for piece in pieces:
        output.add(piece)
    whole = Message.model_validate(writer.whole(Answer(output, None, final, "tool_calls")))

    def serve(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=b"".join(frames))

    http = httpx2.Client(transport=httpx2.MockTransport(serve))
    with anthropic.Anthropic(base_url="http://writer.test", api_key="x", http_client=http) as offline:
        with offline.messages.stream(model="tiny", max_tokens=40, messages=HELLO) as stream:
            events = list(stream)
            streamed = stream.get_final_message()
    assert streamed.model_dump() == whole.model_dump()
    assert [block.type for block in whole.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert [block.id for block in whole.content if block.type == "tool_use"] == ["toolu_a1", "toolu_b2"]
    assert whole.stop_reason == "tool_use"
    assert whole.usage.input_tokens == 7 and whole.usage.cache_read_input_tokens == 5
    # The thinking block is signed (emptily) before it stops.
    raw = [e for e in events if e.type.startswith(("message_", "content_block_"))]  # not the SDK's own
    kinds = [(e.type, getattr(getattr(e, "delta", None), "type", None)) for e in raw]
    signed = kinds.index(("content_block_delta", "signature_delta"))
    assert kinds[signed + 1][0] == "content_block_stop"


def test_a_stream_that_fails_ends_in_an_error_event_the_sdk_raises() -> None:
    writer = MessagesWriter("tiny", 12)
    frames = [
        *writer.opening(),
        *writer.output(Output(content="Hel"), Delta()),
        *writer.failure(shutting_down()),
    ]
    assert frames[-1].startswith(b"event: error\ndata: ")

    def serve(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=b"".join(frames))

    http = httpx2.Client(transport=httpx2.MockTransport(serve))
    with anthropic.Anthropic(base_url="http://writer.test", api_key="x", http_client=http) as offline:
        with pytest.raises(anthropic.APIStatusError, match="shutting down"):
            with offline.messages.stream(model="tiny", max_tokens=40, messages=HELLO) as stream:
                list(stream)
