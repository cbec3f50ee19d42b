"""The errors the parent answers itself, worded in the dialect of the route they came to.

Anthropic's SDK on /v1/messages and OpenAI's on /v1/responses raise their own typed errors, with
the message readable, for an unknown model, a wrong key, a full queue and an operator's cancel:
all answered before any worker sees the request. The parent is the real app, in-process (httpx's
`ASGITransport` as the SDKs' `http_client`), over fake workers (`tests.parent_fake`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anthropic
import anyio
import anyio.abc
import httpx
import openai
import pytest
from anthropic.types import MessageParam
from starlette.applications import Starlette

from mlxhost.config import Settings
from mlxhost.testing import ADMIN_TOKEN
from tests.parent_fake import base_url, client, eventually, parent, sdk_client

KEY = "dialect-test-key"
MESSAGE: list[MessageParam] = [{"role": "user", "content": "Hello"}]
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # one event loop for the module: its tests share one parent


@pytest.fixture(scope="module")
async def keyed() -> AsyncIterator[Starlette]:
    """A parent with an API key, 404 for an unknown model, room for one running session and one waiting."""
    async with parent(Settings(api_key=KEY, strict_models=True, max_active=1, max_queued=1)) as app:
        yield app


def claude(app: Starlette, api_key: str = KEY) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=base_url(app), api_key=api_key, max_retries=0, http_client=sdk_client(app)
    )


def gpt(app: Starlette) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{base_url(app)}/v1", api_key=KEY, max_retries=0, http_client=sdk_client(app)
    )


async def post(app: Starlette, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    async with client(app, timeout=30) as http:
        return await http.post(path, json=body, headers={"x-api-key": KEY, **headers})


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


async def test_an_unknown_model_on_messages_is_anthropics_404(keyed: Starlette) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        await claude(keyed).messages.create(model="no-such-model", max_tokens=5, messages=MESSAGE)
    assert raised.value.type == "not_found_error" and raised.value.error_code == "model_not_found"
    assert raised.value.api_message is not None and "no-such-model" in raised.value.api_message
    error = anthropic_error(await post(keyed, "/v1/messages", {"model": "no-such-model", "max_tokens": 5}))
    assert error["type"] == "not_found_error" and "no-such-model" in error["message"]


async def test_an_unknown_model_when_counting_tokens_is_anthropics_404(keyed: Starlette) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        await claude(keyed).messages.count_tokens(model="no-such-model", messages=MESSAGE)
    assert raised.value.type == "not_found_error" and raised.value.error_code == "model_not_found"
    response = await post(keyed, "/v1/messages/count_tokens", {"model": "no-such-model", "messages": MESSAGE})
    assert response.status_code == 404 and anthropic_error(response)["type"] == "not_found_error"


async def test_an_unknown_model_on_responses_is_openais_404(keyed: Starlette) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        await gpt(keyed).responses.create(model="no-such-model", input="Hello")
    assert raised.value.code == "model_not_found" and "no-such-model" in raised.value.message
    error = openai_error(await post(keyed, "/v1/responses", {"model": "no-such-model", "input": "Hello"}))
    assert error["type"] == "not_found_error" and error["param"] == "model"


# -- credentials -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_a_wrong_key_on_messages_is_anthropics_401(keyed: Starlette, path: str) -> None:
    messages = claude(keyed, api_key="wrong").messages
    with pytest.raises(anthropic.AuthenticationError) as raised:
        if path.endswith("count_tokens"):
            await messages.count_tokens(model="tiny", messages=MESSAGE)
        else:
            await messages.create(model="tiny", max_tokens=5, messages=MESSAGE)
    assert raised.value.api_message == "the API key is not valid for this server"
    response = await post(
        keyed, path, {"model": "tiny", "max_tokens": 5, "messages": MESSAGE}, **{"x-api-key": "wrong"}
    )
    assert response.status_code == 401
    error = anthropic_error(response)
    assert error["type"] == "authentication_error" and error["details"] == {"error_code": "invalid_api_key"}


async def test_a_wrong_key_on_responses_is_openais_401(keyed: Starlette) -> None:
    body = {"model": "tiny", "input": "Hello"}
    response = await post(keyed, "/v1/responses", body, **{"x-api-key": "wrong"})
    assert response.status_code == 401 and openai_error(response)["code"] == "invalid_api_key"


# -- a full model ------------------------------------------------------------------------------


class Call:
    """A call run as a task: its result or its error, once joined."""

    def __init__(self, tg: anyio.abc.TaskGroup, call: Callable[[], Awaitable[object]]) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._call = call
        self._done = anyio.Event()
        tg.start_soon(self._run)

    async def _run(self) -> None:
        try:
            self.result = await self._call()
        except Exception as exc:
            self.error = exc
        finally:
            self._done.set()

    async def join(self) -> Call:
        with anyio.fail_after(60):
            await self._done.wait()
        return self


async def admission(app: Starlette) -> dict[str, Any]:
    async with client(app, headers=ADMIN) as http:  # the admin token
        stats = (await http.get("/health")).json()["admission"]
    return next(iter(stats.values())) if stats else {"active": 0, "queued": 0}


async def live_sessions(app: Starlette) -> list[dict[str, Any]]:
    async with client(app, headers=ADMIN) as http:
        return (await http.get("/admin/sessions")).json()["live"]  # type: ignore[no-any-return]


async def cancel(app: Starlette, session: str) -> int:
    async with client(app, headers=ADMIN) as http:
        return (await http.post(f"/admin/sessions/{session}/cancel")).status_code


async def long_stream(app: Starlette) -> None:
    body = {"messages": MESSAGE, "max_tokens": 4000, "temperature": 0, "stream": True}
    async with client(app, timeout=120) as http:
        headers = {"x-api-key": KEY}
        async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            async for _ in response.aiter_lines():
                pass


async def test_a_full_model_refuses_and_cancels_in_the_routes_dialect(keyed: Starlette) -> None:
    async def active() -> bool:
        return (await admission(keyed))["active"] == 1

    async def queued_now() -> bool:
        return (await admission(keyed))["queued"] == 1

    async def waiting_ids() -> list[str]:
        return [s["id"] for s in await live_sessions(keyed) if s["state"] == "queued"]

    async with anyio.create_task_group() as tg:
        running = Call(tg, lambda: long_stream(keyed))
        await eventually(active)
        queued = Call(tg, lambda: claude(keyed).messages.create(model="tiny", max_tokens=5, messages=MESSAGE))
        await eventually(queued_now)
        try:
            # No room to run or to wait: 429, as each SDK reads it.
            with pytest.raises(anthropic.RateLimitError) as limited:
                await claude(keyed).messages.create(model="tiny", max_tokens=5, messages=MESSAGE)
            assert limited.value.type == "rate_limit_error" and limited.value.error_code == "queue_full"
            assert limited.value.api_message is not None and "at capacity" in limited.value.api_message
            assert limited.value.response.headers["retry-after"]
            with pytest.raises(openai.RateLimitError) as refused:
                await gpt(keyed).responses.create(model="tiny", input="Hello")
            assert refused.value.code == "queue_full"
            body = {"model": "tiny", "max_tokens": 5, "messages": MESSAGE}
            response = await post(keyed, "/v1/messages", body)
            assert response.status_code == 429 and anthropic_error(response)["type"] == "rate_limit_error"
            # Counting tokens takes no place in the queue: the worker answers it, however full.
            counted = await post(keyed, "/v1/messages/count_tokens", {"model": "tiny", "messages": MESSAGE})
            assert counted.status_code != 429, counted.text
            # A waiting session an operator cancels: the parent answers it, as Anthropic would.
            waiting = await eventually(waiting_ids)
            assert await cancel(keyed, waiting[0]) == 202
            cancelled = (await queued.join()).error
            assert isinstance(cancelled, anthropic.APIStatusError), cancelled
            assert cancelled.status_code == 503 and cancelled.type == "overloaded_error"
            assert (
                cancelled.error_code == "cancelled"
                and cancelled.api_message == "an operator cancelled this request"
            )
        finally:
            for session in await live_sessions(keyed):
                await cancel(keyed, session["id"])  # 404 for one that closed meanwhile
            await running.join()
            await queued.join()
    assert running.error is None
