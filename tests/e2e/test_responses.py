"""The Responses API (/v1/responses) as the `openai` SDK sees it, against the real tiny model:
whole and streamed responses, parsed output, stored conversations, what is refused, the stream
writer's failure, the response store, and a model that thinks. Tool calls are in
test_responses_tools.py.

The tiny model's weights are random, so what it says freely is noise: the tests check shapes,
counts and round trips, and get JSON from the grammar, which makes it valid every time or never.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import Response
from pydantic import BaseModel, Field

from mlxhost.testing import RunningHost, start_host
from mlxhost.wire.chunks import Delta, ToolCall
from mlxhost.wire.errors import ServiceUnavailable
from mlxhost.worker.api.responses import ResponseStore
from mlxhost.worker.api.responses_writer import ResponsesWriter
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.parts import Output
from tests.e2e.responses_helpers import (
    ASK,
    EVENT_TYPES,
    WEATHER,
    concurrently,
    strictly,
    tokenizer_fixture,  # noqa: F401 - the `tokenizer` fixture
)


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
    # The text was done before the call: the cut came after both (a call cut off is left out).
    assert reply.status == "incomplete" and statuses == ["completed", "completed"]
    cut = writer.whole(Answer(Output(content="x"), None, Delta(completion_tokens=2), "length"))
    assert [item["status"] for item in cut["output"]] == ["incomplete"]  # the text it was writing


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
