"""The Responses API (/v1/responses) as the `openai` SDK sees it, against the real tiny model.

The tiny model's weights are random, so what it says freely is noise: the tests check shapes,
counts and round trips, and get tool calls and JSON from the grammar, which makes them valid
every time or never.
"""

from __future__ import annotations

import json
import shutil
import typing
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import jsonschema_rs
import mlx_lm
import openai
import pytest
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseStreamEvent
from pydantic import BaseModel, Field

from mlxhost.testing import RunningHost, start_host
from mlxhost.wire.chunks import Delta, ToolCall
from mlxhost.wire.errors import ServiceUnavailable
from mlxhost.worker.api.responses import ResponseStore
from mlxhost.worker.api.responses_writer import ResponsesWriter
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.output import Output

RUNS = 20
T = TypeVar("T")
ASK = "What is the weather in Paris?"
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CLOCK_PARAMETERS = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 8}},
    "required": ["zone"],
    "additionalProperties": False,
}
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The forecast",
    "parameters": WEATHER_PARAMETERS,
}
CLOCK: Any = {"type": "function", "name": "get_time", "parameters": CLOCK_PARAMETERS}
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": CLOCK_PARAMETERS}


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path):  # type: ignore[no-untyped-def]
    return mlx_lm.load(str(tiny_model))[1]


def calls(response: Response) -> list[ResponseFunctionToolCall]:
    return [item for item in response.output if item.type == "function_call"]


