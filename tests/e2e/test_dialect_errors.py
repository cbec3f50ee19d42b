"""The errors the parent answers itself, worded in the dialect of the route they came to.

Anthropic's SDK on /v1/messages and OpenAI's on /v1/responses raise their own typed errors, with
the message readable, for an unknown model, a wrong key, a full queue and an operator's cancel:
all answered before any worker sees the request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic.types import MessageParam

from mlxhost.testing import RunningHost, start_host, wait_until

KEY = "dialect-test-key"
MESSAGE: list[MessageParam] = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def keyed(tiny_model: Path) -> Iterator[RunningHost]:
    """A host with an API key, 404 for an unknown model, room for one running session and one waiting."""
    server = start_host(
        "--model", str(tiny_model), "--strict-models", "--max-active", "1", "--max-queued", "1",
        env={"MLXHOST_API_KEY": KEY},
    )  # fmt: skip
    yield server
    assert server.stop() == 0


def claude(server: RunningHost, api_key: str = KEY) -> anthropic.Anthropic:
    assert server.url is not None
    return anthropic.Anthropic(base_url=server.url, api_key=api_key, max_retries=0)


def gpt(server: RunningHost) -> openai.OpenAI:
    assert server.url is not None
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def post(server: RunningHost, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    with httpx.Client(base_url=server.url or "", timeout=30) as http:
        return http.post(path, json=body, headers={"x-api-key": KEY, **headers})


def anthropic_error(response: httpx.Response) -> dict[str, Any]:
    """The error of an Anthropic-shaped body: {"type": "error", "error": {type, message, details}}."""
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert {"type", "message"} <= set(body["error"]), body
    return body["error"]  # type: ignore[no-any-return]


def openai_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]  # type: ignore[no-any-return]


# -- an unknown model --------------------------------------------------------------------------


def test_an_unknown_model_on_messages_is_anthropics_404(keyed: RunningHost) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        claude(keyed).messages.create(model="no-such-model", max_tokens=5, messages=MESSAGE)
    assert raised.value.type == "not_found_error" and raised.value.error_code == "model_not_found"
    assert raised.value.api_message is not None and "no-such-model" in raised.value.api_message
    error = anthropic_error(post(keyed, "/v1/messages", {"model": "no-such-model", "max_tokens": 5}))
    assert error["type"] == "not_found_error" and "no-such-model" in error["message"]


def test_an_unknown_model_when_counting_tokens_is_anthropics_404(keyed: RunningHost) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        claude(keyed).messages.count_tokens(model="no-such-model", messages=MESSAGE)
    assert raised.value.type == "not_found_error" and raised.value.error_code == "model_not_found"
    response = post(keyed, "/v1/messages/count_tokens", {"model": "no-such-model", "messages": MESSAGE})
    assert response.status_code == 404 and anthropic_error(response)["type"] == "not_found_error"


def test_an_unknown_model_on_responses_is_openais_404(keyed: RunningHost) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        gpt(keyed).responses.create(model="no-such-model", input="Hello")
    assert raised.value.code == "model_not_found" and "no-such-model" in raised.value.message
    error = openai_error(post(keyed, "/v1/responses", {"model": "no-such-model", "input": "Hello"}))
    assert error["type"] == "not_found_error" and error["param"] == "model"


# -- credentials -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_wrong_key_on_messages_is_anthropics_401(keyed: RunningHost, path: str) -> None:
    messages = claude(keyed, api_key="wrong").messages
    with pytest.raises(anthropic.AuthenticationError) as raised:
        if path.endswith("count_tokens"):
            messages.count_tokens(model="tiny", messages=MESSAGE)
        else:
            messages.create(model="tiny", max_tokens=5, messages=MESSAGE)
    assert raised.value.api_message == "the API key is not valid for this server"
    response = post(
        keyed, path, {"model": "tiny", "max_tokens": 5, "messages": MESSAGE}, **{"x-api-key": "wrong"}
    )
    assert response.status_code == 401
    error = anthropic_error(response)
    assert error["type"] == "authentication_error" and error["details"] == {"error_code": "invalid_api_key"}


def test_a_wrong_key_on_responses_is_openais_401(keyed: RunningHost) -> None:
    response = post(keyed, "/v1/responses", {"model": "tiny", "input": "Hello"}, **{"x-api-key": "wrong"})
    assert response.status_code == 401 and openai_error(response)["code"] == "invalid_api_key"


# -- a full model ------------------------------------------------------------------------------


class Call:
    """A blocking call run in a thread: its result or its error, once joined."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:
            self.error = exc

    def join(self) -> Call:
        self._thread.join(60)
        assert not self._thread.is_alive()
        return self


