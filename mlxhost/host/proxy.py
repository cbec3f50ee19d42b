"""Forwarding one request to its model's worker over the worker's Unix socket.

Streams pass through chunk by chunk. A client that leaves closes the upstream request, so the
worker cancels the generation. A worker that dies mid-request never leaves a client hanging: a
whole answer becomes a 502 saying how the worker exited; a stream gets a last `data:` error event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ..api.errors import APIError, ServiceUnavailable
from .supervisor import Supervisor

__all__ = ["WorkerFailed", "forward", "peek_model"]

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
    # Hypercorn writes its own:
    "date",
    "server",
}
EXIT_WAIT = 2.0  # how long to wait for the supervisor to learn how a broken worker ended
CLIENT_CLOSED_REQUEST = 499


class WorkerFailed(APIError):
    status_code = 502
    type = "worker_error"
    code = "worker_exited"


async def forward(request: Request, supervisor: Supervisor, body: bytes) -> Response:
    """Send `body` on to the worker and answer with what it answers."""
    lease = AsyncExitStack()  # held until the relayed body ends, however it ends
    pid = await lease.enter_async_context(supervisor.lease())
    try:
        upstream = await _open_upstream(request, supervisor, body, pid)
    except BaseException:
        await lease.aclose()
        raise
    if upstream is None:  # the client left while the worker was still working
        await lease.aclose()
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
    streaming = upstream.headers.get("content-type", "").startswith("text/event-stream")
    return _Relay(
        _relay(upstream, supervisor, pid, streaming),
        status_code=upstream.status_code,
        headers=headers,
        background=BackgroundTask(lease.aclose),
    )


class _Relay(StreamingResponse):
    """A StreamingResponse whose cleanup runs even when sending the headers fails."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.background is not None:
                background, self.background = self.background, None
                with anyio.CancelScope(shield=True):
                    await background()


async def _open_upstream(
    request: Request, supervisor: Supervisor, body: bytes, pid: int
) -> httpx.Response | None:
    client = supervisor.client
    if client is None:
        raise ServiceUnavailable(
            f"the model '{supervisor.id}' is not ready", code="model_restarting", headers={"retry-after": "1"}
        )
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
    outgoing = client.build_request(
        request.method, request.url.path, params=request.url.query or None, headers=headers, content=body
    )
    response: httpx.Response | None = None
    failure: APIError | None = None
    # A whole answer's headers come only when the answer is done: watch for the client leaving.
    async with anyio.create_task_group() as tg:
        tg.start_soon(_cancel_on_disconnect, request, tg.cancel_scope)
        try:
            response = await client.send(outgoing, stream=True)
        except httpx.ConnectError:
            failure = ServiceUnavailable(
                f"the model '{supervisor.id}' worker is not accepting connections; try again",
                code="model_restarting",
                headers={"retry-after": "1"},
            )
        except httpx.TransportError:
            failure = await _worker_failed(supervisor, pid)
        tg.cancel_scope.cancel()
    if failure is not None:  # raised out here: inside the task group it would come wrapped
        raise failure
    return response


async def _relay(
    upstream: httpx.Response, supervisor: Supervisor, pid: int, streaming: bool
) -> AsyncIterator[bytes]:
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    except httpx.TransportError:
        if not streaming:
            raise
        error = await _worker_failed(supervisor, pid)
        yield b"\n\ndata: " + json.dumps(error.body()).encode() + b"\n\ndata: [DONE]\n\n"
    finally:
        with anyio.CancelScope(shield=True):
            await upstream.aclose()


async def _worker_failed(supervisor: Supervisor, pid: int) -> WorkerFailed:
    exit = await supervisor.exit_of(pid, EXIT_WAIT)
    if exit is None:
        return WorkerFailed(f"the connection to the model '{supervisor.id}' worker broke")
    return WorkerFailed(
        f"the model '{supervisor.id}' worker exited ({exit.describe()}) while handling this "
        "request; it is being restarted"
    )


async def _cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def peek_model(body: bytes) -> Any:
    """The request's `model` field, if the body is a JSON object that has one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("model") if isinstance(data, dict) else None
