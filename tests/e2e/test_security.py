"""What a hostile or careless caller can do to the host: nothing that reaches another caller.

Only intended callers get in (Host, Origin, credentials, content type, HTTP version), client text
comes back short and inert, and one caller cannot observe another's cached prompt. What a caller
can make the host do before admission is in test_bounded_work.py.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from mlxhost.testing import ADMIN_TOKEN, RunningHost, start_host
from tests.e2e.raw_http import netloc, raw

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


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()["error"]  # type: ignore[no-any-return]


# -- credentials ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": "Basic a2V5OmtleQ=="},
        {"authorization": "Bearer"},
        {"x-api-key": "wrong"},
        {"authorization": "Bearer cl\u00e9-\u00fc"},  # not ASCII: was a 500 with a traceback
    ],
)
def test_v1_without_a_valid_key_is_a_401(keyed: RunningHost, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        for method, path in (("GET", "/v1/models"), ("GET", "/v1/models/tiny"), ("POST", CHAT)):
            encoded = {k: v.encode() for k, v in headers.items()}  # UTF-8 bytes on the wire
            response = http.request(method, path, headers=encoded, json=chat())
            assert response.status_code == 401, (path, response.text)
            assert error_of(response)["code"] == "invalid_api_key"


@pytest.mark.parametrize("key", [KEY, *FILE_KEYS])
def test_every_configured_key_works_as_bearer_and_as_x_api_key(keyed: RunningHost, key: str) -> None:
    with openai.OpenAI(base_url=f"{keyed.url}/v1", api_key=key) as client:
        assert client.chat.completions.create(model="tiny", messages=chat()["messages"], max_tokens=2).choices
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        assert http.get("/v1/models", headers={"x-api-key": key}).status_code == 200


def test_the_unix_socket_needs_no_key(keyed: RunningHost) -> None:
    transport = httpx.HTTPTransport(uds=str(keyed.unix))
    with httpx.Client(base_url="http://mlxhost", transport=transport, timeout=30) as http:
        assert http.post(CHAT, json=chat()).status_code == 200
        assert http.get("/admin/state").status_code == 200


def test_health_without_a_key_says_only_whether_it_serves(keyed: RunningHost) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        open_answer = http.get("/health")
        assert (open_answer.status_code, open_answer.json()) == (200, {"status": "ok"})
        assert str(keyed.unix) not in open_answer.text
        for headers in ({"x-api-key": KEY}, {"authorization": f"Bearer {ADMIN_TOKEN}"}):
            detail = http.get("/health", headers=headers).json()
            assert detail["status"] == "ok" and detail["workers"][0]["pid"] > 0
            assert detail["workers"][0]["socket"]
    transport = httpx.HTTPTransport(uds=str(keyed.unix))
    with httpx.Client(base_url="http://mlxhost", transport=transport, timeout=30) as http:
        assert http.get("/health").json()["workers"]


def test_the_admin_api_needs_its_token_and_not_an_api_key(keyed: RunningHost) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        assert http.get("/admin/state", headers={"authorization": f"Bearer {KEY}"}).status_code == 401
        refused = http.get("/admin/state", headers={"authorization": "Bearer \u00e9".encode()})
        assert refused.status_code == 401 and error_of(refused)["code"] == "invalid_admin_token"
        assert http.get("/admin/state", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}).status_code == 200


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


def test_binding_beyond_loopback_without_a_key_warns(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--host", "0.0.0.0")
    try:
        assert any("without an API key" in line for line in server.log), server.log
        # No Host list beyond loopback: a reverse proxy's name is fine.
        port = netloc(server).split(":")[1]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert http.get("/v1/models", headers={"host": "models.example"}).status_code == 200
    finally:
        server.stop()


# -- Host and Origin: no browser drives the host ----------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost", "127.0.0.1.evil.example:{port}", "\x1b[2J"],
)
@pytest.mark.parametrize("path", ["/v1/models", "/health", "/metrics", "/admin/state", "/openapi.json"])
def test_a_host_header_that_does_not_name_the_server_is_a_403(keyed: RunningHost, host: str, path: str) -> None:
    port = netloc(keyed).split(":")[1]
    value = host.format(port=port)
    answer = raw(keyed, f"GET {path} HTTP/1.1\r\nhost: {value}\r\nx-api-key: {KEY}\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
    body = answer.partition(b"\r\n\r\n")[2]
    assert json.loads(body)["error"]["code"] == "host_not_allowed"
    assert b"\x1b" not in answer


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "mlxhost.test", "mlxhost.test:443"])
def test_the_bind_and_allowed_hosts_are_served(keyed: RunningHost, host: str) -> None:
    port = netloc(keyed).split(":")[1]
    value = host.format(port=port)
    answer = raw(keyed, f"GET /health HTTP/1.1\r\nhost: {value}\r\nconnection: close\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://app.test:3001", "http://localhost"])
def test_a_browser_origin_that_is_not_listed_is_a_403(keyed: RunningHost, origin: str) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        for method, path in (("GET", "/health"), ("GET", "/metrics"), ("POST", CHAT), ("OPTIONS", CHAT)):
            headers = {"origin": origin, "x-api-key": KEY, "access-control-request-method": "POST"}
            response = http.request(method, path, headers=headers, json=chat())
            assert response.status_code == 403, (method, path, response.text)
            assert error_of(response)["code"] == "origin_not_allowed"
            assert "access-control-allow-origin" not in response.headers


def test_a_listed_origin_gets_cors(keyed: RunningHost) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        preflight = http.options(
            CHAT,
            headers={
                "origin": APP_ORIGIN,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200, preflight.text
        assert preflight.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        answer = http.post(CHAT, json=chat(), headers={"origin": APP_ORIGIN, "authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "x-mlxhost-session" in answer.headers["access-control-expose-headers"]
        # A refusal says why to the page that may read it.
        refused = http.post(CHAT, json=chat(), headers={"origin": APP_ORIGIN})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP_ORIGIN


# -- content type and HTTP version ------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"],
)
@pytest.mark.parametrize("path", [CHAT, "/v1/completions"])
def test_a_body_that_is_not_json_is_a_415(keyed: RunningHost, content_type: str | None, path: str) -> None:
    headers = {"x-api-key": KEY} | ({"content-type": content_type} if content_type else {})
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        response = http.post(path, content=json.dumps(chat()).encode(), headers=headers)
    assert response.status_code == 415, response.text
    error = error_of(response)
    assert error["code"] == "unsupported_media_type" and error["param"] == "content-type"


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"])
def test_json_bodies_pass(keyed: RunningHost, content_type: str) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30) as http:
        response = http.post(CHAT, content=json.dumps(chat()).encode(), headers={"x-api-key": KEY, "content-type": content_type})
    assert response.status_code == 200, response.text


def test_http2_is_refused_unless_configured(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--http2")
    try:
        with httpx.Client(base_url=server.url or "", http1=False, http2=True, timeout=30) as http:
            response = http.post(CHAT, json=chat())
            assert response.http_version == "HTTP/2" and response.status_code == 200
    finally:
        server.stop()


def test_http2_is_off_by_default(keyed: RunningHost) -> None:
    with httpx.Client(base_url=keyed.url or "", http1=False, http2=True, timeout=30) as http:
        response = http.post(CHAT, json=chat(), headers={"x-api-key": KEY})
    assert response.status_code == 505 and error_of(response)["code"] == "http2_disabled"


# -- client text is bounded and inert ---------------------------------------------------------


def parent_rss(server: RunningHost) -> int:
    with server.http() as http:
        pid = http.get("/admin/state").json()["host"]["pid"]
    return psutil.Process(pid).memory_info().rss  # type: ignore[no-any-return]


@pytest.mark.slow
def test_a_megabyte_field_name_is_quoted_short_and_not_kept(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model))
    try:
        with server.http(timeout=60) as http:
            name = "\x1b]0;owned\x07" + "k" * (1 << 20)
            body = json.dumps({**chat(), name: 1}).encode()
            for _ in range(5):  # the allocator's first growth is not a leak
                http.post(CHAT, content=body, headers={"content-type": "application/json"})
            before = parent_rss(server)
            for _ in range(100):
                response = http.post(CHAT, content=body, headers={"content-type": "application/json"})
                assert response.status_code == 400
                assert len(response.content) < 1024
                assert not any(b < 0x20 for b in response.content)
                assert "unsupported parameter" in error_of(response)["message"]
            grown = parent_rss(server) - before
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
    finally:
        server.stop()


def test_a_model_name_with_control_characters_comes_back_escaped(keyed: RunningHost) -> None:
    with httpx.Client(base_url=keyed.url or "", timeout=30, headers={"x-api-key": KEY}) as http:
        response = http.get("/v1/models/%1b[2J" + "m" * 2000)
        assert response.status_code == 404
        assert len(response.content) < 1024 and not any(b < 0x20 for b in response.content)
        missing = http.get("/nowhere/%1b]0;t%07" + "p" * 6000)
        assert missing.status_code in (404, 414, 431) and len(missing.content) < 1024


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


def test_admin_paths_quote_ids_short_and_inert(keyed: RunningHost) -> None:
    with keyed.http() as http:
        for path in ("/admin/sessions/%1b]0;x%07" + "s" * 3000 + "/cancel", "/admin/workers/%1b[2J" + "w" * 3000 + "/restart"):
            response = http.post(path)
            assert response.status_code == 404, response.text
            assert len(response.content) < 1024 and not any(b < 0x20 for b in response.content)
