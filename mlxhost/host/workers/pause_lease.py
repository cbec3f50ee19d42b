"""The client of a worker's pause lease: hold a worker paused for as long as a block runs.

The worker's private `POST /admin/lease` (mlxhost.worker.pause) lets its running generations
finish, takes in nothing new, gives MLX's cached memory back, and answers a first line
`{"paused": true, "memory": {...}}`; it stays paused for as long as the response's connection
lasts. So the lease is held by not reading past that line, and ended by closing the connection:
a host that dies ends every lease it held.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator

import anyio

from mlxhost.host.workers.status import WorkerUnavailable
from mlxhost.host.workers.upstream import UpstreamError, UpstreamResponse, WorkerClient
from mlxhost.wire.launch import PAUSE_LEASE_PATH, MemoryReading

__all__ = ["MAX_LEASE_LINE", "pause_lease"]

logger = logging.getLogger("mlxhost.supervisor")

MAX_LEASE_LINE = 4096


@contextlib.asynccontextmanager
async def pause_lease(client: WorkerClient, worker_id: str, wait: float) -> AsyncIterator[MemoryReading | None]:
    """Hold the worker paused for the block; yields its memory once paused, or None if it is gone.

    Raises `WorkerUnavailable` when it is not paused within `wait` seconds, or refuses: whoever
    asked must not share the machine with a worker still computing.
    """
    held = await _take(client, worker_id, wait)
    if held is None:
        yield None
        return
    response, body, reading = held
    try:
        yield reading
    finally:
        await _end(response, body)


async def _take(
    client: WorkerClient, worker_id: str, wait: float
) -> tuple[UpstreamResponse, AsyncIterator[bytes], MemoryReading] | None:
    response: UpstreamResponse | None = None
    body: AsyncIterator[bytes] | None = None
    try:
        with anyio.fail_after(wait):
            response = await client.post(PAUSE_LEASE_PATH, {}, b"")
            if not response.is_success:
                raise WorkerUnavailable(
                    f"the worker of '{worker_id}' refused to pause (HTTP {response.status_code})",
                    code="pause_refused",
                )
            body = response.aiter_raw()
            line = b""
            async for chunk in body:  # left open after the first line: the lease is held
                line += chunk
                if b"\n" in line or len(line) > MAX_LEASE_LINE:
                    break
            first = json.loads(line.partition(b"\n")[0])
            reading = MemoryReading(**first["memory"])
    except UpstreamError as exc:  # it ended meanwhile: nothing left to pause
        logger.info("worker %s: not paused, it is gone (%s)", worker_id, exc)
        return None
    except BaseException as exc:
        if response is not None:
            await _end(response, body)
        if isinstance(exc, TimeoutError):
            raise WorkerUnavailable(
                f"the worker of '{worker_id}' did not pause within {wait:g}s: its generations are "
                "still running",
                code="pause_timeout",
            ) from None
        if isinstance(exc, ValueError | KeyError | TypeError):
            raise WorkerUnavailable(
                f"the worker of '{worker_id}' answered its pause lease with something else: {exc!r}",
                code="pause_refused",
            ) from exc
        raise
    assert body is not None
    return response, body, reading


async def _end(response: UpstreamResponse, body: AsyncIterator[bytes] | None) -> None:
    with anyio.CancelScope(shield=True):
        await response.aclose()  # closes the connection, unread: that is what ends the lease
        if isinstance(body, AsyncGenerator):
            await body.aclose()  # now rather than when it is collected; nothing is left to close
