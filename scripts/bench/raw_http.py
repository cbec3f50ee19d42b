"""A small HTTP/1.1 client on one keep-alive connection, for the overload run's extra requests.

Why not httpx: what the overload run measures is the latency of the parent's 429, from the client
side, while 8 such clients keep it busy. On two cores an httpx request costs the client about a
millisecond of CPU, as much as the server's answer, and that cost would be measured as the
server's latency. So the request is prepared once, as bytes, and the answer is parsed no further
than a 429 (or a short 200) needs: the status line, the headers, and a body by Content-Length or
chunked. Everything else the bench sends goes through httpx.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

HEAD_LIMIT = 65536  # bytes of a response head, or of a chunk-size line

# What a request on a connection the server dropped, or a malformed answer, raises.
ERRORS = (
    OSError,
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.DelimiterNotFound,
    ValueError,
    IndexError,
)


def prepared_post(url: str, path: str, body: dict[str, Any]) -> tuple[str, int, bytes]:
    """The host, the port and the bytes of a JSON POST to `path`."""
    parsed = httpx.URL(url)
    content = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(content)}\r\n\r\n"
    )
    return parsed.host, parsed.port or 80, head.encode() + content


class RawHTTP:
    """One keep-alive HTTP/1.1 connection that sends a prepared request and reads the answer."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._stream: SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None

    async def connect(self) -> None:
        if self._stream is None:
            self._stream = await anyio.connect_tcp(self.host, self.port)
            self._reader = BufferedByteReceiveStream(self._stream)

    async def aclose(self) -> None:
        stream, self._stream, self._reader = self._stream, None, None
        if stream is not None:
            with anyio.CancelScope(shield=True):  # also when cancelled: the server sees us leave
                await stream.aclose()

    async def request(self, payload: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send `payload`; the status, the headers (lower-case names) and the body."""
        await self.connect()
        assert self._stream is not None and self._reader is not None
        try:
            await self._stream.send(payload)
            head = await self._reader.receive_until(b"\r\n\r\n", HEAD_LIMIT)
            status_line, *lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split()[1])
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                if name:
                    headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                body = await self._reader.receive_exactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                body = await self._chunked()
            else:
                body = await self._to_the_end()
                headers["connection"] = "close"
            if headers.get("connection", "").lower() == "close":
                await self.aclose()
        except BaseException:
            await self.aclose()  # also when cancelled: a queued request leaves the queue
            raise
        return status, headers, body

    async def _chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.receive_until(b"\r\n", HEAD_LIMIT)).split(b";")[0], 16)
            if size == 0:
                while await self._reader.receive_until(b"\r\n", HEAD_LIMIT) != b"":
                    pass  # trailers, to the blank line
                return b"".join(parts)
            parts.append(await self._reader.receive_exactly(size))
            await self._reader.receive_exactly(2)

    async def _to_the_end(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        try:
            while True:
                parts.append(await self._reader.receive())
        except anyio.EndOfStream:
            return b"".join(parts)
