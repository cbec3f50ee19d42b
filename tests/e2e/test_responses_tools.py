"""Tool calls through the Responses API (/v1/responses) as the `openai` SDK sees it, against the
real tiny model: named and required tools, streamed calls, results sent back, and calls that the
token limit cuts off.

The tiny model's weights are random, so what it says freely is noise: the tests get tool calls
from the grammar, which makes them valid every time or never.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from openai.types.responses import Response

from tests.e2e.responses_helpers import (
    ASK,
    CLOCK,
    WEATHER,
    calls,
    concurrently,
    strictly,
    tokenizer_fixture,  # noqa: F401 - the `tokenizer` fixture
    valid,
)


def test_a_named_tool_is_called_with_valid_arguments_every_time(client: openai.OpenAI) -> None:
    def named() -> Response:
        return client.responses.create(
            model="tiny",
            input=ASK,
            tools=[WEATHER, CLOCK],
            tool_choice={"type": "function", "name": "get_weather"},
            parallel_tool_calls=False,
            temperature=1.0,
            max_output_tokens=400,
        )

    for reply in concurrently(named):
        assert reply.status == "completed" and reply.output_text == ""
        [call] = calls(reply)
        assert call.id is not None and call.id.startswith("fc_") and call.call_id.startswith("call_")
        assert call.name == "get_weather" and call.status == "completed"
        assert valid(call.name, call.arguments), call.arguments


def test_a_required_tool_is_one_of_those_offered_every_time(client: openai.OpenAI) -> None:
    def required() -> Response:
        return client.responses.create(
            model="tiny",
            input=ASK,
            tools=[WEATHER, CLOCK],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=1.0,
            max_output_tokens=400,
        )

    names = set()
    for reply in concurrently(required):
        [call] = calls(reply)
        assert valid(call.name, call.arguments), call.arguments
        names.add(call.name)
    assert names == {"get_weather", "get_time"}  # the choice was the model's


def test_a_streamed_tool_call(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(
            model="tiny",
            input=ASK,
            tools=[WEATHER],
            tool_choice="required",
            parallel_tool_calls=False,
            max_output_tokens=400,
            stream=True,
        )
    )
    strictly(*events)
    kinds = [event.type for event in events]
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    # The arguments stream as the model writes them; how many pieces the frames hold is timing.
    assert deltas
    assert [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    arguments = "".join(e.delta for e in deltas)  # type: ignore[union-attr]
    assert events[-3].arguments == arguments and valid("get_weather", arguments)  # type: ignore[union-attr]
    [call] = calls(events[-1].response)  # type: ignore[union-attr]
    assert call.arguments == arguments and call.id == events[2].item.id  # type: ignore[union-attr]


def test_a_tool_result_round_trips(client: openai.OpenAI, tokenizer) -> None:  # type: ignore[no-untyped-def]
    first = client.responses.create(
        model="tiny",
        input=ASK,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_output_tokens=400,
        store=False,
    )
    [call] = calls(first)
    # As an agent does it: the output items go back as input, with the result of each call.
    history: Any = [
        {"role": "user", "content": ASK},
        *first.output,
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature": 21}'},
    ]
    second = client.responses.create(model="tiny", input=history, tools=[WEATHER], max_output_tokens=8)
    # The prompt is the conversation as a chat template takes it: the call, then its result.
    conversation = [
        {"role": "user", "content": ASK},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.loads(call.arguments)},
                }
            ],
        },
        {
            "role": "tool",
            "content": '{"temperature": 21}',
            "tool_call_id": call.call_id,
            "name": "get_weather",
        },
    ]
    function = {k: v for k, v in WEATHER.items() if k != "type"}
    prompt = tokenizer.apply_chat_template(
        conversation, tools=[{"type": "function", "function": function}], add_generation_prompt=True
    )
    assert second.usage is not None and second.usage.input_tokens == len(prompt)


def test_max_output_tokens_leaves_it_incomplete(client: openai.OpenAI) -> None:
    # A forced tool call cannot end in 3 tokens: the answer is cut, and says so.
    forced: Any = {
        "model": "tiny",
        "input": ASK,
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_output_tokens": 3,
    }
    reply = client.responses.create(**forced)
    assert reply.status == "incomplete" and reply.incomplete_details is not None
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage is not None and reply.usage.output_tokens == 3
    assert not calls(reply) and reply.output[-1].status == "incomplete"  # type: ignore[union-attr]
    events = list(client.responses.create(stream=True, **forced))
    strictly(reply, *events)
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]


def test_a_call_cut_by_max_output_tokens_is_incomplete_and_never_text(client: openai.OpenAI) -> None:
    for limit in (16, 40):
        reply = client.responses.create(
            model="tiny",
            input=ASK,
            tools=[WEATHER, CLOCK],
            tool_choice="required",
            temperature=1.0,
            max_output_tokens=limit,
        )
        # Nothing of the cut call is text: a reply with no call that completed is one empty message.
        assert reply.output_text == "" and "tool_call>" not in reply.model_dump_json()
        if reply.status == "incomplete":
            assert reply.incomplete_details is not None
            assert reply.incomplete_details.reason == "max_output_tokens"
        for call in calls(reply):  # those that completed, whole
            assert valid(call.name, call.arguments), call.arguments