def admission(server: RunningHost) -> dict[str, Any]:
    stats = server.health()["admission"]
    return next(iter(stats.values())) if stats else {"active": 0, "queued": 0}


def live_sessions(server: RunningHost) -> list[dict[str, Any]]:
    with server.http() as http:  # the admin token
        return http.get("/admin/sessions").json()["live"]  # type: ignore[no-any-return]


def cancel(server: RunningHost, session: str) -> int:
    with server.http() as http:
        return http.post(f"/admin/sessions/{session}/cancel").status_code


def long_stream(server: RunningHost) -> None:
    body = {"messages": MESSAGE, "max_tokens": 4000, "temperature": 0, "stream": True}
    with httpx.Client(base_url=server.url or "", timeout=120) as http:
        with http.stream("POST", "/v1/chat/completions", json=body, headers={"x-api-key": KEY}) as response:
            for _ in response.iter_lines():
                pass


def test_a_full_model_refuses_and_cancels_in_the_routes_dialect(keyed: RunningHost) -> None:
    running = Call(lambda: long_stream(keyed))
    wait_until(lambda: admission(keyed)["active"] == 1)
    queued = Call(lambda: claude(keyed).messages.create(model="tiny", max_tokens=5, messages=MESSAGE))
    wait_until(lambda: admission(keyed)["queued"] == 1)
    try:
        # No room to run or to wait: 429, as each SDK reads it.
        with pytest.raises(anthropic.RateLimitError) as limited:
            claude(keyed).messages.create(model="tiny", max_tokens=5, messages=MESSAGE)
        assert limited.value.type == "rate_limit_error" and limited.value.error_code == "queue_full"
        assert limited.value.api_message is not None and "at capacity" in limited.value.api_message
        assert limited.value.response.headers["retry-after"]
        with pytest.raises(openai.RateLimitError) as refused:
            gpt(keyed).responses.create(model="tiny", input="Hello")
        assert refused.value.code == "queue_full"
        response = post(keyed, "/v1/messages", {"model": "tiny", "max_tokens": 5, "messages": MESSAGE})
        assert response.status_code == 429 and anthropic_error(response)["type"] == "rate_limit_error"
        # Counting tokens takes no place in the queue: the worker answers it, however full.
        counted = post(keyed, "/v1/messages/count_tokens", {"model": "tiny", "messages": MESSAGE})
        assert counted.status_code != 429, counted.text
        # A waiting session an operator cancels: the parent answers it, as Anthropic would.
        waiting = wait_until(lambda: [s["id"] for s in live_sessions(keyed) if s["state"] == "queued"])
        assert cancel(keyed, waiting[0]) == 202
        cancelled = queued.join().error
        assert isinstance(cancelled, anthropic.APIStatusError), cancelled
        assert cancelled.status_code == 503 and cancelled.type == "overloaded_error"
        assert (
            cancelled.error_code == "cancelled"
            and cancelled.api_message == "an operator cancelled this request"
        )
    finally:
        for session in live_sessions(keyed):
            cancel(keyed, session["id"])  # 404 for one that closed meanwhile
        running.join()
        queued.join()
    assert running.error is None
