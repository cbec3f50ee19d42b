"""The parent's client for worker sockets, against a real Hypercorn server on a Unix socket."""

from __future__ import annotations

import os
import resource
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest
from starlette.types import Receive, Scope, Send

from mlxhost.host.workers.upstream import UpstreamBroken, UpstreamConnectError, WorkerClient
from mlxhost.runtime.listener import Listener, serve_in


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Hypercorn serves on asyncio


class Worker:
    """An ASGI app that echoes the body, or streams numbered chunks, and notes disconnects."""

    def __init__(self) -> None:
        self.requests = 0
        self.disconnected = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.requests += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(b"content-type", b"text/plain"), (b"x-echo", dict(scope["headers"]).get(b"x-echo", b""))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if scope["path"] == "/echo":
            await send({"type": "http.response.body", "body": body})
            return
        for n in range(1000):  # /stream: until the client goes away
            await send({"type": "http.response.body", "body": f"{n}\n".encode(), "more_body": True})
            with anyio.move_on_after(0.01):
                if (await receive())["type"] == "http.disconnect":
                    self.disconnected.set()
                    return
        await send({"type": "http.response.body", "body": b""})


@asynccontextmanager
async def serving(path: Path, keep_alive: float = 5.0) -> AsyncIterator[Worker]:
    worker = Worker()
    listener = Listener([f"unix:{path}"], graceful_timeout=0.5)
    listener.config.keep_alive_timeout = keep_alive
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        serve_in(tg, listener, worker, stop)  # type: ignore[arg-type]
        yield worker
        stop.set()


@pytest.mark.anyio
async def test_a_connection_is_kept_for_the_next_request(tmp_path: Path) -> None:
    async with serving(tmp_path / "w.sock") as worker:
        client = WorkerClient(str(tmp_path / "w.sock"))
        seen = []
        for n in range(3):
            response = await client.post("/echo", {"x-echo": str(n)}, b"hello %d" % n)
            assert response.status_code == 200 and response.is_success
            assert ("x-echo", str(n)) in response.headers
            assert await response.aread() == b"hello %d" % n
            await response.aclose()
            seen.append(client._idle[-1])
        assert worker.requests == 3
        assert seen[0] is seen[1] is seen[2]  # one connection served all three
        await client.aclose()


@pytest.mark.anyio
async def test_a_connection_the_worker_closed_while_idle_is_not_reused(tmp_path: Path) -> None:
    async with serving(tmp_path / "w.sock", keep_alive=0.2):
        client = WorkerClient(str(tmp_path / "w.sock"))
        first = await client.post("/echo", {}, b"one")
        await first.aread()
        await first.aclose()
        stale = client._idle[-1]
        await anyio.sleep(0.6)  # past the worker's keep-alive timeout: it has closed its end
        second = await client.post("/echo", {}, b"two")
        assert await second.aread() == b"two"
        await second.aclose()
        assert client._idle[-1] is not stale
        await client.aclose()


@pytest.mark.anyio
async def test_closing_a_response_early_closes_the_connection(tmp_path: Path) -> None:
    async with serving(tmp_path / "w.sock") as worker:
        client = WorkerClient(str(tmp_path / "w.sock"))
        response = await client.post("/stream", {}, b"")
        received = b""
        async for chunk in response.aiter_raw():
            received += chunk
            if received.count(b"\n") >= 3:
                break
        await response.aclose()
        assert received.startswith(b"0\n1\n2\n")
        with anyio.fail_after(5):
            await worker.disconnected.wait()  # the worker saw the client leave
        assert client._idle == []  # a connection with an unfinished answer is never reused
        await client.aclose()


@pytest.mark.anyio
async def test_no_worker_listening_is_a_connect_error(tmp_path: Path) -> None:
    client = WorkerClient(str(tmp_path / "nobody.sock"))
    with pytest.raises(UpstreamConnectError):
        await client.post("/echo", {}, b"")


@pytest.mark.anyio
async def test_a_worker_that_goes_away_mid_answer_is_a_broken_connection(tmp_path: Path) -> None:
    client = WorkerClient(str(tmp_path / "w.sock"))
    async with serving(tmp_path / "w.sock") as worker:
        response = await client.post("/stream", {}, b"")
        chunks = response.aiter_raw()
        assert (await chunks.__anext__()).startswith(b"0\n")
        worker.disconnected.set()
    # The server is gone, and with it the connection.
    with pytest.raises(UpstreamBroken):
        async for _ in chunks:
            pass
    await response.aclose()
    await client.aclose()


@pytest.fixture
def high_fds() -> Iterator[None]:
    """Every file descriptor up to past 1024 taken, so that the next sockets get numbers select()
    refuses (FD_SETSIZE); the soft limit raised for it where needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted + 64:
        if hard != resource.RLIM_INFINITY and hard < wanted + 64:
            pytest.skip(f"the hard limit on open files ({hard}) is too low")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted + 64, hard))
    null = os.open(os.devnull, os.O_RDONLY)
    taken = [null]
    try:
        while taken[-1] < wanted:
            taken.append(os.dup(null))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.anyio
async def test_connections_past_fd_1024_are_reused(tmp_path: Path, high_fds: None) -> None:
    async with serving(tmp_path / "w.sock", keep_alive=0.3):
        client = WorkerClient(str(tmp_path / "w.sock"))
        for n in range(2):
            response = await client.post("/echo", {}, b"hello %d" % n)
            assert await response.aread() == b"hello %d" % n
            await response.aclose()
        kept = client._idle[-1]
        assert kept.stream.extra(anyio.abc.SocketAttribute.raw_socket).fileno() > 1024
        assert len(client._idle) == 1  # the one connection served both
        await anyio.sleep(0.8)  # the worker closes its end of the idle connection
        third = await client.post("/echo", {}, b"three")
        assert await third.aread() == b"three"
        await third.aclose()
        assert client._idle[-1] is not kept
        await client.aclose()


@pytest.mark.anyio
async def test_a_read_cancelled_mid_answer_closes_the_connection(tmp_path: Path) -> None:
    async with serving(tmp_path / "w.sock") as worker:
        client = WorkerClient(str(tmp_path / "w.sock"))
        response = await client.post("/stream", {}, b"")
        connection = response._connection
        assert connection is not None
        with anyio.move_on_after(0.2):
            async for _ in response.aiter_raw():
                pass  # the worker streams for 10 s: cancelled in the middle of a read
        # Closed at once, not when (or if) the caller gets to aclose the response.
        with anyio.fail_after(5):
            await worker.disconnected.wait()
        with pytest.raises(anyio.ClosedResourceError):
            await connection.stream.send(b"x")
        await response.aclose()
        assert client._idle == []
        await client.aclose()


@pytest.mark.anyio
async def test_a_broken_answer_closes_its_connection(tmp_path: Path) -> None:
    client = WorkerClient(str(tmp_path / "w.sock"))
    async with serving(tmp_path / "w.sock") as worker:
        response = await client.post("/stream", {}, b"")
        connection = response._connection
        assert connection is not None
        chunks = response.aiter_raw()
        await chunks.__anext__()
        worker.disconnected.set()
    with pytest.raises(UpstreamBroken):
        async for _ in chunks:
            pass
    with pytest.raises(anyio.ClosedResourceError):  # closed by the failure, before any aclose
        await connection.stream.send(b"x")
    await client.aclose()
