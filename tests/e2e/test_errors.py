"""Bad requests get OpenAI-shaped errors with the right status, naming the field at fault."""

from __future__ import annotations

import json
import urllib.parse

import httpx
import openai
import pytest

from mlxhost.testing import RunningHost

MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: object) -> dict[str, object]:
    return {"messages": MESSAGES, **fields}


BAD_CHAT_BODIES = [
    # (body, param named in the error)
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),  # answers no call
    ({"messages": [{"role": "user"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "messages[0].content[0].type"),
    (chat(max_tokens=0), "max_tokens"),
    (chat(max_tokens="10"), "max_tokens"),
    (chat(max_tokens=2.5), "max_tokens"),
    (chat(max_tokens=10**10), "max_tokens"),
    (chat(max_completion_tokens=-1), "max_completion_tokens"),
    (chat(temperature=3), "temperature"),
    (chat(temperature="hot"), "temperature"),
    (chat(top_p=0), "top_p"),
    (chat(top_p=1.5), "top_p"),
    (chat(top_k=-1), "top_k"),
    (chat(min_p=2), "min_p"),
    (chat(stop=["a", "b", "c", "d", "e"]), "stop"),
    (chat(stop=7), "stop"),
    (chat(stop=[""]), "stop[0]"),
    (chat(stream="yes"), "stream"),
    (chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
    (chat(n=9), "n"),
    (chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}]), "tools[0].function.parameters"),
    (chat(tools=[{"type": "code_interpreter"}]), "tools[0].type"),
    (chat(response_format={"type": "xml"}), "response_format"),
    (chat(logit_bias={"1": "up"}), "logit_bias.1"),
    (chat(presence_penalty=5), "presence_penalty"),
    (chat(frequency_penalty=-3), "frequency_penalty"),
    (chat(repetition_penalty=0), "repetition_penalty"),
    (chat(top_logprobs=50, logprobs=True), "top_logprobs"),
    (chat(top_logprobs=2), "top_logprobs"),
    (chat(seed="abc"), "seed"),
    (chat(model=5), "model"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0]"),
    (chat(cache_salt=""), "cache_salt"),
    (chat(cache_salt="s" * 257), "cache_salt"),
    (chat(cache_salt=5), "cache_salt"),
]


@pytest.mark.parametrize(("body", "param"), BAD_CHAT_BODIES)
def test_bad_chat_request_names_the_field(server: RunningHost, body: dict[str, object], param: str) -> None:
    with server.http() as http:
        response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert param.split("[")[0].split(".")[0] in error["message"]


BAD_COMPLETION_BODIES = [
    ({"prompt": ""}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, -5]}, "prompt[1]"),
    ({"prompt": [1, 10**6]}, "prompt[1]"),
    ({"prompt": ["a", "b"]}, "prompt[0]"),
    ({"prompt": "hi", "logprobs": 99}, "logprobs"),
    ({"prompt": "hi", "echo": True}, "echo"),
    ({"prompt": "hi", "suffix": "x"}, "suffix"),
    ({"prompt": "word " * 5000}, "prompt"),
]


