"""What the fuzz modules share: the host they attack, the requests they build, the checks they make.

Every `test_fuzz_*` module shares a host of its own, and the `host` fixture checks after each
test that it still serves with no worker restarted: a test that breaks the host fails itself,
whatever order the tests run in, and the tests after it get a fresh host. A test module takes the
fixtures it uses by name (`host = fuzzing.host`): pytest finds fixtures among a module's names.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import RunningHost, start_host

MAX_BODY = 4 * 1024 * 1024
# Generation stays cheap: at most 8 tokens, 4 unless asked; more is a fast 400.
SERVE_ARGS = ("--max-tokens-limit", "8", "--default-max-tokens", "4", "--max-body-bytes", str(MAX_BODY))
CLIENT_TIMEOUT = 30.0  # no request may take longer: a hang fails the test instead of stalling it
FUZZ_SEED = 20261130  # fixed, so CI sends the same cases every run (edits to the test included)
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
ANTHROPIC = "/v1/messages"
COUNT_TOKENS = "/v1/messages/count_tokens"
EMBEDDINGS = "/v1/embeddings"
RERANK = "/v1/rerank"
ROUTES = (CHAT, COMPLETIONS, RESPONSES, ANTHROPIC, COUNT_TOKENS, EMBEDDINGS, RERANK)
MESSAGES = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, "max_tokens": 2, **fields}


def start_fuzz_host(tiny_model: Path, *args: str, env: dict[str, str] | None = None) -> RunningHost:
    """A host serving the tiny model, for every route (generation, embeddings, rerank: one worker),
    with the fuzz limits (`SERVE_ARGS`), and `args`."""
    config = tiny_model.parent / "fuzz-models.toml"
    config.write_text(f'[[model]]\npath = "{tiny_model}"\ntask = ["generate", "embed", "rerank"]\n')
    return start_host("--config", str(config), *SERVE_ARGS, *args, env=env)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_host(tiny_model: Path) -> Iterator[list[RunningHost]]:
    """The hosts a module's tests share (TCP, a worker process, default models): the last serves."""
    hosts = [start_fuzz_host(tiny_model)]
    yield hosts
    for running in hosts:
        running.stop()


@pytest.fixture
def host(shared_host: list[RunningHost], tiny_model: Path) -> Iterator[RunningHost]:
    """The module's shared host; once the test is done it must still serve, no worker restarted."""
    running = shared_host[-1]
    yield running
    try:
        check_still_serving(running)
    except BaseException:
        # This test broke it: the next ones get a host that works, and fail only for themselves.
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.stop()
        shared_host.append(start_fuzz_host(tiny_model))
        raise


@pytest.fixture
def http(host: RunningHost) -> Iterator[httpx.Client]:
    with host.http(timeout=CLIENT_TIMEOUT) as client:
        yield client


@pytest.fixture(scope="module")
def vocab_size(tiny_model: Path) -> int:
    return int(json.loads((tiny_model / "config.json").read_text())["vocab_size"])


# -- checks -----------------------------------------------------------------------------------


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} is not JSON (RFC 8259)")


def strict_json(data: bytes | str) -> Any:
    """Parse JSON as RFC 8259 has it: NaN and Infinity are refused."""
    return json.loads(data, parse_constant=_no_constants)


def content_type(response: Any) -> str:
    """Of an httpx or a schemathesis response (whose headers map names to lists)."""
    for name, value in response.headers.items():
        if name.lower() == "content-type":
            return str(value[0] if isinstance(value, list) else value)
    return ""


def log_tail(server: RunningHost, lines: int = 30) -> str:
    return "".join(server.log[-lines:])


def _path(response: Any) -> str:
    return str(response.request.url).split("?")[0]


def _anthropic(response: Any) -> bool:
    return "/v1/messages" in _path(response)


