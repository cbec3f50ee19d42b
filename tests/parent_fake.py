"""The parent without processes: its real app over a pool whose workers answer from memory.

`parent(settings)` builds the app as `mlxhost serve` does (`create_host_app` over a `ModelPool`,
the API keys read by `api_keys`): the real front door, admission, sessions, relay, routes and
error handlers. Only at the seam where serving reaches a worker (`ModelPool.acquire`) does a
`FakeWorker` stand in, ready at once, whose client answers each route with a body of the right
shape (a chat completion, a message, a token count) and canned content. A stream sends one frame,
then runs until its client leaves, as a long generation does.

`client(app)` drives the app in-process through httpx's `ASGITransport`, as a TCP client of
`settings.host:settings.port` would; `sdk_client(app)` is the same as the SDKs' `http_client`
(an httpx2 client: Anthropic's SDK takes no other). What needs a real worker or a real server
(tokens, prompt caches, sockets, HTTP/2, the Unix socket) is for `mlxhost.testing.start_host`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import httpx
import httpx2
from starlette.applications import Starlette

from mlxhost.config import Settings
from mlxhost.host.app import create_host_app
from mlxhost.host.workers.pool import ModelPool
from mlxhost.host.workers.status import WorkerExit, WorkerState
from mlxhost.catalog.spec import ModelSpec
from mlxhost.runtime.guard import api_keys
from mlxhost.testing import ADMIN_TOKEN
from mlxhost.wire.admin import WorkerRecord

__all__ = ["FakePool", "FakeWorker", "base_url", "client", "eventually", "parent", "sdk_client"]

T = TypeVar("T")

NOWHERE = Path("/nonexistent")  # no model files, no runtime directory: nothing is loaded

_USAGE = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
# What a worker answers on each route, in shape; the content is canned.
ANSWERS: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": "fake",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "length"}
        ],
        "usage": _USAGE,
    },
    "/v1/completions": {
        "id": "cmpl-fake", "object": "text_completion", "created": 0, "model": "fake",
        "choices": [{"index": 0, "text": "Hi", "finish_reason": "length", "logprobs": None}],
        "usage": _USAGE,
    },
    "/v1/responses": {
        "id": "resp-fake", "object": "response", "created_at": 0, "model": "fake", "status": "completed",
        "output": [{"type": "message", "id": "msg-fake", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "Hi", "annotations": []}]}],
        "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
    },
    "/v1/messages": {
        "id": "msg-fake", "type": "message", "role": "assistant", "model": "fake",
        "content": [{"type": "text", "text": "Hi"}], "stop_reason": "max_tokens", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
    "/v1/messages/count_tokens": {"input_tokens": 3},
}  # fmt: skip
STREAM_FRAME = (
    b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
)


class FakeResponse:
    """A worker's answer, as the relay reads one (`UpstreamResponse`)."""

    def __init__(self, status_code: int, content_type: str, body: bytes, endless: bool = False) -> None:
        self.status_code = status_code
        self.headers = [("content-type", content_type)]
        self._body = body
        self._endless = endless

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        yield self._body
        if self._endless:
            await anyio.sleep_forever()  # until the session's scope is cancelled

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        pass


class FakeWorkerClient:
    """A worker's socket, as the relay speaks to one (`WorkerClient.post`)."""

    async def post(self, path: str, headers: Mapping[str, str], body: bytes) -> FakeResponse:
        await anyio.lowlevel.checkpoint()
        answer = ANSWERS.get(path)
        if answer is None:
            error = {"message": "no such route", "type": "not_found_error", "param": None, "code": None}
            return FakeResponse(404, "application/json", json.dumps({"error": error}).encode())
        try:
            stream = json.loads(body).get("stream") is True
        except (ValueError, AttributeError):
            stream = False
        if stream:
            return FakeResponse(200, "text/event-stream", STREAM_FRAME, endless=True)
        return FakeResponse(200, "application/json", json.dumps(answer).encode())


class FakeWorker:
    """What the relay and the routes see of a ready worker (`Supervisor`): its lease, client and record."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.id = spec.id
        self.state = WorkerState.READY
        self.pid = os.getpid()  # it runs in this process
        self.in_flight = 0
        self.client = FakeWorkerClient()
        self._ready_since = time.monotonic()

    @contextlib.contextmanager
    def lease(self) -> Iterator[int]:
        self.in_flight += 1
        try:
            yield self.pid
        finally:
            self.in_flight -= 1

    async def exit_of(self, pid: int, wait: float) -> WorkerExit | None:
        return None  # it never exits, and holds no sequence for a session to wait on

    def snapshot(self) -> WorkerRecord:
        return WorkerRecord(
            id=self.id,
            model=self.spec.id,
            state=self.state.value,
            pid=self.pid,
            socket=str(NOWHERE / f"{self.id}.sock"),
            restarts=0,
            in_flight=self.in_flight,
            uptime_s=round(time.monotonic() - self._ready_since, 3),
            ready_s=0.0,
            last_exit=None,
            memory=None,
            ranks=(),
        )


class FakePool(ModelPool):
    """The real pool's names, routing and records; its workers are `FakeWorker`s, the default one
    resident from the start (as preloaded) and the others once asked for."""

    def __init__(
        self, settings: Settings, specs: tuple[ModelSpec, ...], task_group: anyio.abc.TaskGroup
    ) -> None:
        super().__init__(settings, specs, {s.id: Path(s.path) for s in specs}, NOWHERE, task_group)
        self.workers: dict[str, FakeWorker] = {self.default.id: FakeWorker(self.default)}

    async def acquire(self, spec: ModelSpec) -> Any:
        worker = self.workers.get(spec.id)
        if worker is None:
            worker = self.workers[spec.id] = FakeWorker(spec)
        return worker

    def supervisors(self) -> list[Any]:
        return list(self.workers.values())

    def supervisor(self, model_id: str) -> Any:
        return self.workers.get(model_id)


@asynccontextmanager
async def parent(settings: Settings, admin_token: str | None = ADMIN_TOKEN) -> AsyncIterator[Starlette]:
    """The parent's app for `settings` (a model called 'tiny' unless they name models)."""
    specs = settings.model or (ModelSpec("tiny", str(NOWHERE / "tiny")),)
    async with anyio.create_task_group() as tg:
        pool = FakePool(settings, specs, tg)
        yield create_host_app(pool, settings, admin_token=admin_token, api_keys=api_keys(settings))
        tg.cancel_scope.cancel()


def base_url(app: Starlette) -> str:
    settings: Settings = app.state.parent.settings
    return f"http://{settings.host}:{settings.port}"


def client(app: Starlette, **kwargs: Any) -> httpx.AsyncClient:
    """An in-process client of `app`, addressed as its TCP bind (`base_url`)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=base_url(app), **kwargs)


def sdk_client(app: Starlette) -> httpx2.AsyncClient:
    """`client(app)` as the SDKs take it: Anthropic's refuses httpx's clients."""
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=base_url(app))


async def eventually(predicate: Callable[[], Awaitable[T]], timeout: float = 30.0) -> T:
    """Poll `predicate` until it returns something true, and return that; fail after `timeout`."""
    with anyio.fail_after(timeout):
        while not (value := await predicate()):
            await anyio.sleep(0.01)
    return value
