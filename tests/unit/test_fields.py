"""The field policy (mlxhost.wire.fields): implemented, skipped and named, or refused by name.

The two fixtures are the shapes of the first request Claude Code 2.1.197 and Codex 0.171.0 send
(captured from the real CLIs, with every text replaced by a placeholder and one tool of each
type kept): a newer CLI that adds a field shows up here first, as a 400 that names it.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlxhost.wire.anthropic import MessagesRequest
from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.fields import Skipped, known_field, known_type
from mlxhost.wire.openai import ChatCompletionRequest
from mlxhost.wire.parsing import SKIP_PASSES, parse_body
from mlxhost.wire.responses import ResponsesRequest
from mlxhost.worker.api.messages import messages_conversation
from mlxhost.worker.api.responses import _refuse_unsupported, responses_conversation

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CLAUDE_CODE = json.loads((FIXTURES / "claude_code_2.1.197_messages.json").read_text())
CODEX = json.loads((FIXTURES / "codex_0.171.0_responses.json").read_text())


def parse(model: Any, body: dict[str, Any]) -> tuple[Any, Skipped]:
    skipped = Skipped()
    return parse_body(model, json.dumps(body).encode(), None, skipped), skipped


def test_the_table_is_the_installed_sdks_own() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sdk_fields.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = json.loads((ROOT / "mlxhost" / "wire" / "sdk_fields.json").read_text())
    assert table["sdks"] == {name: importlib.metadata.version(name) for name in ("openai", "anthropic")}


def test_the_table_knows_fields_by_where_they_are() -> None:
    assert known_field("messages", "", "context_management")
    assert known_field("messages", "content", "cache_control")
    assert known_field("messages", "system", "cache_control")
    assert not known_field("messages", "", "cache_controls")
    assert not known_field("chat", "", "temprature")
    assert known_type("responses", "tools", "web_search")
    assert not known_type("responses", "tools", "teleport")


def test_claude_codes_first_request_is_served_and_what_is_skipped_is_named() -> None:
    body, skipped = parse(MessagesRequest, CLAUDE_CODE)
    conversation = messages_conversation(body, skipped)
    # The mid-conversation system turn stays where it was sent (the template may merge it).
    assert [m["role"] for m in conversation.messages] == ["system", "user", "system"]
    assert conversation.thinking is True  # adaptive: a model that can think may
    assert conversation.template_args == {"reasoning_effort": "high"}
    assert body.metadata is not None and body.metadata.user_id
    assert sorted(skipped.names) == ["messages.content.cache_control", "system.cache_control"]


def test_codexs_first_request_is_served_and_what_is_skipped_is_named() -> None:
    body, skipped = parse(ResponsesRequest, CODEX)
    _refuse_unsupported(body, skipped)
    assert body.client_metadata and "session_id" in body.client_metadata
    assert sorted(skipped.names) == [
        "include.reasoning.encrypted_content",
        "prompt_cache_key",
        "tools.web_search",
    ]
    conversation, _ = responses_conversation(body, [])
    # A namespace's functions are offered by qualified names; the hosted web search is not offered.
    names = [tool.name for tool in conversation.tools]
    assert "exec_command" in names and "multi_agent_v1.close_agent" in names
    assert not any("web_search" in name for name in names)


@pytest.mark.parametrize(
    ("model", "shape", "where", "param"),
    [
        (MessagesRequest, CLAUDE_CODE, (), "teleport_mode"),
        (MessagesRequest, CLAUDE_CODE, ("messages", 0, "content", 1), "messages[0].content[1].teleport_mode"),
        (ResponsesRequest, CODEX, (), "teleport_mode"),
        (ResponsesRequest, CODEX, ("input", 2), "input[2].teleport_mode"),
    ],
)
def test_a_field_no_sdk_knows_is_refused_by_name(
    model: Any, shape: dict[str, Any], where: tuple[Any, ...], param: str
) -> None:
    body = copy.deepcopy(shape)
    node: Any = body
    for key in where:
        node = node[key]
    node["teleport_mode"] = True
    with pytest.raises(InvalidRequest) as caught:
        parse(model, body)
    assert caught.value.param == param
    assert caught.value.code == "unsupported_parameter"
    assert "teleport_mode" in caught.value.message


def test_a_typo_beside_skipped_fields_is_still_refused() -> None:
    body = {**CLAUDE_CODE, "temprature": 0.5}
    with pytest.raises(InvalidRequest) as caught:
        parse(MessagesRequest, body)
    assert caught.value.param == "temprature"


def test_skipped_fields_in_every_message_are_all_taken_out() -> None:
    # More places than passes: the last pass takes the name out wherever it is.
    turns = []
    for i in range(SKIP_PASSES * 2):
        role = "user" if i % 2 == 0 else "assistant"
        turns.append(
            {
                "role": role,
                "content": [{"type": "text", "text": f"turn {i}", "cache_control": {"type": "ephemeral"}}],
            }
        )
    turns.append({"role": "user", "content": "last"})
    body, skipped = parse(
        MessagesRequest, {"model": "m", "max_tokens": 5, "messages": turns, "speed": "fast"}
    )
    assert len(body.messages) == len(turns)
    assert sorted(skipped.names) == ["messages.content.cache_control", "speed"]


def test_a_large_body_is_checked_by_shape_with_the_same_policy() -> None:
    big = [{"role": "user", "content": "x" * 100} for _ in range(1000)]
    _, skipped = parse(ChatCompletionRequest, {"messages": big, "store": True, "verbosity": "low"})
    assert skipped.names == ["store", "verbosity"]
    with pytest.raises(InvalidRequest) as caught:
        parse(ChatCompletionRequest, {"messages": big, "stor": True})
    assert caught.value.param == "stor"


def test_hosted_tools_are_skipped_and_unknown_tool_types_refused() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    tools = [
        {"type": "web_search_20250305", "name": "web_search"},
        {"name": "f", "input_schema": {"type": "object"}},
    ]
    parsed, skipped = parse(MessagesRequest, {**body, "tools": tools})
    conversation = messages_conversation(parsed, skipped)
    assert [t.name for t in conversation.tools] == ["f"]
    assert skipped.names == ["tools.web_search_20250305"]
    parsed, skipped = parse(MessagesRequest, {**body, "tools": [{"type": "teleporter", "name": "t"}]})
    with pytest.raises(InvalidRequest) as caught:
        messages_conversation(parsed, skipped)
    assert caught.value.param == "tools[0].type"


def test_the_header_names_at_most_a_bounded_number_of_fields_in_ascii() -> None:
    skipped = Skipped()
    for i in range(100):
        skipped.add(f"include.entry{i}")
    skipped.add("include.caf\u00e9")
    assert len(skipped.names) == 32
    assert skipped.header().isascii()
    assert Skipped().headers() == {}


def test_the_readmes_table_names_the_fields_each_dialect_skips() -> None:
    from mlxhost.wire.fields import REFUSED
    from mlxhost.wire.openai import CompletionRequest

    table = json.loads((ROOT / "mlxhost" / "wire" / "sdk_fields.json").read_text())["dialects"]
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("| ") and line.count(" | ") == 3
    }
    models = {"Chat Completions": ("chat", ChatCompletionRequest), "Completions": ("completions", CompletionRequest),
              "Responses": ("responses", ResponsesRequest), "Messages": ("messages", MessagesRequest)}  # fmt: skip
    for row, (dialect, model) in models.items():
        skipped = (
            set(table[dialect]["fields"][""]) - set(model.model_fields) - REFUSED.get(dialect, frozenset())
        )
        shown = set(re.findall(r"`([a-z_]+)`", rows[row][2]))
        assert shown == skipped, row
        refused = set(re.findall(r"`([a-z_]+)`", rows[row][3]))
        assert refused == set(REFUSED.get(dialect, ())), row


def test_a_body_with_skipped_fields_everywhere_is_validated_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validate = MessagesRequest.model_validate_json
    calls: list[int] = []

    def counting(data: Any) -> Any:
        calls.append(len(data))
        return validate(data)

    monkeypatch.setattr(MessagesRequest, "model_validate_json", counting)
    block = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": [block]} for i in range(2001)]
    body, skipped = parse(MessagesRequest, {"model": "m", "max_tokens": 5, "messages": turns})
    assert len(body.messages) == 2001 and skipped.names == ["messages.content.cache_control"]
    assert len(calls) <= 1 + SKIP_PASSES