def check_error(
    response: Any,
    status: int | tuple[int, ...] | None = None,
    *,
    param: object = ...,
    code: str | None = None,
) -> dict[str, Any]:
    """The response is a 4xx in its route's shape: OpenAI's (with `status`, `param` and `code`
    where given), or Anthropic's on /v1/messages."""
    where = f"{response.status_code} {response.content[:500]!r}"
    if status is not None:
        allowed = (status,) if isinstance(status, int) else status
        assert response.status_code in allowed, where
    assert 400 <= response.status_code < 500, where
    assert content_type(response).startswith("application/json"), where
    body = strict_json(response.content)
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), where
    error = body["error"]
    assert isinstance(error.get("message"), str) and error["message"], where
    assert isinstance(error.get("type"), str) and error["type"], where
    if _anthropic(response):
        assert body.get("type") == "error", where
        return error  # type: ignore[no-any-return]
    assert "param" in error and (error["param"] is None or isinstance(error["param"], str)), where
    assert "code" in error and (error["code"] is None or isinstance(error["code"], str)), where
    if param is not ...:
        assert error["param"] == param, where
    if code is not None:
        assert error["code"] == code, where
    return error  # type: ignore[no-any-return]


FINISHES = ("stop", "length", "tool_calls")


def check_success(response: Any) -> None:
    """A 200 is a whole answer, or an SSE stream of strict-JSON frames that ends as its dialect
    ends one: [DONE] for chat and completions, `response.completed` (or `.incomplete`) for
    Responses, `message_stop` for Messages; never an error frame."""
    where = f"{response.status_code} {response.content[-500:]!r}"
    assert response.status_code == 200, where
    path = _path(response)
    if content_type(response).startswith("text/event-stream"):
        frames = [
            line[len("data: ") :]
            for line in response.content.decode().splitlines()
            if line.startswith("data: ")
        ]
        assert frames, where
        if path.endswith(RESPONSES):
            events = [strict_json(frame) for frame in frames]
            assert all(e["type"] != "error" for e in events), where
            assert events[-1]["type"] in ("response.completed", "response.incomplete"), where
            return
        if path.endswith(ANTHROPIC):
            events = [strict_json(frame) for frame in frames]
            assert all(e["type"] != "error" for e in events), where
            assert events[-1]["type"] == "message_stop", where
            return
        assert frames[-1] == "[DONE]", where
        for frame in frames[:-1]:
            chunk = strict_json(frame)
            assert "error" not in chunk, where
            assert chunk["object"] in ("chat.completion.chunk", "text_completion"), where
        return
    body = strict_json(response.content)
    if path.endswith(COUNT_TOKENS):
        assert isinstance(body["input_tokens"], int) and body["input_tokens"] > 0, where
    elif path.endswith(RESPONSES):
        assert body["object"] == "response" and body["status"] in ("completed", "incomplete"), where
    elif path.endswith(ANTHROPIC):
        assert body["type"] == "message", where
        assert body["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use"), where
    elif path.endswith(EMBEDDINGS):
        assert body["object"] == "list" and body["data"] and body["usage"]["prompt_tokens"] > 0, where
    elif path.endswith(RERANK):
        scores = [r["relevance_score"] for r in body["results"]]
        assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores), where
    else:
        assert body["object"] in ("chat.completion", "text_completion"), where
        assert body["choices"] and body["choices"][0]["finish_reason"] in FINISHES, where


def check_answer(response: Any) -> None:
    """Anything but a 5xx: a good answer, or an OpenAI-shaped 4xx."""
    if response.status_code >= 400:
        check_error(response)
    else:
        check_success(response)


def check_still_serving(server: RunningHost) -> None:
    health = server.health()
    assert health["status"] == "ok", health
    assert [w["restarts"] for w in health["workers"]] == [0], health["workers"]
    with server.http(timeout=CLIENT_TIMEOUT) as client:
        check_success(client.post(CHAT, json=chat()))


def post_raw(http: httpx.Client, raw: bytes, path: str = CHAT, **headers: str) -> httpx.Response:
    return http.post(path, content=raw, headers={"content-type": "application/json", **headers})
