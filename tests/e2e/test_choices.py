"""`n` choices on /v1/chat/completions and /v1/completions, as the `openai` SDK sees them: one
session per choice, batched together, the choices streamed interleaved by index, and the usage
counting the prompt once and every choice's completion.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import httpx
import jsonschema_rs
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from mlxhost.testing import RunningHost

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me about café culture"}]
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMETERS}}
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
LONG = {"messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 4000, "temperature": 0}


def valid(arguments: str) -> bool:
    return bool(jsonschema_rs.validator_for(WEATHER_PARAMETERS).is_valid(json.loads(arguments)))


def test_three_chat_choices_whole(client: openai.OpenAI) -> None:
    one = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=20, temperature=0)
    reply = client.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=20, temperature=1.0, n=3, logprobs=True
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    tokens = 0
    for choice in reply.choices:
        assert choice.message.role == "assistant" and choice.message.content is not None
        assert choice.finish_reason in ("stop", "length")
        assert choice.logprobs is not None and choice.logprobs.content is not None
        tokens += len(choice.logprobs.content)
    # Three samples of random weights: not all the same text.
    assert len({c.message.content for c in reply.choices}) > 1
    assert reply.usage is not None and one.usage is not None
    assert reply.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once
    assert reply.usage.completion_tokens == tokens
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + tokens


def test_three_chat_choices_stream_as_the_whole_answer(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": "tiny", "messages": HELLO, "max_tokens": 40, "temperature": 1.0}
    kwargs |= {"seed": 11, "n": 3}
    whole = client.chat.completions.create(**kwargs)
    with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as stream:
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        # The snapshot, not get_final_completion(): that refuses an answer cut short by max_tokens.
        streamed = stream.current_completion_snapshot
    # The SDK assembled the choices by index; seeded, they are the whole answer's.
    assert [c.index for c in streamed.choices] == [0, 1, 2]
    for got, expected in zip(streamed.choices, whole.choices, strict=True):
        assert got.message.content == expected.message.content
        assert got.finish_reason == expected.finish_reason
    assert streamed.usage == whole.usage
    # Each choice opens with its role and ends with one finish; the usage comes once, last.
    roles: defaultdict[int, list[str]] = defaultdict(list)
    finishes: defaultdict[int, list[str]] = defaultdict(list)
    for chunk in chunks:
        assert len(chunk.choices) <= 1
        for choice in chunk.choices:
            if choice.delta.role:
                assert not finishes[choice.index]
                roles[choice.index].append(choice.delta.role)
            if choice.finish_reason:
                finishes[choice.index].append(choice.finish_reason)
    assert dict(roles) == {i: ["assistant"] for i in range(3)}
    assert dict(finishes) == {i: [whole.choices[i].finish_reason] for i in range(3)}
    assert [c.usage is not None for c in chunks].count(True) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_seeded_choices_are_reproducible_and_differ(client: openai.OpenAI) -> None:
    def sample(seed: int, n: int) -> list[str]:
        reply = client.completions.create(
            model="tiny", prompt="Once upon", max_tokens=30, temperature=1.0, seed=seed, n=n
        )
        assert [c.index for c in reply.choices] == list(range(n))
        return [c.text for c in reply.choices]

    first = sample(5, 2)
    assert sample(5, 2) == first
    assert first[0] != first[1]
    # Choice i samples as a request of its own with seed + i would.
    assert sample(6, 1) == first[1:]


def test_three_text_choices_whole_and_streamed(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {"model": "tiny", "prompt": "Once upon", "max_tokens": 30, "temperature": 1.0}
    kwargs |= {"seed": 3, "n": 3}
    whole = client.completions.create(**kwargs, logprobs=0)
    assert [c.index for c in whole.choices] == [0, 1, 2]
    texts: defaultdict[int, str] = defaultdict(str)
    offsets: defaultdict[int, list[int]] = defaultdict(list)
    usage = None
    for chunk in client.completions.create(
        **kwargs, logprobs=0, stream=True, stream_options={"include_usage": True}
    ):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.logprobs is not None:
                offsets[choice.index] += choice.logprobs.text_offset or []
    assert [texts[i] for i in range(3)] == [c.text for c in whole.choices]
    logprobs = [c.logprobs for c in whole.choices]
    assert all(lp is not None for lp in logprobs)
    # Each choice counts its own text offsets.
    assert [offsets[i] for i in range(3)] == [lp.text_offset for lp in logprobs if lp]
    assert usage == whole.usage
    assert whole.usage is not None
    assert whole.usage.completion_tokens == sum(len(lp.tokens or []) for lp in logprobs if lp)


def test_every_choice_of_a_required_tool_is_a_valid_call(client: openai.OpenAI) -> None:
    kwargs: dict[str, Any] = {
        "model": "tiny",
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": 1.0,
        "seed": 7,
        "max_tokens": 120,
        "n": 3,
    }
    reply = client.chat.completions.create(**kwargs)
    assert len(reply.choices) == 3
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls or []
        assert call.type == "function" and call.function.name == "get_weather"
        assert valid(call.function.arguments), call.function.arguments
    # Streamed, each choice's call has index 0 among its calls, and the SDK puts it together.
    with client.chat.completions.stream(**kwargs) as stream:
        streamed = stream.get_final_completion()
    for got, expected in zip(streamed.choices, reply.choices, strict=True):
        assert got.finish_reason == "tool_calls"
        [call] = got.message.tool_calls or []
        [whole_call] = expected.message.tool_calls or []
        assert call.function.name == whole_call.function.name
        assert call.function.arguments == whole_call.function.arguments


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_more_than_eight_choices_is_a_400_naming_n(server: RunningHost, path: str) -> None:
    body = {"messages": HELLO} if path == "/v1/chat/completions" else {"prompt": "Once upon"}
    with server.http() as http:
        response = http.post(path, json={"model": "tiny", "max_tokens": 4, "n": 9, **body})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "n"


def test_a_client_leaving_a_stream_of_four_choices_stops_all_four(server: RunningHost) -> None:
    before = server.wait_for(lambda c: c["active"] == 0)
    body = {**LONG, "n": 4, "stream": True}
    with server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        indexes: set[int] = set()
        for line in response.iter_lines():
            if line.startswith("data: {"):
                indexes.update(c["index"] for c in json.loads(line[6:])["choices"])
            # Every choice has begun, and hundreds of tokens are out.
            begun = indexes == {0, 1, 2, 3}
            if begun and server.engine()["generated_tokens"] > before["generated_tokens"] + 200:
                break
        # Leaving the block closes the connection mid-stream.
    after = server.wait_for(lambda c: c["cancelled"] == before["cancelled"] + 4 and c["active"] == 0)
    assert after["completed"] == before["completed"]
    assert after["generated_tokens"] - before["generated_tokens"] < 4 * 4000
    # Nothing is generated once the client has gone.
    assert server.engine()["generated_tokens"] == after["generated_tokens"]


def test_a_client_leaving_a_whole_answer_of_four_choices_stops_all_four(server: RunningHost) -> None:
    before = server.wait_for(lambda c: c["active"] == 0)
    with server.http() as http:
        try:
            http.post("/v1/chat/completions", json={**LONG, "n": 4}, timeout=httpx.Timeout(30, read=0.3))
        except httpx.ReadTimeout:
            pass
        else:
            raise AssertionError("the request finished before the client gave up")
    after = server.wait_for(lambda c: c["cancelled"] == before["cancelled"] + 4 and c["active"] == 0)
    assert after["completed"] == before["completed"]
    assert after["generated_tokens"] - before["generated_tokens"] < 4 * 4000
    assert server.engine()["generated_tokens"] == after["generated_tokens"]
