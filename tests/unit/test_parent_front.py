"""Who gets past the parent's front door: Host, Origin, credentials and content type, in-process.

The checks are the real app's (`runtime/guard.py`, the routes, the error handlers), driven through
httpx's `ASGITransport` as a TCP client of 127.0.0.1:8080 would reach them; the workers behind
are fakes (`tests.parent_fake`). What needs a real server (the Unix socket, HTTP/2, binding, the
`--in-process` host) or a real worker (prompt caches per caller) is in tests/e2e/test_security.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlxhost.config import Settings
from mlxhost.testing import ADMIN_TOKEN
from tests.parent_fake import base_url, client, parent, sdk_client

CHAT = "/v1/chat/completions"
KEY, FILE_KEYS = "key-from-env", ("key-from-file-1", "key-from-file-2")
APP_ORIGIN = "http://app.test:3000"
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}


def chat(content: str = "Hello", max_tokens: int = 3, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # one event loop for the module: its tests share one parent


@pytest.fixture(scope="module")
async def keyed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Starlette]:
    """A parent with API keys from the environment and a file, a listed origin and a listed host."""
    keys = tmp_path_factory.mktemp("keys") / "keys"
    keys.write_text("# one key a line\n" + "\n".join(FILE_KEYS) + "\n")
    keys.chmod(0o600)
    settings = Settings(
        api_key=KEY, api_key_file=str(keys), cors_origins=(APP_ORIGIN,), allowed_hosts=("mlxhost.test",)
    )
    async with parent(settings) as app:
        yield app


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()["error"]  # type: ignore[no-any-return]


# -- credentials ------------------------------------------------------------------------------


@pytest.mark.anyio
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
async def test_v1_without_a_valid_key_is_a_401(keyed: Starlette, headers: dict[str, str]) -> None:
    async with client(keyed) as http:
        paths = (("GET", "/v1/models"), ("GET", "/v1/models/tiny"), ("POST", CHAT), ("POST", "/v1/embeddings"))
        # The rerank aliases outside /v1 are the API's too.
        for method, path in (*paths, ("POST", "/rerank"), ("POST", "/v2/rerank")):
            encoded = {k: v.encode() for k, v in headers.items()}  # UTF-8 bytes on the wire
            response = await http.request(method, path, headers=encoded, json=chat())
            assert response.status_code == 401, (path, response.text)
            assert error_of(response)["code"] == "invalid_api_key"


@pytest.mark.anyio
@pytest.mark.parametrize("key", [KEY, *FILE_KEYS])
async def test_every_configured_key_works_as_bearer_and_as_x_api_key(keyed: Starlette, key: str) -> None:
    sdk = openai.AsyncOpenAI(base_url=f"{base_url(keyed)}/v1", api_key=key, http_client=sdk_client(keyed))
    async with sdk:
        answer = await sdk.chat.completions.create(model="tiny", messages=chat()["messages"], max_tokens=2)
        assert answer.choices
    async with client(keyed) as http:
        assert (await http.get("/v1/models", headers={"x-api-key": key})).status_code == 200


@pytest.mark.anyio
async def test_health_without_a_key_says_only_whether_it_serves(keyed: Starlette) -> None:
    async with client(keyed) as http:
        open_answer = await http.get("/health")
        assert (open_answer.status_code, open_answer.json()) == (200, {"status": "ok"})
        for headers in ({"x-api-key": KEY}, ADMIN):
            detail = (await http.get("/health", headers=headers)).json()
            assert detail["status"] == "ok" and detail["workers"][0]["pid"] > 0
            assert detail["workers"][0]["socket"]
            assert detail["workers"][0]["socket"] not in open_answer.text


@pytest.mark.anyio
async def test_the_admin_api_needs_its_token_and_not_an_api_key(keyed: Starlette) -> None:
    async with client(keyed) as http:
        assert (await http.get("/admin/state", headers={"authorization": f"Bearer {KEY}"})).status_code == 401
        refused = await http.get("/admin/state", headers={"authorization": "Bearer \u00e9".encode()})
        assert refused.status_code == 401 and error_of(refused)["code"] == "invalid_admin_token"
        assert (await http.get("/admin/state", headers=ADMIN)).status_code == 200


# -- Host and Origin: no browser drives the host ----------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "host",
    [
        "evil.example", "evil.example:{port}", "127.0.0.1:1", "localhost", "127.0.0.1.evil.example:{port}",
        "\x1b[2J",
    ],  # fmt: skip
)
@pytest.mark.parametrize("path", ["/v1/models", "/health", "/metrics", "/admin/state", "/openapi.json"])
async def test_a_host_header_that_does_not_name_the_server_is_a_403(
    keyed: Starlette, host: str, path: str
) -> None:
    value = host.format(port=keyed.state.parent.settings.port)
    async with client(keyed) as http:
        response = await http.get(path, headers={"host": value, "x-api-key": KEY})
    assert response.status_code == 403, response.text
    assert json.loads(response.content)["error"]["code"] == "host_not_allowed"
    assert not any(b"\x1b" in part for part in (response.content, *(v for _, v in response.headers.raw)))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "mlxhost.test", "mlxhost.test:443"]
)
async def test_the_bind_and_allowed_hosts_are_served(keyed: Starlette, host: str) -> None:
    value = host.format(port=keyed.state.parent.settings.port)
    async with client(keyed) as http:
        response = await http.get("/health", headers={"host": value, "connection": "close"})
    assert response.status_code == 200, response.text


@pytest.mark.anyio
@pytest.mark.parametrize("origin", ["http://evil.example", "null", "http://app.test:3001", "http://localhost"])
async def test_a_browser_origin_that_is_not_listed_is_a_403(keyed: Starlette, origin: str) -> None:
    async with client(keyed) as http:
        for method, path in (("GET", "/health"), ("GET", "/metrics"), ("POST", CHAT), ("OPTIONS", CHAT)):
            headers = {"origin": origin, "x-api-key": KEY, "access-control-request-method": "POST"}
            response = await http.request(method, path, headers=headers, json=chat())
            assert response.status_code == 403, (method, path, response.text)
            assert error_of(response)["code"] == "origin_not_allowed"
            assert "access-control-allow-origin" not in response.headers


@pytest.mark.anyio
async def test_a_listed_origin_gets_cors(keyed: Starlette) -> None:
    async with client(keyed) as http:
        preflight = await http.options(
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
        credentialed = {"origin": APP_ORIGIN, "authorization": f"Bearer {KEY}"}
        answer = await http.post(CHAT, json=chat(), headers=credentialed)
        assert answer.status_code == 200
        assert answer.headers["access-control-allow-origin"] == APP_ORIGIN
        assert "x-mlxhost-session" in answer.headers["access-control-expose-headers"]
        # A refusal says why to the page that may read it.
        refused = await http.post(CHAT, json=chat(), headers={"origin": APP_ORIGIN})
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP_ORIGIN


# -- content type -----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    "content_type",
    [
        None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
        "application/jsonx",
    ],  # fmt: skip
)
@pytest.mark.parametrize("path", [CHAT, "/v1/completions"])
async def test_a_body_that_is_not_json_is_a_415(
    keyed: Starlette, content_type: str | None, path: str
) -> None:
    headers = {"x-api-key": KEY} | ({"content-type": content_type} if content_type else {})
    async with client(keyed) as http:
        response = await http.post(path, content=json.dumps(chat()).encode(), headers=headers)
    assert response.status_code == 415, response.text
    error = error_of(response)
    assert error["code"] == "unsupported_media_type" and error["param"] == "content-type"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
async def test_json_bodies_pass(keyed: Starlette, content_type: str) -> None:
    async with client(keyed) as http:
        headers = {"x-api-key": KEY, "content-type": content_type}
        response = await http.post(CHAT, content=json.dumps(chat()).encode(), headers=headers)
    assert response.status_code == 200, response.text


# -- client text is bounded and inert ---------------------------------------------------------


@pytest.mark.anyio
async def test_a_model_name_with_control_characters_comes_back_escaped(keyed: Starlette) -> None:
    async with client(keyed, headers={"x-api-key": KEY}) as http:
        response = await http.get("/v1/models/%1b[2J" + "m" * 2000)
        assert response.status_code == 404
        assert len(response.content) < 1024 and not any(b < 0x20 for b in response.content)
        missing = await http.get("/nowhere/%1b]0;t%07" + "p" * 6000)
        assert missing.status_code in (404, 414, 431) and len(missing.content) < 1024


@pytest.mark.anyio
async def test_admin_paths_quote_ids_short_and_inert(keyed: Starlette) -> None:
    async with client(keyed, headers=ADMIN) as http:
        sessions = "/admin/sessions/%1b]0;x%07" + "s" * 3000 + "/cancel"
        for path in (sessions, "/admin/workers/%1b[2J" + "w" * 3000 + "/restart"):
            response = await http.post(path)
            assert response.status_code == 404, response.text
            assert len(response.content) < 1024 and not any(b < 0x20 for b in response.content)
