"""Raw HTTP/1.1 on a fresh socket, for what a well-behaved client (httpx) would never send."""

from __future__ import annotations

import socket

from mlxhost.testing import RunningHost

__all__ = ["netloc", "raw"]


def netloc(server: RunningHost) -> str:
    assert server.url is not None
    return server.url.removeprefix("http://")


def raw(server: RunningHost, request: bytes, timeout: float = 10.0) -> bytes:
    """Send bytes on a fresh connection; return the one answer the host gives (head and body)."""
    host, port = netloc(server).split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer and (data := sock.recv(65536)):
            answer += data
        head, _, body = answer.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
            0,
        )
        while len(body) < length and (data := sock.recv(65536)):
            body += data
    return head + b"\r\n\r\n" + body
