"""What an agent's request gets through a real host: skipped fields named in a header and in the
session's record, its own metadata kept, mid-conversation system turns, context editing, and a
max_tokens larger than what fits clamped to it."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from mlxhost.testing import RunningHost, wait_until

ASK = [{"role": "user", "content": "Say hello."}]


def closed_session(server: RunningHost, session_id: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        with server.http() as http:
            recent = http.get("/admin/state").json()["sessions"]["recent"]
        return next((s for s in recent if s["id"] == session_id), None)

    return wait_until(find, timeout=10)


def test_skipped_fields_are_named_to_the_client_and_in_the_sessions_outcome(server: RunningHost) -> None:
    with anthropic.Anthropic(base_url=server.url, api_key="unused") as client:
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet-4-5",
            max_tokens=4,
            system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            messages=ASK,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            metadata={"user_id": "agent-7"},
            extra_body={"speed": "fast"},
        )
    message = raw.parse()
    assert message.type == "message" and message.usage.output_tokens > 0
    ignored = raw.headers["x-mlxhost-ignored"].split(", ")
    assert sorted(ignored) == ["speed", "system.cache_control", "tools.web_search_20250305"]
    session = closed_session(server, raw.headers["x-mlxhost-session"])
    assert sorted(session["outcome"]["ignored"]) == sorted(ignored)
    assert session["client"] == {"user_id": "agent-7"}


def test_a_request_with_nothing_skipped_has_no_header(server: RunningHost) -> None:
    with server.client() as client:
        raw = client.chat.completions.with_raw_response.create(model="tiny", messages=ASK, max_tokens=2)
    assert "x-mlxhost-ignored" not in raw.headers
    session = closed_session(server, raw.headers["x-mlxhost-session"])
    assert "ignored" not in session["outcome"]


def test_codex_client_metadata_is_kept_bounded_in_the_session(server: RunningHost) -> None:
    metadata = {f"key{i}": "v" * 1000 for i in range(20)}
    with server.client() as client:
        raw = client.responses.with_raw_response.create(
            model="gpt-5-codex",
            input="Say hello.",
            max_output_tokens=2,
            store=False,
            include=["reasoning.encrypted_content"],
            extra_body={"client_metadata": metadata, "prompt_cache_key": "abc"},
        )
    assert raw.parse().status in ("completed", "incomplete")
    assert sorted(raw.headers["x-mlxhost-ignored"].split(", ")) == [
        "include.reasoning.encrypted_content",
        "prompt_cache_key",
    ]
    client_record = closed_session(server, raw.headers["x-mlxhost-session"])["client"]
    assert len(client_record) == 8
    assert all(len(value) < 200 for value in client_record.values())


def test_a_system_turn_mid_conversation_is_served(server: RunningHost) -> None:
    with anthropic.Anthropic(base_url=server.url, api_key="unused") as client:
        message = client.messages.create(
            model="tiny",
            max_tokens=3,
            messages=ASK,
            extra_body={"messages": [*ASK, {"role": "system", "content": "Answer in French."}]},
        )
        counted = client.messages.count_tokens(model="tiny", messages=ASK)
        counted_with = client.post(
            "/v1/messages/count_tokens",
            body={"model": "tiny", "messages": [*ASK, {"role": "system", "content": "Answer in French."}]},
            cast_to=object,
        )
    assert message.usage.output_tokens > 0
    assert isinstance(counted_with, dict) and counted_with["input_tokens"] > counted.input_tokens


def test_context_editing_clears_old_tool_results_before_the_prompt_renders(server: RunningHost) -> None:
    turns: list[dict[str, Any]] = []
    for i in range(4):
        turns.append(
            {"role": "user", "content": f"Look up item {i}."}
            if i == 0
            else {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{i - 1}", "content": "result " * 200}
                ],
            }
        )
        turns.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "lookup", "input": {"i": i}}],
            }
        )
    turns.append(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3", "content": "done"}]}
    )
    body = {
        "model": "tiny",
        "messages": turns,
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
    }
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 2},
        "keep": {"type": "tool_uses", "value": 1},
    }
    with anthropic.Anthropic(base_url=server.url, api_key="unused") as client:
        whole = client.post("/v1/messages/count_tokens", body=body, cast_to=object)
        edited = client.post(
            "/v1/messages/count_tokens",
            body={**body, "context_management": {"edits": [edit]}},
            cast_to=object,
        )
    assert isinstance(whole, dict) and isinstance(edited, dict)
    # Three results of 200 words each were cleared: the prompt is hundreds of tokens shorter.
    assert edited["input_tokens"] < whole["input_tokens"] - 300


def test_max_tokens_beyond_the_context_is_clamped_to_what_fits(server: RunningHost) -> None:
    prompt = [5] * 4090  # the tiny model's context is 4096 positions
    with server.client() as client:
        completion = client.completions.create(model="tiny", prompt=prompt, max_tokens=32_000)
    choice = completion.choices[0]
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 4090
    assert completion.usage.completion_tokens <= 6
    assert choice.finish_reason in ("length", "stop")


def test_a_prompt_that_alone_does_not_fit_is_still_refused(server: RunningHost) -> None:
    with server.client() as client:
        try:
            client.completions.create(model="tiny", prompt=[5] * 4096, max_tokens=1)
        except openai.BadRequestError as exc:
            assert exc.code == "context_length_exceeded"
        else:
            raise AssertionError("a prompt of the whole context was served")


def test_a_namespace_tools_function_is_called_by_its_name_and_namespace(server: RunningHost) -> None:
    # An argument that can only be one value: the random model's call is short and whole.
    schema = {
        "type": "object",
        "properties": {"q": {"enum": ["Ada"]}},
        "required": ["q"],
        "additionalProperties": False,
    }
    lookup = {"type": "function", "name": "lookup", "parameters": schema, "strict": True}
    tools: Any = [{"type": "namespace", "name": "crm", "description": "Customer records.", "tools": [lookup]}]
    with server.client() as client:
        first = client.responses.create(
            model="tiny", input="Find Ada.", tools=tools, tool_choice="required", max_output_tokens=64
        )
        (call,) = [item for item in first.output if item.type == "function_call"]
        assert (call.name, call.namespace) == ("lookup", "crm")
        following = client.responses.create(
            model="tiny",
            input=[
                {"role": "user", "content": "Find Ada."},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": "lookup",
                    "namespace": "crm",
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": "Ada Lovelace, London."},
            ],
            tools=tools,
            max_output_tokens=3,
        )
    assert following.status in ("completed", "incomplete")


def test_an_include_entry_the_sdk_does_not_define_is_refused_by_its_place(server: RunningHost) -> None:
    """Skipped, `x, temperature` would read in x-mlxhost-ignored as if temperature were skipped."""
    with server.client() as client, pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="tiny", input="Hi", max_output_tokens=2, store=False,
            include=["reasoning.encrypted_content", "x, temperature"],  # type: ignore[list-item]
        )  # fmt: skip
    assert refused.value.body["param"] == "include[1]"  # type: ignore[index]


def test_includable_is_the_sdks_list() -> None:
    import typing

    from openai.types.responses import ResponseIncludable

    from mlxhost.wire.responses import INCLUDABLE

    assert INCLUDABLE == set(typing.get_args(ResponseIncludable))
