"""Schemas no output can satisfy are refused before generation, in every dialect, naming the field;
recursive schemas that do have finite instances still constrain the output.

Before, `{"$ref": "#"}`, a `$ref` loop and an object that requires itself answered 200 with `''`
or an endless `{"x": {"x": ...` cut off, and a forced tool call with such parameters made no call.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import pytest

from mlxhost.testing import RunningHost

ASK = [{"role": "user", "content": "Write it."}]

SELF: dict[str, Any] = {"$ref": "#"}
LOOP: dict[str, Any] = {
    "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
    "$ref": "#/$defs/a",
}
REQUIRES_ITSELF: dict[str, Any] = {
    "type": "object",
    "properties": {"child": {"$ref": "#"}},
    "required": ["child"],
}
IMPOSSIBLE = [SELF, LOOP, REQUIRES_ITSELF]
IDS = ["self-reference", "reference-loop", "requires-itself"]

# Recursive, but with finite instances: an empty list of children, a missing `next`.
TREE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 4},
        "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2},
    },
    "required": ["name", "children"],
    "additionalProperties": False,
}
LINKED: dict[str, Any] = {
    "type": "object",
    "properties": {"value": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
    "required": ["value"],
    "additionalProperties": False,
    "$defs": {"node": {"$ref": "#"}},
}


def post(server: RunningHost, path: str, body: dict[str, Any]) -> Any:
    with server.http(timeout=120) as http:
        return http.post(path, json=body)


def chat_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


def function(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def refused(response: Any, param: str) -> str:
    """The message of an OpenAI-shaped 400 that names `param`."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert error["message"].startswith(f"{param}: "), error
    assert "no JSON value" in error["message"], error
    return str(error["message"])


@pytest.mark.parametrize("schema", IMPOSSIBLE, ids=IDS)
def test_chat_response_format(server: RunningHost, schema: dict[str, Any]) -> None:
    body = {"model": "tiny", "messages": ASK, "max_tokens": 16, "response_format": chat_format(schema)}
    refused(post(server, "/v1/chat/completions", body), "response_format.json_schema.schema")


@pytest.mark.parametrize("schema", IMPOSSIBLE, ids=IDS)
def test_chat_named_tool(server: RunningHost, schema: dict[str, Any]) -> None:
    body = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 16,
        "tools": [function("fine", {"type": "object"}), function("bad", schema)],
        "tool_choice": {"type": "function", "function": {"name": "bad"}},
    }
    message = refused(post(server, "/v1/chat/completions", body), "tools[1].function.parameters")
    assert "'bad'" in message


def test_chat_required_tool(server: RunningHost) -> None:
    body = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 16,
        "tools": [function("bad", REQUIRES_ITSELF)],
        "tool_choice": "required",
    }
    refused(post(server, "/v1/chat/completions", body), "tools[0].function.parameters")


@pytest.mark.parametrize("choice", ["auto", "none", None])
def test_a_tool_no_arguments_satisfy_is_refused_unforced_too(server: RunningHost, choice: str | None) -> None:
    body = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 4,
        "tools": [function("fine", {"type": "object"}), function("bad", REQUIRES_ITSELF)],
        **({"tool_choice": choice} if choice else {}),
    }
    refused(post(server, "/v1/chat/completions", body), "tools[1].function.parameters")


def test_chat_required_tool_among_good_ones(server: RunningHost) -> None:
    # The model could call the good tool, but a forced call to one no arguments satisfy is the
    # client's mistake: said before the model runs, not left to chance.
    body = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 16,
        "tools": [function("fine", {"type": "object"}), function("bad", LOOP)],
        "tool_choice": "required",
    }
    refused(post(server, "/v1/chat/completions", body), "tools[1].function.parameters")


@pytest.mark.parametrize("schema", IMPOSSIBLE, ids=IDS)
def test_responses_text_format(server: RunningHost, schema: dict[str, Any]) -> None:
    body = {
        "model": "tiny",
        "input": "Write it.",
        "max_output_tokens": 16,
        "text": {"format": {"type": "json_schema", "name": "out", "schema": schema}},
    }
    refused(post(server, "/v1/responses", body), "text.format.schema")


def test_responses_named_tool(server: RunningHost) -> None:
    body = {
        "model": "tiny",
        "input": "Write it.",
        "max_output_tokens": 16,
        "tools": [
            {"type": "function", "name": "fine", "parameters": {"type": "object"}},
            {"type": "function", "name": "bad", "parameters": LOOP},
        ],
        "tool_choice": {"type": "function", "name": "bad"},
    }
    refused(post(server, "/v1/responses", body), "tools[1].parameters")


def test_responses_namespaced_tool(server: RunningHost) -> None:
    inner = [
        {"type": "function", "name": "fine", "parameters": {"type": "object"}},
        {"type": "function", "name": "bad", "parameters": SELF},
    ]
    body = {
        "model": "tiny",
        "input": "Write it.",
        "max_output_tokens": 16,
        "tools": [{"type": "namespace", "name": "agents", "tools": inner}],
        "tool_choice": "required",
    }
    refused(post(server, "/v1/responses", body), "tools[0].tools[1].parameters")


def anthropic_refused(response: Any, param: str) -> None:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error", body
    assert body["error"]["type"] == "invalid_request_error", body
    assert body["error"]["message"].startswith(f"{param}: "), body
    assert "no JSON value" in body["error"]["message"], body


def test_messages_tool_choice_any(server: RunningHost) -> None:
    body = {
        "model": "tiny",
        "max_tokens": 16,
        "messages": ASK,
        "tools": [{"name": "bad", "input_schema": REQUIRES_ITSELF}],
        "tool_choice": {"type": "any"},
    }
    anthropic_refused(post(server, "/v1/messages", body), "tools[0].input_schema")


@pytest.mark.parametrize("schema", IMPOSSIBLE, ids=IDS)
def test_messages_output_format(server: RunningHost, schema: dict[str, Any]) -> None:
    body = {
        "model": "tiny",
        "max_tokens": 16,
        "messages": ASK,
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }
    anthropic_refused(post(server, "/v1/messages", body), "output_config.format.schema")


@pytest.mark.parametrize("schema", [TREE, LINKED], ids=["tree", "linked-list"])
def test_recursive_schemas_with_finite_instances_still_constrain(
    server: RunningHost, schema: dict[str, Any]
) -> None:
    body = {
        "model": "tiny",
        "messages": ASK,
        "max_tokens": 300,
        "temperature": 1.0,
        "seed": 5,
        "response_format": chat_format(schema),
    }
    response = post(server, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        assert jsonschema_rs.validator_for(schema).is_valid(json.loads(choice["message"]["content"]))
    else:  # cut off by max_tokens: a prefix of a valid value, but it must have started one
        assert choice["finish_reason"] == "length"
        assert choice["message"]["content"].startswith("{")


def test_a_refused_schema_names_each_requests_own_field(server: RunningHost) -> None:
    # A named choice compiles the named tool alone: the same grammar, cached with its refusal,
    # wherever the tool stands in the request, and each request hears its own field.
    for index in (0, 2):
        tools = [function(f"ok{i}", {"type": "object"}) for i in range(2)]
        tools.insert(index, function("bad", LOOP))
        body = {
            "model": "tiny",
            "messages": ASK,
            "max_tokens": 16,
            "tools": tools,
            "tool_choice": {"type": "function", "function": {"name": "bad"}},
        }
        refused(post(server, "/v1/chat/completions", body), f"tools[{index}].function.parameters")
