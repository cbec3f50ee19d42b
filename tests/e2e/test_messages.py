"""Anthropic's Messages API as its official SDK sees it, against the real tiny model.

The tiny model's weights are random: free output is noise, so these tests check shapes, and get
real tool calls by forcing the tool choice (a grammar then holds the output to a valid call).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx2
import jsonschema_rs
import pytest
from anthropic.types import Message, ToolUseBlock

from mlxhost.testing import RunningHost
from mlxhost.wire.anthropic import CountTokensRequest
from mlxhost.wire.chunks import Delta, ToolCall
from mlxhost.wire.parsing import parse_body
from mlxhost.worker.api.conversation import ToolChoice
from mlxhost.worker.api.messages import messages_conversation
from mlxhost.worker.api.messages_writer import MessagesWriter
from mlxhost.worker.api.serving import shutting_down
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.output import Output

HELLO: list[Any] = [{"role": "user", "content": "Tell me about café culture in 日本 🙂"}]
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "unit": {"enum": ["c", "f"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
CITIES = ["Paris", "Lagos", "Lima", "Oslo", "Kyoto", "Quito", "Perth", "Cairo", "Dakar", "Hanoi"]
# SDK 2.15 dropped the sampling parameters from its signatures; the API (and older SDKs) take them.
GREEDY = {"temperature": 0.0}
# One call, its strings bounded: the grammar ends it, so it never runs this long.
TOOL_TOKENS = 300
# Exactly one call (a named tool is one call whatever disable_parallel_tool_use says). Allowed
# more (`any`), the random model (where a real one would stop) goes on calling as often as not, and
# the answer ends at max_tokens: see test_parallel_calls_are_blocks_each.
ONE_WEATHER_CALL: Any = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}


@pytest.fixture
def client(server: RunningHost) -> Iterator[anthropic.Anthropic]:
    assert server.url is not None
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
        yield c


def _tool_use(message: Message) -> ToolUseBlock:
    calls = [block for block in message.content if block.type == "tool_use"]
    assert len(calls) == 1, message.content
    return calls[0]


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


def test_a_forced_tool_is_always_called_with_a_valid_input(client: anthropic.Anthropic) -> None:
    validator = jsonschema_rs.validator_for(WEATHER["input_schema"])

    def ask(i: int) -> Message:
        return client.messages.create(
            model="tiny",
            max_tokens=TOOL_TOKENS,
            extra_body={"temperature": 1.0},
            messages=[
                {"role": "user", "content": f"What is the weather in {CITIES[i % len(CITIES)]}? ({i})"}
            ],
            tools=[WEATHER],
            tool_choice=ONE_WEATHER_CALL,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, range(24)))
    for message in answers:
        assert message.stop_reason == "tool_use", message.content
        call = _tool_use(message)
        assert call.name == "get_weather" and call.id.startswith("toolu_")
        assert validator.is_valid(call.input), call.input


def test_a_structured_output_format_validates_every_time(client: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "rain": {"type": "boolean"}},
        "required": ["city", "rain"],
    }
    validator = jsonschema_rs.validator_for({**schema, "additionalProperties": False})

    def ask(i: int) -> Message:
        return client.messages.create(
            model="tiny",
            max_tokens=TOOL_TOKENS,
            extra_body={"temperature": 1.0},
            messages=[{"role": "user", "content": f"Forecast for {CITIES[i % len(CITIES)]}? ({i})"}],
            output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "low"},
            # Meaningless for one local model, and accepted: agents send them.
            service_tier="auto",
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, range(20)))
    for message in answers:
        assert message.stop_reason == "end_turn", message.content
        [block] = message.content
        assert block.type == "text" and validator.is_valid(json.loads(block.text)), block


def test_parallel_calls_are_blocks_each(client: anthropic.Anthropic) -> None:
    validator = jsonschema_rs.validator_for(WEATHER["input_schema"])
    message = client.messages.create(
        model="tiny",
        max_tokens=TOOL_TOKENS,
        messages=HELLO,
        tools=[WEATHER],
        tool_choice={"type": "any"},
    )
    calls = [block for block in message.content if block.type == "tool_use"]
    assert calls and all(validator.is_valid(call.input) for call in calls)
    assert len({call.id for call in calls}) == len(calls)
    # A call cut off by max_tokens is no call, and no text either (the next test).
    assert message.stop_reason in ("tool_use", "max_tokens")
    assert all(block.type == "tool_use" for block in message.content), message.content


def test_a_named_tool_is_one_call_whatever_parallel_use_says(client: anthropic.Anthropic) -> None:
    def ask(i: int) -> Message:
        return client.messages.create(
            model="tiny",
            max_tokens=TOOL_TOKENS,
            extra_body={"temperature": 1.0},
            messages=HELLO,
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "get_weather"},  # parallel use left allowed
        )

    with ThreadPoolExecutor(max_workers=6) as pool:
        for message in pool.map(ask, range(12)):
            assert message.stop_reason == "tool_use", message.content
            assert _tool_use(message).name == "get_weather"


def test_a_call_cut_by_max_tokens_leaves_no_markup_as_text(client: anthropic.Anthropic) -> None:
    """Calls that completed stay whole; the one max_tokens cut is neither a call nor text."""
    validator = jsonschema_rs.validator_for(WEATHER["input_schema"])
    for max_tokens in (6, 20, 45, 90):
        message = client.messages.create(
            model="tiny",
            max_tokens=max_tokens,
            extra_body={"temperature": 1.0},
            messages=HELLO,
            tools=[WEATHER],
            tool_choice={"type": "any"},
        )
        assert message.stop_reason in ("max_tokens", "tool_use"), message
        assert all(block.type == "tool_use" for block in message.content), message.content
        assert all(validator.is_valid(block.input) for block in message.content)
        with client.messages.stream(
            model="tiny",
            max_tokens=max_tokens,
            extra_body={"temperature": 1.0},
            messages=HELLO,
            tools=[WEATHER],
            tool_choice={"type": "any"},
        ) as stream:
            streamed = stream.get_final_message()
        assert [b.type for b in streamed.content] == [b.type for b in message.content]
        assert streamed.stop_reason == message.stop_reason


def test_any_tool_with_parallel_use_disabled_makes_one_call(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="tiny",
        max_tokens=TOOL_TOKENS,
        messages=HELLO,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    assert message.stop_reason == "tool_use"
    assert _tool_use(message).name == "get_weather"


def test_a_streamed_tool_input_joins_into_the_call(client: anthropic.Anthropic) -> None:
    validator = jsonschema_rs.validator_for(WEATHER["input_schema"])
    with client.messages.stream(
        model="tiny",
        max_tokens=TOOL_TOKENS,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER],
        tool_choice=ONE_WEATHER_CALL,
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    pieces = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    call = _tool_use(final)
    assert pieces and json.loads("".join(pieces)) == call.input
    assert validator.is_valid(call.input)
    assert final.stop_reason == "tool_use"
    started = [e.content_block for e in events if e.type == "content_block_start"]
    assert any(block.type == "tool_use" and block.id == call.id for block in started)


def test_a_tool_round_trip(client: anthropic.Anthropic) -> None:
    question: Any = {"role": "user", "content": "Weather in Lima?"}
    first = client.messages.create(
        model="tiny",
        max_tokens=TOOL_TOKENS,
        messages=[question],
        tools=[WEATHER],
        tool_choice=ONE_WEATHER_CALL,
    )
    call = _tool_use(first)
    result: Any = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": call.id,
                "content": [{"type": "text", "text": "18 C, dry"}],
            },
            {"type": "text", "text": "Now say it in words.", "cache_control": {"type": "ephemeral"}},
        ],
    }
    turns = [question, {"role": "assistant", "content": first.content}, result]
    second = client.messages.create(
        model="tiny",
        max_tokens=8,
        messages=turns,
        tools=[WEATHER],
        tool_choice={"type": "none"},
    )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert all(block.type != "tool_use" for block in second.content)
    # The result and the call are in the prompt: it is longer than the question's.
    assert second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0) > first.usage.input_tokens
    # An error result, as a string, and thinking handed back are accepted too.
    errored: Any = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "no", "is_error": True}],
    }
    thought: Any = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hm", "signature": ""}, *first.content],
    }
    third = client.messages.create(
        model="tiny", max_tokens=4, messages=[question, thought, errored], tools=[WEATHER]
    )
    assert third.stop_reason in ("end_turn", "max_tokens", "tool_use")


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


def test_a_conversation_in_blocks_becomes_template_messages() -> None:
    body = {
        "model": "tiny",
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
        "messages": [
            {"role": "user", "content": "Weather in Oslo and Lima?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Two cities.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Lima"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3 C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "18 C"}],
                    },
                    {"type": "text", "text": "Which is warmer?"},
                ],
            },
        ],
        "tools": [WEATHER],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "disabled"},
    }
    conversation = messages_conversation(parse_body(CountTokensRequest, json.dumps(body).encode()))
    calls = [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
        },
        {
            "id": "toolu_2",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Lima"}},
        },
    ]
    assert conversation.messages == [
        {"role": "system", "content": "Be brief.\n\nBe kind."},
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": calls,
            "reasoning_content": "Two cities.",
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "3 C", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "18 C", "name": "get_weather"},
        {"role": "user", "content": "Which is warmer?"},
    ]
    assert [t.name for t in conversation.tools] == ["get_weather"]
    assert conversation.tools[0].parameters == WEATHER["input_schema"]
    assert conversation.tool_choice == ToolChoice("required")
    assert conversation.parallel_tool_calls is False
    assert conversation.thinking is False
    named = messages_conversation(
        parse_body(
            CountTokensRequest,
            json.dumps(
                {**body, "tool_choice": {"type": "tool", "name": "get_weather"}, "thinking": None}
            ).encode(),
        )
    )
    assert named.tool_choice == ToolChoice("named", "get_weather") and named.parallel_tool_calls
    assert named.thinking is None


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
