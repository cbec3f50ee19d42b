"""The front door's pure parts: Host names, loopback binds, JSON media types, and excerpts."""

from __future__ import annotations

import pytest

from mlxhost.runtime.guard import _check_json, _split_host, is_loopback
from mlxhost.wire.errors import UnsupportedMediaType
from mlxhost.wire.inert import escape_controls, excerpt


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("localhost", ("localhost", None)),
        ("localhost.:80", ("localhost", 80)),
        ("[::1]:9000", ("[::1]", 9000)),
        ("[::1]", ("[::1]", None)),
        ("host:", ("host", None)),
        ("host:http", ("host", -2)),
        ("host:\u0661", ("host", -2)),  # a Unicode digit is no port
    ],
)
def test_host_headers_split_into_name_and_port(host: str, expected: tuple[str, int | None]) -> None:
    assert _split_host(host) == expected


@pytest.mark.parametrize(
    ("bind", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("localhost", True), ("::1", True), ("[::1]", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.2", False), ("example.com", False)],
)
def test_loopback_binds(bind: str, loopback: bool) -> None:
    assert is_loopback(bind) is loopback


@pytest.mark.parametrize(
    "headers",
    [
        {b"content-type": b"application/json", b"content-length": b"2"},
        {b"content-type": b"application/json; charset=utf-8", b"content-length": b"2"},
        {b"content-type": b"application/vnd.api+json", b"transfer-encoding": b"chunked"},
        {b"content-length": b"0"},  # no body: nothing to judge
        {},
    ],
)
def test_json_bodies_and_no_bodies_pass(headers: dict[bytes, bytes]) -> None:
    _check_json(headers)


@pytest.mark.parametrize("content_type", [None, b"text/plain", b"application/jsonx", b"application/x-www-form-urlencoded"])
def test_other_bodies_are_refused_naming_the_header(content_type: bytes | None) -> None:
    headers = {b"content-length": b"10"} | ({b"content-type": content_type} if content_type else {})
    with pytest.raises(UnsupportedMediaType) as refused:
        _check_json(headers)
    assert refused.value.param == "content-type" and refused.value.status_code == 415


def test_excerpts_are_short_and_inert() -> None:
    assert excerpt("short") == "short"
    long = excerpt("\x1b]0;title\x07" + "k" * 1_000_000)
    assert len(long) < 120 and "1000010 characters in all" in long
    assert not any(ord(c) < 0x20 for c in long)
    assert escape_controls("a\x1b[2Jb\x9b\u202e") == "a\\x1b[2Jb\\x9b\\u202e"
    assert not excerpt("\x1b" * 100).endswith("\\")  # never half an escape
