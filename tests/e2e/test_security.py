"""What a hostile or careless caller can do to the host, where it takes real processes: nothing that
reaches another caller.

The front door's checks (Host, Origin, credentials, content type) are the parent's ASGI logic,
tested in-process in tests/unit/test_parent_front.py. Here, what needs a real host: the Unix
socket, HTTP/2 as the server speaks it, binding beyond loopback, the `--in-process` host, a key file
read at start, the parent's memory under hostile bodies, and that one caller cannot observe
another's cached prompt. What a caller can make the host do before admission is in
test_bounded_work.py.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlxhost.testing import RunningHost, start_host
from tests.e2e.raw_http import netloc

CHAT = "/v1/chat/completions"
KEY, FILE_KEYS = "key-from-env", ("key-from-file-1", "key-from-file-2")
APP_ORIGIN = "http://app.test:3000"


def chat(content: str = "Hello", max_tokens: int = 3, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}


@pytest.fixture(scope="module")
def keyed(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    """A host with API keys from the environment and a file, a listed origin and a listed host."""
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text("# one key a line\n" + "\n".join(FILE_KEYS) + "\n")
    keys.chmod(0o600)
    socket_path = tmp_path_factory.mktemp("sock") / "h.sock"
    server = start_host(
        "--model", str(tiny_model),
        "--unix", str(socket_path),
        f"--api-key-file={keys}",
        f"--cors-origins={APP_ORIGIN}",
        "--allowed-hosts=mlxhost.test",
        env={"MLXHOST_API_KEY": KEY},
    )
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def exposed(tiny_model: Path) -> Iterator[RunningHost]:
    """A host bound beyond loopback, without a key, that speaks HTTP/2 as well."""
    server = start_host("--model", str(tiny_model), "--host", "0.0.0.0", "--http2")
    yield server
    server.stop()


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()["error"]  # type: ignore[no-any-return]


# -- credentials ------------------------------------------------------------------------------


def test_the_unix_socket_needs_no_key(keyed: RunningHost) -> None:
    transport = httpx.HTTPTransport(uds=str(keyed.unix))
    with httpx.Client(base_url="http://mlxhost", transport=transport, timeout=30) as http:
        assert http.post(CHAT, json=chat()).status_code == 200
        assert http.get("/admin/state").status_code == 200
        assert http.get("/health").json()["workers"]


def test_in_process_honours_the_api_key(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--in-process", env={"MLXHOST_API_KEY": KEY})
    try:
        with httpx.Client(base_url=server.url or "", timeout=30) as http:
            assert http.get("/v1/models").status_code == 401
            assert http.post(CHAT, json=chat()).status_code == 401
            assert http.get("/v1/models", headers={"x-api-key": KEY}).status_code == 200
            assert http.get("/health").json() == {"status": "ok"}
            assert http.get("/health", headers={"x-api-key": KEY}).json()["engine"]
            assert http.get("/v1/models", headers={"host": "evil.test"}).status_code == 403
            assert http.post(CHAT, content=b"{}", headers={"x-api-key": KEY}).status_code == 415
    finally:
        server.stop()


def test_an_unreadable_key_file_stops_startup_naming_the_option(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="api_key_file"):
        start_host("--model", str(tiny_model), f"--api-key-file={tmp_path / 'missing'}")


def test_binding_beyond_loopback_without_a_key_warns(exposed: RunningHost) -> None:
    assert any("without an API key" in line for line in exposed.log), exposed.log
    # No Host list beyond loopback: a reverse proxy's name is fine.
    port = netloc(exposed).split(":")[1]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        assert http.get("/v1/models", headers={"host": "models.example"}).status_code == 200


# -- HTTP version -----------------------------------------------------------------------------


def test_http2_is_refused_unless_configured(exposed: RunningHost) -> None:
    with httpx.Client(base_url=exposed.url or "", http1=False, http2=True, timeout=30) as http:
        response = http.post(CHAT, json=chat())
        assert response.http_version == "HTTP/2" and response.status_code == 200


def test_http2_is_off_by_default(keyed: RunningHost) -> None:
    # Each on a new connection: the refusal races the request's body (Hypercorn drops a connection
    # that sends DATA after its stream's answer), and a broken pipe instead of this answer is a bug.
    for _ in range(20):
        with httpx.Client(base_url=keyed.url or "", http1=False, http2=True, timeout=30) as http:
            response = http.post(CHAT, json=chat(), headers={"x-api-key": KEY})
        assert response.status_code == 505 and error_of(response)["code"] == "http2_disabled"


def test_an_http2_refusal_reaches_a_client_still_sending(exposed: RunningHost) -> None:
    body = json.dumps(chat("x" * 200_000)).encode()  # more than one flow-control window
    with httpx.Client(base_url=exposed.url or "", http1=False, http2=True, timeout=30) as http:
        for _ in range(5):
            response = http.post(CHAT, content=body, headers={"content-type": "text/plain"})
            assert response.status_code == 415 and response.http_version == "HTTP/2"
        assert http.post(CHAT, json=chat()).status_code == 200  # the same connection serves on


# -- client text is bounded and inert ---------------------------------------------------------


def parent_rss(server: RunningHost) -> int:
    with server.http() as http:
        pid = http.get("/admin/state").json()["host"]["pid"]
    return psutil.Process(pid).memory_info().rss  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_megabyte_field_name_is_quoted_short_and_not_kept(exposed: RunningHost) -> None:
    with exposed.http(timeout=60) as http:
        name = "\x1b]0;owned\x07" + "k" * (1 << 20)
        body = json.dumps({**chat(), name: 1}).encode()
        for _ in range(5):  # the allocator's first growth is not a leak
            http.post(CHAT, content=body, headers={"content-type": "application/json"})
        before = parent_rss(exposed)
        for _ in range(100):
            response = http.post(CHAT, content=body, headers={"content-type": "application/json"})
            assert response.status_code == 400
            assert len(response.content) < 1024
            assert not any(b < 0x20 for b in response.content)
            assert "unsupported parameter" in error_of(response)["message"]
        grown = parent_rss(exposed) - before
        print(f"\nparent RSS after 100 one-megabyte field names: {grown / (1 << 20):+.1f} MiB")
        assert grown < 10 << 20, f"the parent grew by {grown >> 20} MiB"
        state = http.get("/admin/state")
        assert len(state.content) < 1 << 20
        assert b"\x1b" not in state.content and b"\\u001b" not in state.content
        with http.stream("GET", "/admin/events", params={"after": 0}) as events:
            seen = b""
            for chunk in events.iter_bytes():
                seen += chunk
                if seen.count(b"session.closed") >= 100 or len(seen) > 8 << 20:
                    break
        assert seen.count(b"session.closed") >= 100
        assert b"\x1b" not in seen and b"\\u001b" not in seen
        assert len(seen) < 2 << 20


# -- prompt caches are per caller -------------------------------------------------------------


def cached(server: RunningHost, key: str, prompt: str, **extra: Any) -> int:
    with httpx.Client(base_url=server.url or "", timeout=60, headers={"x-api-key": key}) as http:
        response = http.post(CHAT, json=chat(prompt, max_tokens=2, temperature=0, **extra))
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens_details"]["cached_tokens"]  # type: ignore[no-any-return]


def test_one_caller_never_sees_another_callers_cached_prefix(keyed: RunningHost) -> None:
    secret, other, another = (f"{word} {uuid.uuid4().hex} " * 4 for word in ("secret", "unrelated", "more"))
    cached(keyed, KEY, secret)  # warms KEY's scope
    reused = cached(keyed, KEY, secret)
    assert reused > 20  # the same caller reuses nearly all of it
    # What another caller shares with its own past requests: the chat template's first tokens.
    cached(keyed, FILE_KEYS[0], other)
    own = cached(keyed, FILE_KEYS[0], another)
    assert own < 10
    assert cached(keyed, FILE_KEYS[0], secret) == own  # and nothing of KEY's prompt
    assert cached(keyed, FILE_KEYS[0], secret) == reused  # its own repeat is cached as usual
    # A salt splits one caller's scope further.
    assert cached(keyed, KEY, secret, cache_salt="tenant-a") == 0
    assert cached(keyed, KEY, secret, cache_salt="tenant-a") == reused
    assert cached(keyed, KEY, secret, cache_salt="tenant-b") == 0


def test_a_client_cannot_name_its_own_cache_scope(keyed: RunningHost) -> None:
    prompt = f"private {uuid.uuid4().hex} " * 4
    cached(keyed, KEY, prompt, cache_salt="private")
    with httpx.Client(base_url=keyed.url or "", timeout=60) as http:
        # Another key's holder who forges the internal header with KEY's scope gets nothing of it.
        forged = hashlib.sha256(KEY.encode()).hexdigest()
        response = http.post(
            CHAT,
            json=chat(prompt, max_tokens=2, cache_salt="private"),
            headers={"x-api-key": FILE_KEYS[1], "x-mlxhost-cache-scope": forged},
        )
    assert response.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0

