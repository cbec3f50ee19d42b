"""The parent's HTTP/1.1 client for a worker's private Unix socket.

The relay first used httpx here, as the rest of the project does. Profiling the parent under load
showed httpx's layers (connection pool bookkeeping, cookies, redirects, auth, timeouts per read)
costing about as much CPU per request as everything else the host does for a session, on a path
every token passes through. A worker connection needs none of them: one socket path, keep-alive,
a POST with a body, a streamed answer. So this module drives h11, the HTTP/1.1 state machine that
httpx and Hypercorn are themselves built on, over anyio sockets. Health checks and the tools keep
using httpx.

Closing a response before its end closes the connection: that is how the worker learns that the
client left, and it stops the generation.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Mapping

import anyio
import anyio.abc
import h11

__all__ = ["UpstreamBroken", "UpstreamConnectError", "UpstreamError", "UpstreamResponse", "WorkerClient"]

RECEIVE_SIZE = 65536
CONNECT_TIMEOUT = 5.0
# Hypercorn closes a keep-alive connection after 5 s idle (its default keep_alive_timeout);
# one idle for longer may be half-closed already, so it is not reused.
IDLE_REUSE = 4.0
MAX_IDLE = 64


class UpstreamError(Exception):
    """The exchange with the worker failed."""


class UpstreamConnectError(UpstreamError):
    """The worker's socket did not take the connection: it is gone or not listening yet."""


class UpstreamBroken(UpstreamError):
    """The connection broke, or the worker spoke something other than HTTP/1.1."""


class _Connection:
    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0

    def reusable(self, now: float) -> bool:
        if now - self.idle_since > IDLE_REUSE or self.h11.our_state is not h11.IDLE:
            return False
        # An idle connection has nothing to read. A peek says so without blocking and, unlike
        # select(), for any file descriptor number (select() refuses those past FD_SETSIZE, 1024).
        sock = self.stream.extra(anyio.abc.SocketAttribute.raw_socket)
        try:
            sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True  # idle, as it should be
        except OSError:
            return False
        return False  # b"": the worker's EOF; or bytes nobody asked for: either way, not reusable

    async def send(self, *events: h11.Event) -> None:
        # One write for the whole request: each write wakes the worker's event loop, and a
        # head without its body wakes it for nothing.
        data = b"".join(self.h11.send(event) or b"" for event in events)
        if data:
            await self.stream.send(data)

    async def next_event(self) -> object:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.stream.receive(RECEIVE_SIZE)
            except anyio.EndOfStream:
                data = b""
            self.h11.receive_data(data)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.stream.aclose()


class UpstreamResponse:
    def __init__(self, client: WorkerClient, connection: _Connection, response: h11.Response) -> None:
        self._client = client
        self._connection: _Connection | None = connection
        self.status_code = response.status_code
        # h11 hands header names over lower-cased.
        self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers]
        self._ended = False

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked transfer coding removed)."""
        connection = self._connection
        assert connection is not None, "the response is closed"
        try:
            while not self._ended:
                try:
                    event = await connection.next_event()
                except (OSError, anyio.BrokenResourceError, h11.ProtocolError) as exc:
                    raise UpstreamBroken(f"the connection to the worker broke: {exc!r}") from exc
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    self._ended = True
                elif isinstance(event, h11.ConnectionClosed):
                    raise UpstreamBroken("the worker closed the connection in the middle of an answer")
        except BaseException:
            # Broken, cancelled mid-read, or left before the end: the rest of this answer will
            # never be read, so the connection cannot serve another. Close it now, whether or
            # not the caller gets to `aclose` (that is how the worker learns the client left).
            await self._abandon()
            raise

    async def aread(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_raw()])

    async def aclose(self) -> None:
        """Hand the connection back for the next request, or close it if the answer was cut short."""
        connection = self._connection
        if connection is None:
            return
        exchange = connection.h11
        if self._ended and exchange.our_state is h11.DONE and exchange.their_state is h11.DONE:
            self._connection = None
            try:
                exchange.start_next_cycle()
            except h11.ProtocolError:
                await connection.aclose()
                return
            await self._client._release(connection)
        else:
            await self._abandon()

    async def _abandon(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()


class WorkerClient:
    """Keep-alive connections to one worker socket; `post` sends a request and returns its head."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._idle: list[_Connection] = []
        self._closed = False

    async def post(self, path: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        # Built first: a header h11 refuses then costs no connection.
        request = h11.Request(
            method="POST",
            target=path,
            headers=[("host", "worker"), ("content-length", str(len(body))), *headers.items()],
        )
        connection = await self._reuse() or await self._connect()
        try:
            await connection.send(request, h11.Data(data=body), h11.EndOfMessage())
            event = await connection.next_event()
            while isinstance(event, h11.InformationalResponse):
                event = await connection.next_event()
        except BaseException as exc:
            await connection.aclose()
            if isinstance(exc, OSError | anyio.BrokenResourceError | h11.ProtocolError):
                raise UpstreamBroken(f"the connection to the worker broke: {exc!r}") from exc
            raise
        if not isinstance(event, h11.Response):
            await connection.aclose()
            raise UpstreamBroken("the worker closed the connection without answering")
        return UpstreamResponse(self, connection, event)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()

    async def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            try:
                if connection.reusable(now):
                    return connection
            except BaseException:
                await connection.aclose()
                raise
            await connection.aclose()  # shielded: a cancellation here still closes it
        return None

    async def _connect(self) -> _Connection:
        try:
            with anyio.fail_after(CONNECT_TIMEOUT):
                stream = await anyio.connect_unix(self.socket_path)
        except (OSError, TimeoutError) as exc:
            raise UpstreamConnectError(f"cannot connect to the worker at {self.socket_path}: {exc!r}") from exc
        return _Connection(stream)

    async def _release(self, connection: _Connection) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE or connection.h11.our_state is not h11.IDLE:
            await connection.aclose()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)
