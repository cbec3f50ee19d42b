"""Hand-written hostile bodies and requests are answered with an OpenAI-shaped 4xx, never 5xx or a hang.

What arrives on the wire: truncated, huge, chunked past the limit, deeply nested, not UTF-8, not
JSON, of the wrong media type, with duplicate keys or the wrong shape; and the wrong method or
route. Every test runs against this module's host, which must still serve after it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from mlxhost.testing import RunningHost
from tests.e2e import fuzzing
from tests.e2e.fuzzing import (
    CHAT,
    CLIENT_TIMEOUT,
    COMPLETIONS,
    MAX_BODY,
    MESSAGES,
    ROUTES,
    chat,
    check_answer,
    check_error,
    post_raw,
)

# The fixtures this module uses (see tests/e2e/fuzzing.py).
shared_host, host, http = fuzzing.shared_host, fuzzing.host, fuzzing.http


# -- malformed and oversized bodies ---------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"{",
        b'{"messages": [',
        b'{"messages": [{"role": "us',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": ',
        b'{"messages": [{"role": "user", "content": "hi\\',
    ],
)
def test_truncated_json_is_a_400(http: httpx.Client, raw: bytes) -> None:
    for path in ROUTES:
        check_error(post_raw(http, raw, path), 400, param=None, code="invalid_json")


def test_nan_as_the_whole_body_is_a_400(http: httpx.Client) -> None:
    for raw in (b"NaN", b"Infinity", b"-Infinity"):
        check_error(post_raw(http, raw), 400, param=None, code="invalid_json")


def test_3mb_string_in_a_message_is_answered_without_5xx(http: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "x" * 3_000_000}], "max_tokens": 1}
    response = http.post(CHAT, json=body)
    if response.status_code != 200:
        check_error(response, 400, param="messages", code="context_length_exceeded")


@pytest.mark.parametrize(("field", "param"), [("user", "user"), ("stop", "stop"), ("model", "model")])
def test_3mb_string_in_a_short_field_is_a_400(http: httpx.Client, field: str, param: str) -> None:
    check_error(http.post(CHAT, json=chat(**{field: "x" * 3_000_000})), 400, param=param)


def test_body_over_max_body_bytes_is_a_413(http: httpx.Client) -> None:
    raw = json.dumps(chat(user="x" * MAX_BODY)).encode()
    check_error(post_raw(http, raw), 413, param=None, code="request_too_large")


def test_body_just_at_max_body_bytes_is_read(http: httpx.Client) -> None:
    prefix, suffix = b'{"messages": [{"role": "user", "content": "hi"}], "user": "', b'"}'
    raw = prefix + b"x" * (MAX_BODY - len(prefix) - len(suffix)) + suffix
    assert len(raw) == MAX_BODY
    check_error(post_raw(http, raw), 400, param="user")  # read and validated: too long a user


def _chunks(total: int) -> Iterator[bytes]:
    yield b'{"messages": [{"role": "user", "content": "hi"}], "user": "'
    for _ in range(total // 65536):
        yield b"x" * 65536
    yield b'"}'


def test_chunked_body_over_max_body_bytes_is_a_413(host: RunningHost) -> None:
    # No content-length: the limit is enforced while reading. A client of its own, since the
    # connection is not reusable afterwards: the 413 says `connection: close`.
    with host.http(timeout=CLIENT_TIMEOUT) as client:
        response = client.post(
            CHAT, content=_chunks(MAX_BODY + 2 * 65536), headers={"content-type": "application/json"}
        )
    check_error(response, 413, param=None, code="request_too_large")


def _raw_http(url: str, head: bytes, chunks: Iterator[bytes]) -> tuple[bytes, socket.socket]:
    """Send a chunked request over a raw socket (writing while reading); return the response head."""
    address = urlsplit(url)
    sock = socket.create_connection((address.hostname, address.port), timeout=CLIENT_TIMEOUT)

    def write() -> None:
        try:
            sock.sendall(head)
            for chunk in chunks:
                sock.sendall(b"%x\r\n%b\r\n" % (len(chunk), chunk))
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server stopped reading; the response says what it thought

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    received = b""
    while b"\r\n\r\n" not in received:
        data = sock.recv(65536)
        assert data, f"the connection closed before a response: {received!r}"
        received += data
    response_head, _, rest = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in response_head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    writer.join(CLIENT_TIMEOUT)
    return response_head, sock


def test_connection_after_a_chunked_413_is_closed_with_notice_or_reusable(host: RunningHost) -> None:
    assert host.url is not None
    netloc = host.url.removeprefix("http://").encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\n" % netloc
        + b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    response_head, sock = _raw_http(host.url, request, _chunks(MAX_BODY + 40 * 65536))
    with sock:
        assert response_head.startswith(b"HTTP/1.1 413"), response_head
        if b"\r\nconnection: close" in response_head.lower():
            return
        time.sleep(0.3)
        body = json.dumps(chat(max_tokens=1)).encode()
        try:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: %b\r\n" % netloc
                + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
            )
            answer = sock.recv(65536)
        except OSError as exc:
            answer = repr(exc).encode()
        assert answer.startswith(b"HTTP/1.1 200"), (response_head, answer)


DEPTH = 10_000


DEEP_BODIES = {
    "lists as a field": b'{"messages": [{"role": "user", "content": "hi"}], "user": '
    + b"[" * DEPTH
    + b"]" * DEPTH
    + b"}",
    "objects as a field": b'{"messages": [{"role": "user", "content": "hi"}], "user": '
    + b'{"a": ' * DEPTH
    + b"1"
    + b"}" * DEPTH
    + b"}",
    "lists as the body": b"[" * DEPTH + b"]" * DEPTH,
    "objects as the body": b'{"a": ' * DEPTH + b"1" + b"}" * DEPTH,
}


@pytest.mark.parametrize("name", DEEP_BODIES)
def test_deeply_nested_json_is_a_400(http: httpx.Client, name: str) -> None:
    check_error(post_raw(http, DEEP_BODIES[name]), 400, param=None, code="invalid_json")


def test_moderately_nested_json_is_a_400(http: httpx.Client) -> None:
    depth = 500
    raw = b'{"messages": [{"role": "user", "content": "hi"}], "user": ' + b"[" * depth + b"]" * depth + b"}"
    check_error(post_raw(http, raw), 400)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "\xff\xfe hi"}]}',
        b'{"messages": [{"role": "user", "content": "\xc0\xaf"}]}',  # overlong '/'
        b'{"messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',  # a UTF-8-encoded surrogate
        b'{"messages": [{"role": "user", "content": "\xe2\x82"}]}',  # cut short
        b'{"\xff": 1, "messages": [{"role": "user", "content": "hi"}]}',
    ],
)
def test_invalid_utf8_is_a_400(http: httpx.Client, raw: bytes) -> None:
    for path in ROUTES:
        check_error(post_raw(http, raw, path), 400, param=None, code="invalid_json")


@pytest.mark.parametrize("content_type", [None, "application/json"])
def test_empty_body_is_a_400(http: httpx.Client, content_type: str | None) -> None:
    headers = {"content-type": content_type} if content_type else {}
    for path in ROUTES:
        check_error(http.post(path, content=b"", headers=headers), 400, param=None, code="invalid_json")


# -- JSON of the wrong shape ---------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "max_tokens": 999}',
        b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 999, "max_tokens": 2}',
        b'{"messages": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
        b'{"messages": [{"role": "user", "role": "tool", "content": "hi"}], "max_tokens": 2}',
        b'{"model": "../../etc/passwd", "model": 5, "messages": [{"role": "user", "content": "hi"}]}',
        b'{"stream": true, "stream": false, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
        b'{"stream": false, "stream": true, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}',
    ],
)
def test_duplicate_keys_are_answered_without_5xx(http: httpx.Client, raw: bytes) -> None:
    response = post_raw(http, raw)
    check_answer(response)
    if response.status_code == 400:
        assert check_error(response)["param"] is not None


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, [chat()], None),
        (CHAT, {"messages": {"role": "user", "content": "hi"}}, "messages"),
        (CHAT, {"messages": [["role", "user"]]}, "messages[0]"),
        (CHAT, chat(stream_options=[True]), "stream_options"),
        (CHAT, chat(response_format=["text"]), "response_format"),
        (CHAT, {"messages": [{"role": "user", "content": [["text", "hi"]]}]}, "messages[0].content[0]"),
        (COMPLETIONS, [{"prompt": "hi"}], None),
        (COMPLETIONS, {"prompt": {"text": "hi"}}, "prompt"),
        (COMPLETIONS, {"prompt": "hi", "stream_options": []}, "stream_options"),
    ],
)
def test_arrays_where_objects_are_expected_are_a_400(
    http: httpx.Client, path: str, body: object, param: str | None
) -> None:
    check_error(http.post(path, json=body), 400, param=param)


def test_null_byte_as_a_key_is_an_unsupported_parameter(http: httpx.Client) -> None:
    raw = b'{"messages": [{"role": "user", "content": "hi"}], "\\u0000": 1}'
    # Quoted back escaped: no control character of a client's reaches a log or a terminal.
    check_error(post_raw(http, raw), 400, param="\\x00", code="unsupported_parameter")


# -- media types, methods and routes -------------------------------------------------------


def test_json_sent_as_text_plain_is_a_415(http: httpx.Client) -> None:
    # A browser may POST text/plain to any site without asking first: JSON only, said so.
    response = http.post(CHAT, content=json.dumps(chat()), headers={"content-type": "text/plain"})
    check_error(response, 415, param="content-type", code="unsupported_media_type")


def test_multipart_form_data_is_a_415(http: httpx.Client) -> None:
    response = http.post(CHAT, files={"messages": ("m.json", json.dumps(MESSAGES).encode())})
    check_error(response, 415, code="unsupported_media_type")


def test_url_encoded_form_is_a_415(http: httpx.Client) -> None:
    check_error(http.post(CHAT, data={"messages": "hi"}), 415, code="unsupported_media_type")


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("path", ROUTES)
def test_other_methods_on_post_routes_are_a_405(http: httpx.Client, path: str, method: str) -> None:
    body = json.dumps(chat()).encode() if method in ("PUT", "PATCH") else None
    response = http.request(method, path, content=body)
    check_error(response, 405, param=None, code="method_not_allowed")
    assert "POST" in response.headers.get("allow", ""), response.headers


@pytest.mark.parametrize("path", ["/v1/nothing", "/v1/chat/completions/extra", "/v1/chat", "/v2/completions"])
def test_unknown_route_is_a_404(http: httpx.Client, path: str) -> None:
    check_error(http.post(path, json=chat()), 404, param=None)
