"""Tool use and structured output through Anthropic's Messages API, as its official SDK sees it,
against the real tiny model.

The tiny model's weights are random: free output is noise, so these tests get real tool calls by
forcing the tool choice (a grammar then holds the output to a valid call), and check shapes.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import jsonschema_rs
import pytest
from anthropic.types import Message, ToolUseBlock

from mlxhost.wire.anthropic import CountTokensRequest
from mlxhost.wire.parsing import parse_body
from mlxhost.worker.api.conversation import ToolChoice
from mlxhost.worker.api.messages import messages_conversation
from tests.e2e.messages_helpers import HELLO, WEATHER, client_fixture  # noqa: F401 - the `client` fixture

CITIES = ["Paris", "Lagos", "Lima", "Oslo", "Kyoto", "Quito", "Perth", "Cairo", "Dakar", "Hanoi"]
# One call, its strings bounded: the grammar ends it, so it never runs this long.
TOOL_TOKENS = 300
# Exactly one call (a named tool is one call whatever disable_parallel_tool_use says). Allowed
# more (`any`), the random model (where a real one would stop) goes on calling as often as not, and
# the answer ends at max_tokens: see test_parallel_calls_are_blocks_each.
ONE_WEATHER_CALL: Any = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}


def _tool_use(message: Message) -> ToolUseBlock:
    calls = [block for block in message.content if block.type == "tool_use"]
    assert len(calls) == 1, message.content
    return calls[0]


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
    """Calls that completed stay whole, and no markup is ever text. The one max_tokens cut is left
    out of a whole message; a stream had begun its block, which ends as far as it got (as
    Anthropic's own does), and the stop reason says it was cut."""
    validator = jsonschema_rs.validator_for(WEATHER["input_schema"])

    def check(message: Message, max_tokens: int, streamed: bool = False) -> None:
        assert message.stop_reason in ("max_tokens", "tool_use"), message
        assert all(block.type == "tool_use" for block in message.content), message.content
        complete = message.content[:-1] if streamed and message.stop_reason == "max_tokens" else message.content
        assert all(validator.is_valid(block.input) for block in complete)
        if max_tokens == 6:  # too few for any call: the one begun is always cut
            assert message.stop_reason == "max_tokens"
            assert len(message.content) == (1 if streamed else 0) or message.content == []

    # Each request samples on its own (Messages takes no seed): whole and streamed are each
    # checked, not compared.
    request: dict[str, Any] = {
        "model": "tiny", "extra_body": {"temperature": 1.0}, "messages": HELLO, "tools": [WEATHER],
        "tool_choice": {"type": "any"},
    }  # fmt: skip
    for max_tokens in (6, 20, 45, 90):
        check(client.messages.create(max_tokens=max_tokens, **request), max_tokens)
        with client.messages.stream(max_tokens=max_tokens, **request) as stream:
            check(stream.get_final_message(), max_tokens, streamed=True)


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


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "text_editor_20250124", "name": "str_replace_editor"},
        {"type": "memory_20250818", "name": "memory"},
    ],
)
def test_a_client_tool_is_offered_with_its_published_schema(client: anthropic.Anthropic, tool: dict[str, Any]) -> None:
    """Anthropic's client tools run on the client: the model is offered them, and calls them.

    The published schemas leave strings unbounded, which the random model may write until
    max_tokens: the call is seen opening (its block in the stream), and its schema in the prompt.
    """
    plain = client.messages.count_tokens(model="tiny", messages=[{"role": "user", "content": "Look."}])
    offered = client.messages.count_tokens(
        model="tiny", messages=[{"role": "user", "content": "Look."}], tools=[tool]  # type: ignore[list-item]
    )
    assert offered.input_tokens > plain.input_tokens + 20  # its name, description and schema
    with client.messages.stream(
        model="tiny",
        max_tokens=48,
        messages=[{"role": "user", "content": "Look at the files here."}],
        tools=[tool],  # type: ignore[list-item]
        tool_choice={"type": "tool", "name": tool["name"]},
    ) as stream:
        opened = [
            e.content_block for e in stream if e.type == "content_block_start" and e.content_block.type == "tool_use"
        ]
    assert opened and opened[0].name == tool["name"]


def test_a_client_tool_with_another_name_is_refused(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "bash_20250124", "name": "shell"}],  # type: ignore[list-item]
        )  # fmt: skip
    assert "tools[0].name" in str(refused.value)
