"""What the bench reads from the servers' /health: the isolated server's worker (pid, socket,
ready_s, memory), a serving core's engine counters (the in-process server's, or a worker's over
its private Unix socket), and the parent's admission counters. Reading only, over HTTP."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx

from bench.figures import progress

HEALTH_TIMEOUT_S = 5.0


async def isolated_worker(client: httpx.AsyncClient) -> dict[str, Any]:
    """The isolated server's (only) worker, as its parent's /health shows it."""
    health = (await client.get("/health", timeout=HEALTH_TIMEOUT_S)).json()
    workers = health.get("workers") or []
    if len(workers) != 1:
        raise RuntimeError(f"expected one worker in /health, got: {health}")
    return dict(workers[0])


def worker_client(socket: str, timeout: float = HEALTH_TIMEOUT_S) -> httpx.AsyncClient:
    """A client of a worker's own HTTP server, on its private Unix socket."""
    transport = httpx.AsyncHTTPTransport(uds=socket)
    return httpx.AsyncClient(base_url="http://worker", transport=transport, timeout=timeout)


async def engine_statistics(socket: str | None) -> Any:
    """`engine` from a worker's /health, over its socket; None, with a warning, if unreadable."""
    try:
        if socket is None:
            raise ValueError("the worker has no socket")
        async with worker_client(socket, timeout=10.0) as worker:
            return (await worker.get("/health")).json().get("engine")
    except (httpx.HTTPError, ValueError) as exc:
        progress(f"warning: no engine statistics from {socket}: {exc}")
        return None


async def admission_of(client: httpx.AsyncClient) -> dict[str, Any]:
    """The parent's admission statistics of its (only) model."""
    admission = (await client.get("/health")).json().get("admission") or {}
    if len(admission) > 1:
        raise RuntimeError(f"expected one model in /health admission, got: {admission}")
    return dict(next(iter(admission.values()), {"active": 0, "queued": 0, "rejected": 0}))


async def wait_admission(
    client: httpx.AsyncClient,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 30.0,
    poll_s: float = 0.005,
) -> dict[str, Any]:
    """Poll the parent's admission statistics until `done` holds for them."""
    deadline = time.perf_counter() + timeout
    while True:
        stats = await admission_of(client)
        if done(stats):
            return stats
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the admission statistics never got there: {stats}")
        await anyio.sleep(poll_s)