# The SDK reads events and responses without validating them; its types validate them strictly.
EVENT_TYPES = {
    typing.get_args(event.model_fields["type"].annotation)[0]: event
    for event in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def strictly(*read: Any) -> None:
    """Each of `read` (responses, stream events) is what the SDK's own type says, field by field."""
    for item in read:
        model = Response if isinstance(item, Response) else EVENT_TYPES[item.type]
        model.model_validate(item.to_dict())


def concurrently(request: Callable[[], T], runs: int = RUNS) -> list[T]:
    """`runs` answers to the same request, several at a time: they share the model's batches."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda _: request(), range(runs)))


def valid(name: str, arguments: str) -> bool:
    return bool(jsonschema_rs.validator_for(SCHEMAS[name]).is_valid(json.loads(arguments)))


def test_a_whole_response(client: openai.OpenAI, tokenizer) -> None:  # type: ignore[no-untyped-def]
    reply = client.responses.create(
        model="tiny",
        input=ASK,
        instructions="Be brief.",
        max_output_tokens=16,
        temperature=0,
        metadata={"k": "v"},
    )
    strictly(reply)
    assert reply.object == "response" and reply.id.startswith("resp_")
    assert reply.status in ("completed", "incomplete")
    [message] = reply.output
    assert message.type == "message" and message.id.startswith("msg_") and message.role == "assistant"
    assert [part.type for part in message.content] == ["output_text"]
    assert reply.output_text == message.content[0].text  # type: ignore[union-attr]
    # The settings come back, as the SDK's Response has them.
    assert reply.instructions == "Be brief." and reply.max_output_tokens == 16 and reply.temperature == 0
    assert reply.metadata == {"k": "v"} and reply.to_dict()["store"] is True and reply.tool_choice == "auto"
    usage = reply.usage
    assert usage is not None
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}],
        add_generation_prompt=True,
    )
    assert usage.input_tokens == len(prompt)
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens <= usage.input_tokens
    assert usage.output_tokens_details.reasoning_tokens == 0
    if reply.status == "incomplete":
        assert usage.output_tokens == 16 and reply.incomplete_details is not None
        assert reply.incomplete_details.reason == "max_output_tokens"
    else:
        assert usage.output_tokens <= 16 and reply.incomplete_details is None


def test_a_streamed_response_is_its_typed_events_in_order(client: openai.OpenAI) -> None:
    whole = client.responses.create(model="tiny", input=ASK, max_output_tokens=40, temperature=0)
    events = list(
        client.responses.create(model="tiny", input=ASK, max_output_tokens=40, temperature=0, stream=True)
    )
    strictly(whole, *events)
    kinds = [event.type for event in events]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == f"response.{whole.status}"
    assert kinds[2:-1] == [
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * kinds.count("response.output_text.delta"),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    final = events[-1].response  # type: ignore[union-attr]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == deltas == whole.output_text
    assert final.usage.input_tokens == whole.usage.input_tokens  # type: ignore[union-attr]
    assert final.usage.output_tokens == whole.usage.output_tokens  # type: ignore[union-attr]
    assert final.output[0].id == events[2].item.id  # type: ignore[union-attr]
    assert events[0].response.status == "in_progress" and events[0].response.id == final.id  # type: ignore[union-attr]


class Forecast(BaseModel):
    city: str = Field(max_length=12)
    days: int = Field(ge=1, le=7)
    rain: bool
    hours: list[int] = Field(max_length=3)


def test_the_stream_helper_and_parse(client: openai.OpenAI) -> None:
    with client.responses.stream(model="tiny", input=ASK, max_output_tokens=24, temperature=1.0) as stream:
        events = list(stream)
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    # The helper's final response is a completed one's (OpenAI's incomplete ones end the stream
    # with response.incomplete instead, as here when the 24 tokens run out).
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    assert last.response.output_text == text  # type: ignore[union-attr]
    with client.responses.stream(
        model="tiny", input=ASK, text_format=Forecast, max_output_tokens=400
    ) as stream:
        parsed = stream.get_final_response()
    assert isinstance(parsed.output_parsed, Forecast)


def test_parse_with_a_pydantic_model_validates_every_time(client: openai.OpenAI) -> None:
    def parse() -> Any:
        return client.responses.parse(
            model="tiny", input=ASK, text_format=Forecast, temperature=1.0, max_output_tokens=400
        )

    for reply in concurrently(parse):
        assert reply.status == "completed", reply.output_text
        assert isinstance(reply.output_parsed, Forecast)
        assert reply.text is not None and reply.text.format is not None
        assert reply.text.format.type == "json_schema"


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
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    arguments: str = events[3].delta  # type: ignore[union-attr,assignment]
    assert events[4].arguments == arguments and valid("get_weather", arguments)  # type: ignore[union-attr]
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


def test_previous_response_id_continues_a_stored_conversation(client: openai.OpenAI, tokenizer) -> None:  # type: ignore[no-untyped-def]
    first = client.responses.create(model="tiny", input=ASK, max_output_tokens=8, temperature=0)
    second = client.responses.create(
        model="tiny", input="And tomorrow?", previous_response_id=first.id, max_output_tokens=4
    )
    alone = client.responses.create(model="tiny", input="And tomorrow?", max_output_tokens=4)
    assert second.previous_response_id == first.id
    assert second.usage is not None and alone.usage is not None
    assert second.usage.input_tokens > alone.usage.input_tokens
    # Exactly the conversation so far: the question, the stored answer, the new question.
    conversation = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert second.usage.input_tokens == len(
        tokenizer.apply_chat_template(conversation, add_generation_prompt=True)
    )
    third = client.responses.create(
        model="tiny", input="Thanks", previous_response_id=second.id, max_output_tokens=4
    )
    assert third.usage is not None and third.usage.input_tokens > second.usage.input_tokens


def test_what_is_not_stored_cannot_be_continued(client: openai.OpenAI) -> None:
    unstored = client.responses.create(model="tiny", input=ASK, max_output_tokens=4, store=False)
    assert unstored.to_dict()["store"] is False
    for response_id in (unstored.id, "resp_nonexistent"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="tiny", input="Go on", previous_response_id=response_id, max_output_tokens=4
            )
        assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]


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


def test_reasoning_effort_reaches_the_template(client: openai.OpenAI) -> None:
    plain = client.responses.create(model="tiny", input=ASK, max_output_tokens=2)
    # No thinking: the demo template closes an empty think block in the prompt, as Qwen3's does.
    unthinking = client.responses.create(
        model="tiny", input=ASK, max_output_tokens=2, reasoning={"effort": "none"}
    )
    assert plain.usage is not None and unthinking.usage is not None
    assert unthinking.usage.input_tokens > plain.usage.input_tokens
    assert unthinking.reasoning is not None and unthinking.reasoning.effort == "none"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"tools": [{"type": "teleporter"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice.type"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        (
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}},
            "text.format.schema",
        ),
        ({"background": True}, "background"),
        ({"input": [{"role": "user", "content": "hi", "extra": 1}]}, "input[0].extra"),
        ({"input": [{"type": "function_call_output", "output": "42"}]}, "input[0].call_id"),
        ({"truncation": "auto"}, "truncation"),
        ({"max_output_tokens": 10**10}, "max_output_tokens"),
    ],
)
def test_what_cannot_be_done_is_a_400_naming_the_field(
    server: RunningHost, body: dict[str, Any], param: str
) -> None:
    with server.http() as http:
        response = http.post(
            "/v1/responses", json={"model": "tiny", "input": ASK, "max_output_tokens": 4, **body}
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_a_stream_that_fails_ends_with_an_error_then_response_failed() -> None:
    # A generation fails mid-stream only when the worker stops it (or breaks), so the writer is
    # driven here as the pipeline drives it; the SDK's types read every frame.
    writer = ResponsesWriter("tiny", 5, {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True})
    frames = [
        *writer.opening(),
        *writer.output(Output(content="Hel"), Delta("Hel", 1)),
        *writer.failure(ServiceUnavailable("the server is shutting down", code="shutting_down")),
    ]
    events = []
    for frame in frames:
        head, data = frame.decode().split("\n", 1)
        event = EVENT_TYPES[head.removeprefix("event: ")].model_validate_json(data.removeprefix("data: "))
        events.append(event)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    error, failed = events[-2:]
    assert error.type == "error" and error.code == "shutting_down"  # type: ignore[union-attr]
    assert failed.type == "response.failed" and failed.response.status == "failed"  # type: ignore[union-attr]
    assert failed.response.error is not None and failed.response.output_text == "Hel"  # type: ignore[union-attr]
    whole = writer.whole(
        Answer(
            Output(content="x", tool_calls=[ToolCall("call_1", "f", "{}")]),
            None,
            Delta(completion_tokens=2),
            "length",
        )
    )
    reply = Response.model_validate(whole)
    statuses = [getattr(item, "status", None) for item in reply.output]
    assert reply.status == "incomplete" and statuses == ["incomplete", "completed"]


def test_the_store_keeps_the_most_recent() -> None:
    store = ResponseStore(capacity=2)
    for name in ("a", "b", "c"):
        store.put("", name, [{"role": "user", "content": name}])
    assert store.get("", "a") is None and len(store) == 2
    assert store.get("", "b") is not None
    store.put("", "d", [])  # "b" was used last: "c" goes
    assert store.get("", "c") is None and store.get("", "b") is not None
    assert store.get("another caller", "b") is None


# -- a model that thinks --------------------------------------------------------------------------

# As thinking models' templates do (Qwen3's thinking variants): the reply starts inside the block.
THINKING = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "<|assistant|>\n<think>\n"
)


@pytest.fixture(scope="module")
def thinking_host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    path = tmp_path_factory.mktemp("thinking") / "thinker"
    shutil.copytree(tiny_model, path)
    config = json.loads((path / "tokenizer_config.json").read_text())
    config["chat_template"] = THINKING
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    with start_host("--model", str(path)) as host:
        yield host


def test_reasoning_is_an_output_item_of_its_own(thinking_host: RunningHost) -> None:
    with thinking_host.client() as client:
        reply = client.responses.create(model="thinker", input=ASK, max_output_tokens=12, temperature=0)
        reasoning = reply.output[0]
        assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
        assert (
            reasoning.content and reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text
        )
        events = list(
            client.responses.create(
                model="thinker", input=ASK, max_output_tokens=12, temperature=0, stream=True
            )
        )
        strictly(reply, *events)
        deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        [done] = [e.text for e in events if e.type == "response.reasoning_text.done"]
        assert deltas == done == reasoning.content[0].text
        # Sent back, it is accepted (and would render as the reasoning of the assistant turn after it).
        again = client.responses.create(
            model="thinker",
            input=[{"role": "user", "content": ASK}, *reply.output, {"role": "user", "content": "So?"}],  # type: ignore[list-item]
            max_output_tokens=2,
        )
        assert again.usage is not None and reply.usage is not None
        assert again.usage.input_tokens > reply.usage.input_tokens
