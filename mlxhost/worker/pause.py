"""Pausing the worker for a managed job: the worker's side of the host's exclusive execution lease.

`POST /admin/lease`, on the worker's private socket, pauses the engine for as long as its
connection stays open. The engine takes in no new session, lets the running ones finish (nothing
is cancelled), and its generation thread then gives the memory MLX keeps cached back to the
system. The answer is a 200 whose body starts, once all that is done, with one line:

    {"paused": true, "memory": {"active_bytes": ..., "cache_bytes": ..., "peak_bytes": ..., "rss_bytes": ...}}

then carries a newline every `HEARTBEAT` seconds. The lease ends when the client goes, whether it
closes the response or dies, before or after that first line: a parent that dies cannot leave its
worker paused. Leases are counted; the gate opens with the last one, and the sessions submitted
meanwhile, which waited untouched, run then. `/health` keeps answering 200 while paused.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import psutil
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mlxhost.wire.launch import PAUSE_LEASE_PATH
from mlxhost.worker.engine.engine import Engine

__all__ = ["HEARTBEAT", "LEASE_PATH", "LeaseResponse", "Pauses", "lease"]

LEASE_PATH = PAUSE_LEASE_PATH  # the protocol's name for it (mlxhost.wire.launch)
HEARTBEAT = 5.0  # seconds between the newlines of a held lease


class Pauses:
    """The engine's pause gate, counted: closed while any lease holds it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.held = 0

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[dict[str, int]]:
        """Pause the engine until the block is left; yields MLX's memory once it is quiet."""
        self.held += 1
        if self.held == 1:
            self.engine.close_gate()
        try:
            await self.engine.wait_quiet()
            yield {**self.engine.memory(), "rss_bytes": psutil.Process().memory_info().rss}
        finally:
            self.held -= 1
            if self.held == 0:
                self.engine.open_gate()


async def lease(request: Request) -> Response:
    return LeaseResponse(request.app.state.pauses)


class LeaseResponse(Response):
    """A raw ASGI answer whose lifetime is the lease: it watches the connection itself, from the
    start, so a client gone before the first line releases the pause as surely as one gone after."""

    media_type = "application/x-ndjson"

    def __init__(self, pauses: Pauses) -> None:
        self.pauses = pauses
        self.status_code = 200
        self.background = None
        self.init_headers()  # no body: no content-length, so the answer streams (chunked)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._hold, send)
            while (await receive())["type"] != "http.disconnect":
                pass  # the (empty) request body
            tg.cancel_scope.cancel()

    async def _hold(self, send: Send) -> None:
        async with self.pauses.hold() as memory:
            first = json.dumps({"paused": True, "memory": memory}).encode() + b"\n"
            # A send that raises means the connection closed under it (ASGI 2.4): the lease is
            # over, and the disconnect the caller waits for, which cancels this task, follows.
            with contextlib.suppress(OSError):
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                await send({"type": "http.response.body", "body": first, "more_body": True})
                while True:
                    await anyio.sleep(HEARTBEAT)
                    await send({"type": "http.response.body", "body": b"\n", "more_body": True})
            await anyio.sleep_forever()
