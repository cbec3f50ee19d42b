"""Work before admission is bounded: a body deadline, a cap on connections, a 429 before the body.

A hostile or careless caller cannot hold the host's sockets, memory or CPU with requests it never
finishes sending or that the host could never admit.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import RunningHost, start_host
from tests.e2e.raw_http import netloc, raw

CHAT = "/v1/chat/completions"


def chat(content: str = "Hello", max_tokens: int = 3, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}



@pytest.fixture(scope="module")
def narrow(tiny_model: Path) -> Iterator[RunningHost]:
    server = start_host(
        "--model", str(tiny_model),
        "--max-connections=3", "--body-timeout=1", "--max-active=1", "--max-queued=0",
    )
    yield server
    assert server.stop() == 0


def test_a_body_that_does_not_arrive_is_a_408(narrow: RunningHost) -> None:
    began = time.monotonic()
    answer = raw(
        narrow,
        f"POST {CHAT} HTTP/1.1\r\nhost: {netloc(narrow)}\r\ncontent-type: application/json\r\n"
        "content-length: 1000\r\n\r\n{\"messages\":".encode(),
        timeout=30,
    )
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"body_timeout" in answer and time.monotonic() - began < 15


def test_connections_past_the_cap_get_a_503_and_are_closed(narrow: RunningHost) -> None:
    host, port = netloc(narrow).split(":")
    held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    try:
        for sock in held:  # half a request: each connection is open and busy
            sock.sendall(f"GET /health HTTP/1.1\r\nhost: {netloc(narrow)}\r\n".encode())
        time.sleep(0.3)
        answer = raw(narrow, f"GET /health HTTP/1.1\r\nhost: {netloc(narrow)}\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b'"code":"busy"' in answer
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 10
    while True:  # the held connections are let go, and the host serves again
        answer = raw(narrow, f"GET /health HTTP/1.1\r\nhost: {netloc(narrow)}\r\nconnection: close\r\n\r\n".encode())
        if answer.startswith(b"HTTP/1.1 200") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_a_full_model_refuses_before_reading_the_body(narrow: RunningHost) -> None:
    with httpx.Client(base_url=narrow.url or "", timeout=60) as http:
        body = chat("Go on forever", max_tokens=4000, stream=True, temperature=0)
        with http.stream("POST", CHAT, json=body) as running:
            assert running.status_code == 200
            lines = running.iter_lines()  # kept: a dropped iterator closes the connection
            next(lines)
            # Four megabytes announced, none sent: the 429 comes at once, not after a 408.
            began = time.monotonic()
            answer = raw(
                narrow,
                f"POST {CHAT} HTTP/1.1\r\nhost: {netloc(narrow)}\r\ncontent-type: application/json\r\n"
                "content-length: 4000000\r\n\r\n".encode(),
            )
            assert answer.startswith(b"HTTP/1.1 429"), answer[:300]
            assert time.monotonic() - began < 0.9  # under the body timeout: the body was never awaited
