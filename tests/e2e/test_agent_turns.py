"""Agent turns: a tool loop played as Claude Code and Codex play it never prefills the history again.

An agent sends its whole conversation with every call: the question, each tool call exactly as
the model made it, each result. Through the real SDKs and a real host, each dialect's loop runs
three turns, every one forcing a tool (the tiny model's weights are random: only a grammar makes
it call one), and checks what a user sees: each turn's cached prompt tokens cover the turn before,
so only the new tail is prefilled; each request is a session that closes with its outcome; and a
client that walks out of a stream frees its sequence.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response, ResponseFunctionToolCall

from mlxhost.testing import RunningHost, outcome_without_drafts, wait_until
from mlxhost.wire.headers import SESSION_HEADER

TURNS = 3
TOOL_TOKENS = 300  # a call ends well before (the grammar closes it); see test_messages.py
PARAMETERS: Any = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
DESCRIPTION = "The weather in a city."
# One tool, in each dialect's form, and the choice that forces exactly one call of it.
ANTHROPIC_TOOL: Any = {"name": "get_weather", "description": DESCRIPTION, "input_schema": PARAMETERS}
ANTHROPIC_CHOICE: Any = {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}
RESPONSES_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": DESCRIPTION,
    "parameters": PARAMETERS,
}
RESPONSES_CHOICE: Any = {"type": "function", "name": "get_weather"}
CHAT_TOOL: Any = {
    "type": "function",
    "function": {"name": "get_weather", "description": DESCRIPTION, "parameters": PARAMETERS},
}
CHAT_CHOICE: Any = {"type": "function", "function": {"name": "get_weather"}}
# The greedy reply to this runs for thousands of tokens (see test_cancellation.py).
FOREVER = "Go on forever"
LONG_TOKENS = 4000


@dataclass(frozen=True)
class Turn:
    """What one call of the loop reported about its prompt, and the session that served it."""

    prompt: int  # prompt tokens in all, the cached ones included
    cached: int
    session: str


@pytest.fixture
def claude(server: RunningHost) -> Iterator[anthropic.Anthropic]:
    assert server.url is not None
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture
def codex(server: RunningHost) -> Iterator[openai.OpenAI]:
    assert server.url is not None
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0) as c:
        yield c


def fresh(question: str) -> str:
    # No earlier prompt held this question: past the tools' system turn (which every prompt here
    # shares), what a turn finds cached, the turns before it left there.
    return f"{question} ({uuid.uuid4().hex})"


def assert_each_turn_reuses_the_one_before(turns: list[Turn]) -> None:
    assert len(turns) == TURNS
    for earlier, later in itertools.pairwise(turns):
        # All of the turn before is reused (and its reply too, as far as it re-renders to the
        # tokens generated): only the new tail is prefilled.
        assert later.cached >= earlier.prompt, (earlier, later)
        assert later.cached < later.prompt


def outcome(server: RunningHost, session: str) -> dict[str, Any]:
    """The outcome the admin state reports for `session`, once it has closed."""

    def closed() -> dict[str, Any] | None:
        with server.http() as http:
            recent = http.get("/admin/state").json()["sessions"]["recent"]
        return next((s for s in recent if s["id"] == session), None)

    record = wait_until(closed, timeout=10)
    assert record is not None and record["state"] == "closed"
    return outcome_without_drafts(record["outcome"])


def assert_sessions_made_calls(server: RunningHost, turns: list[Turn]) -> None:
    assert len({turn.session for turn in turns}) == len(turns)
    for turn in turns:
        assert outcome(server, turn.session) == {"kind": "completed", "finish_reason": "tool_calls"}


# -- Messages (Claude Code) ------------------------------------------------------------------------


def messages_turn(client: anthropic.Anthropic, history: list[Any], stream: bool) -> tuple[Message, Turn]:
    request: Any = {
        "model": "tiny",
        "max_tokens": TOOL_TOKENS,
        "messages": history,
        "tools": [ANTHROPIC_TOOL],
        "tool_choice": ANTHROPIC_CHOICE,
    }
    if stream:
        with client.messages.stream(**request) as events:
            message = events.get_final_message()
            session = events.response.headers[SESSION_HEADER]
    else:
        raw = client.messages.with_raw_response.create(**request)
        message, session = raw.parse(), raw.headers[SESSION_HEADER]
    assert message.stop_reason == "tool_use", message.content
    cached = message.usage.cache_read_input_tokens or 0
    return message, Turn(message.usage.input_tokens + cached, cached, session)


def claude_code_loop(client: anthropic.Anthropic, stream: bool) -> list[Turn]:
    history: list[Any] = [{"role": "user", "content": fresh("What is the weather in Lima?")}]
    turns = []
    for n in range(TURNS):
        message, turn = messages_turn(client, history, stream)
        [call] = [block for block in message.content if block.type == "tool_use"]
        result = {"type": "tool_result", "tool_use_id": call.id, "content": f"{18 + n} C, dry"}
        # The reply goes back as it came, blocks and all, then the result in a user turn.
        history += [{"role": "assistant", "content": message.content}, {"role": "user", "content": [result]}]
        turns.append(turn)
    return turns


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_claude_code_loop_prefills_only_each_new_tail(
    server: RunningHost, claude: anthropic.Anthropic, stream: bool
) -> None:
    turns = claude_code_loop(claude, stream)
    assert_each_turn_reuses_the_one_before(turns)
    assert_sessions_made_calls(server, turns)


# -- Responses (Codex) -----------------------------------------------------------------------------


def responses_turn(
    client: openai.OpenAI, items: list[Any], previous: str | None = None
) -> tuple[Response, ResponseFunctionToolCall, Turn]:
    raw = client.responses.with_raw_response.create(
        model="tiny",
        input=items,
        previous_response_id=previous,
        tools=[RESPONSES_TOOL],
        tool_choice=RESPONSES_CHOICE,
        parallel_tool_calls=False,
        max_output_tokens=TOOL_TOKENS,
    )
    reply = raw.parse()
    assert reply.status == "completed", reply.output
    [call] = [item for item in reply.output if item.type == "function_call"]
    usage = reply.usage
    assert usage is not None
    turn = Turn(usage.input_tokens, usage.input_tokens_details.cached_tokens, raw.headers[SESSION_HEADER])
    return reply, call, turn


def tool_output(call: ResponseFunctionToolCall, n: int) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call.call_id, "output": f'{{"celsius": {18 + n}}}'}


def test_a_codex_loop_that_resends_its_items_prefills_only_each_new_tail(
    server: RunningHost, codex: openai.OpenAI
) -> None:
    items: list[Any] = [{"role": "user", "content": fresh("What is the weather in Oslo?")}]
    turns = []
    for n in range(TURNS):
        reply, call, turn = responses_turn(codex, items)
        items += [*reply.output, tool_output(call, n)]
        turns.append(turn)
    assert_each_turn_reuses_the_one_before(turns)
    assert_sessions_made_calls(server, turns)


def test_a_codex_loop_on_previous_response_id_prefills_only_each_new_tail(
    server: RunningHost, codex: openai.OpenAI
) -> None:
    items: list[Any] = [{"role": "user", "content": fresh("What is the weather in Quito?")}]
    previous = None
    turns = []
    for n in range(TURNS):
        reply, call, turn = responses_turn(codex, items, previous)
        # Only the results go back: the host holds the rest under the response's id.
        items, previous = [tool_output(call, n)], reply.id
        turns.append(turn)
    assert_each_turn_reuses_the_one_before(turns)
    assert_sessions_made_calls(server, turns)


# -- Chat Completions with tools -------------------------------------------------------------------


def chat_turn(client: openai.OpenAI, messages: list[Any]) -> tuple[ChatCompletion, Turn]:
    raw = client.chat.completions.with_raw_response.create(
        model="tiny",
        messages=messages,
        tools=[CHAT_TOOL],
        tool_choice=CHAT_CHOICE,
        parallel_tool_calls=False,
        max_tokens=TOOL_TOKENS,
    )
    reply = raw.parse()
    assert reply.choices[0].finish_reason == "tool_calls", reply.choices[0]
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    return reply, Turn(usage.prompt_tokens, cached, raw.headers[SESSION_HEADER])


def test_a_chat_tool_loop_prefills_only_each_new_tail(
    server: RunningHost, codex: openai.OpenAI
) -> None:
    messages: list[Any] = [{"role": "user", "content": fresh("What is the weather in Perth?")}]
    turns = []
    for n in range(TURNS):
        reply, turn = chat_turn(codex, messages)
        message = reply.choices[0].message
        assert message.tool_calls is not None
        [call] = message.tool_calls
        # The assistant message goes back as the SDK returned it, as OpenAI's own examples do.
        messages += [message, {"role": "tool", "tool_call_id": call.id, "content": f"{18 + n} C"}]
        turns.append(turn)
    assert_each_turn_reuses_the_one_before(turns)
    assert_sessions_made_calls(server, turns)


# -- Leaving a stream ------------------------------------------------------------------------------


def assert_left_and_freed(server: RunningHost, before: dict[str, Any], session: str) -> None:
    after = server.wait_for(lambda c: c["cancelled"] == before["cancelled"] + 1 and c["active"] == 0)
    assert after["completed"] == before["completed"]
    assert after["last_cancel_lag_steps"] <= 1
    assert after["generated_tokens"] - before["generated_tokens"] < LONG_TOKENS
    assert server.engine()["generated_tokens"] == after["generated_tokens"]  # nothing more is made
    assert outcome(server, session) == {"kind": "cancelled", "reason": "client_disconnected"}


def test_a_claude_code_client_that_leaves_a_stream_frees_its_sequence(
    server: RunningHost, claude: anthropic.Anthropic
) -> None:
    before = server.wait_for(lambda c: c["active"] == 0)
    messages: Any = [{"role": "user", "content": FOREVER}]
    with claude.messages.stream(
        model="tiny", max_tokens=LONG_TOKENS, messages=messages, extra_body={"temperature": 0.0}
    ) as stream:
        session = stream.response.headers[SESSION_HEADER]
        deltas = (event for event in stream if event.type == "content_block_delta")
        assert len([delta for delta, _ in zip(deltas, range(5), strict=False)]) == 5
    # Leaving the block closed the connection mid-stream.
    assert_left_and_freed(server, before, session)


def test_a_codex_client_that_leaves_a_stream_frees_its_sequence(
    server: RunningHost, codex: openai.OpenAI
) -> None:
    before = server.wait_for(lambda c: c["active"] == 0)
    with codex.responses.create(
        model="tiny", input=FOREVER, max_output_tokens=LONG_TOKENS, temperature=0.0, stream=True
    ) as stream:
        session = stream.response.headers[SESSION_HEADER]
        deltas = (event for event in stream if event.type == "response.output_text.delta")
        assert len([delta for delta, _ in zip(deltas, range(5), strict=False)]) == 5
    assert_left_and_freed(server, before, session)