@pytest.mark.parametrize(("body", "param"), BAD_COMPLETION_BODIES)
def test_bad_completion_request_names_the_field(
    server: RunningHost, body: dict[str, object], param: str
) -> None:
    with server.http() as http:
        response = http.post("/v1/completions", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_context_overflow_says_so(server: RunningHost) -> None:
    with server.http() as http:
        response = http.post("/v1/completions", json={"prompt": "word " * 5000})
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded" and "4096" in error["message"]


@pytest.mark.parametrize(
    "raw",
    [b"{", b"not json", b"[1, 2]", b'"text"', b"null", b'{"messages": [}', "{\"x\": \"\udcff\"}".encode("utf-8", "surrogatepass")],
)
def test_malformed_json_is_a_400(server: RunningHost, raw: bytes) -> None:
    with server.http() as http:
        response = http.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"


def test_body_over_the_limit_is_a_413(server: RunningHost) -> None:
    body = json.dumps(chat(user="x" * (5 * 1024 * 1024)))
    with server.http() as http:
        response = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_unknown_route_is_a_404_and_wrong_method_a_405(server: RunningHost) -> None:
    with server.http() as http:
        missing = http.get("/v1/nothing-here")
        wrong = http.get("/v1/chat/completions")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    assert wrong.status_code == 405 and "GET" in wrong.json()["error"]["message"]


def test_the_openai_client_raises_bad_request_with_the_param(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=9)  # type: ignore[arg-type]
    assert caught.value.param == "temperature"  # type: ignore[attr-defined]


def test_errors_keep_the_server_healthy(server: RunningHost) -> None:
    with server.http() as http:
        for _ in range(3):
            http.post("/v1/chat/completions", content=b"{")
        reply = http.post("/v1/chat/completions", json=chat(max_tokens=3))
    assert reply.status_code == 200
    assert httpx.codes.is_success(reply.status_code)


JSON = {"content-type": "application/json"}
HUGE = 1 << 20  # a 1 MB field name: over the size where the worker sizes a body up before pydantic


def controls(text: str) -> list[str]:
    return [c for c in text if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F]


@pytest.mark.parametrize("size", [HUGE, 30_000])
@pytest.mark.parametrize("where", ["body", "message"])
def test_an_unknown_field_name_is_quoted_short(server: RunningHost, where: str, size: int) -> None:
    name = "k" * size
    body = chat(**{name: 1}) if where == "body" else {"messages": [{"role": "user", "content": "x", name: 1}]}
    with server.http() as http:
        response = http.post("/v1/chat/completions", content=json.dumps(body), headers=JSON)
    assert response.status_code == 400
    assert len(response.content) < 1024  # the name was 1 MB: before, the answer was 2 MB
    error = response.json()["error"]
    assert error["code"] == "unsupported_parameter"
    assert error["param"].startswith("kkkk" if where == "body" else "messages[0].kkkk")
    assert f"{size} characters" in error["message"]


@pytest.mark.parametrize("size", [HUGE, 16])
@pytest.mark.parametrize("where", ["body", "message"])
def test_control_characters_in_a_field_name_come_back_escaped(server: RunningHost, where: str, size: int) -> None:
    name = "\x1b]0;owned\x07\x1b[2J\x9b" + "x" * size
    body = chat(**{name: 1}) if where == "body" else {"messages": [{"role": "user", "content": "x", name: 1}]}
    with server.http() as http:
        response = http.post("/v1/chat/completions", content=json.dumps(body), headers=JSON)
    assert response.status_code == 400
    assert not [b for b in response.content if b < 0x20]
    error = response.json()["error"]
    assert not controls(error["message"]) and not controls(error["param"])
    assert "\\x1b]0;owned\\x07" in error["param"]


def test_a_model_name_in_the_path_is_quoted_short_and_inert(server: RunningHost) -> None:
    name = "\x1b[2J" + "m" * 10_000
    transport = httpx.HTTPTransport(uds=server.worker()["socket"])
    with httpx.Client(base_url="http://worker", transport=transport, timeout=30) as worker:
        response = worker.get("/v1/models/" + urllib.parse.quote(name))
    assert response.status_code == 404 and len(response.content) < 1024
    error = response.json()["error"]
    assert error["code"] == "model_not_found" and not controls(error["message"])
    assert "\\x1b[2Jmmm" in error["message"]


MESSAGE = {"role": "user", "content": "x"}
# Bodies of megabytes, sized up before pydantic builds an object for each item in them.
LARGE_BAD_BODIES = [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": ""}] * 20_000}, "messages"),
    ("/v1/chat/completions", {"messages": [MESSAGE], "stop": ["a"] * 500_000}, "stop"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}] * 100_000}]},
        "messages[0].content",
    ),
    ("/v1/chat/completions", {"messages": [MESSAGE], "junk": [[]] * 1_000_000}, "junk"),
    ("/v1/chat/completions", {"messages": [MESSAGE], "model": [[[]]] * 500_000}, "model"),
    ("/v1/chat/completions", {"messages": [{"role": [[]] * 500_000, "content": ""}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": [{**MESSAGE, "x": [{}] * 500_000}]}, "messages[0].x"),
    ("/v1/completions", {"prompt": [1] * 1_000_000}, "prompt"),
    ("/v1/completions", {"prompt": "x", "stream_options": {"x": [[]] * 500_000}}, "stream_options.x"),
]


@pytest.mark.parametrize(("route", "body", "param"), LARGE_BAD_BODIES)
def test_a_large_bad_body_names_the_field(server: RunningHost, route: str, body: dict[str, object], param: str) -> None:
    with server.http() as http:
        response = http.post(route, content=json.dumps(body), headers=JSON)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("route", "body", "param", "said"),
    [
        # Each message is at least one token, so 5,000 cannot fit a 4,096-token context.
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": ""}] * 5000}, "messages", "5000 messages"),
        # No token of the tiny model's vocabulary spans more than 25 characters.
        ("/v1/completions", {"prompt": "x" * 110_000}, "prompt", "110000 characters"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 110_000}]}, "messages", "110000 characters"),
        ("/v1/completions", {"prompt": [1] * 5000}, "prompt", "5000 token ids"),
    ],
)
def test_a_prompt_that_cannot_fit_is_refused_before_it_is_encoded(
    server: RunningHost, route: str, body: dict[str, object], param: str, said: str
) -> None:
    with server.http() as http:
        response = http.post(route, content=json.dumps(body), headers=JSON)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["code"] == "context_length_exceeded"
    assert said in error["message"] and "4096" in error["message"]
