"""The front door: who may call the host at all, checked before any route runs.

One ASGI middleware serves the parent and `--in-process` alike, so both modes answer the same
requests the same way. In order, for each HTTP request:

    HTTP/2 without `http2`                     505  http2_disabled
    Host not naming this server (TCP)          403  host_not_allowed   (DNS rebinding)
    a browser Origin not in `cors_origins`     403  origin_not_allowed (cross-site requests)
    /v1 without a valid key, when keys are set 401  invalid_api_key  (and /rerank, /v2/rerank)
    /admin without the admin token (TCP)       401  invalid_admin_token
    /health without a key, when keys are set   200  its status only (no paths, pids, sockets)
    a body that is not application/json        415  unsupported_media_type

The Unix socket is exempt from the Host, Origin and credential checks: it is 0600, so only its
owner can connect, and no browser can. Requests that pass carry `x-mlxhost-cache-scope`, the
caller's prompt-cache namespace, and no other `x-mlxhost-*` header a client sent.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from mlxhost.config import ConfigError, Settings
from mlxhost.runtime.error_responses import error_response
from mlxhost.wire.dialect import Dialect
from mlxhost.wire.errors import (
    APIError,
    Forbidden,
    HTTPVersionNotSupported,
    Unauthorized,
    UnsupportedMediaType,
)
from mlxhost.wire.headers import CACHE_SCOPE_HEADER, INTERNAL_PREFIX, SESSION_HEADER
from mlxhost.wire.inert import excerpt

__all__ = [
    "DETAIL_KEY", "FrontDoor", "api_keys", "front_door", "health_detail", "is_loopback", "warn_if_exposed"
]

logger = logging.getLogger("mlxhost")

_INTERNAL_PREFIX = INTERNAL_PREFIX.encode()
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
_JSON_TYPES = (b"application/json",)
_BODY_METHODS = frozenset({"POST"})  # the only method with a body that any route takes
# The API's paths: /v1, and where rerank clients look for it (Jina's /rerank, Cohere's /v2/rerank).
_API_PREFIXES, _API_PATHS = ("/v1/", "/v2/"), frozenset({"/v1", "/v2", "/rerank"})
_DRAIN_BYTES, _DRAIN_SECONDS = 1 << 20, 5.0  # what a refused HTTP/2 request may still send


# The scope key that says whether a /health caller may see the detail (models' paths, pids,
# sockets). A liveness answer stays open to all: load balancers probe without credentials.
DETAIL_KEY = "mlxhost.health_detail"


def health_detail(scope: Scope) -> bool:
    """Whether this /health request may see more than its status. Behind no front door (a
    worker's private socket): yes."""
    return bool(scope.get(DETAIL_KEY, True))


def _digest(secret: bytes) -> str:
    # Keys are compared as digests: a dict lookup on a hash leaks nothing useful about a key
    # through timing, and the digest doubles as the caller's prompt-cache scope.
    return hashlib.sha256(secret).hexdigest()


@dataclass(frozen=True)
class Credentials:
    api_keys: frozenset[str]  # digests of the accepted API keys; empty: /v1 is open
    admin_token: str | None  # digest of the admin token; None: /admin is open (tests, in-process)


class FrontDoor:
    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: Settings,
        api_keys: Iterable[str] = (),
        admin_token: str | None = None,
    ) -> None:
        self.app = app
        self.http2 = settings.http2
        self.loopback = is_loopback(settings.host)
        self.allowed_hosts = frozenset(h.lower().rstrip(".") for h in settings.allowed_hosts)
        self.cors_origins = frozenset(settings.cors_origins)
        self.credentials = Credentials(
            frozenset(_digest(k.encode()) for k in api_keys),
            _digest(admin_token.encode()) if admin_token else None,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            scope = self._admit(scope)
        except APIError as error:
            response = error_response(error, Dialect.of_path(scope["path"]))
            headers = dict(scope["headers"])
            if _declares_body(headers):
                if scope.get("http_version") == "2":
                    await _drain(receive)
                else:
                    # The body is never read, so the connection cannot carry another request; closing
                    # it also stops a client that is still sending, which then reads this answer.
                    response.headers["connection"] = "close"
            origin = headers.get(b"origin")
            if origin is not None and not isinstance(error, Forbidden):
                # A listed site must be able to read why it was refused (CORS runs further in).
                response.headers["access-control-allow-origin"] = origin.decode("latin-1")
                response.headers["vary"] = "Origin"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _admit(self, scope: Scope) -> Scope:
        """The scope to serve, with the caller's cache scope; or the refusal, raised."""
        headers: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # the first of a repeated header counts
        unix = scope.get("server") is None  # Hypercorn gives no server address on a Unix socket
        if scope.get("http_version") == "2" and not self.http2:
            raise HTTPVersionNotSupported(
                "HTTP/2 is off on this server (the http2 option); use HTTP/1.1", code="http2_disabled"
            )
        path: str = scope["path"]
        if not unix:
            self._check_host(headers.get(b"host"), scope["server"][1])
            self._check_origin(headers.get(b"origin"))
        preflight = scope["method"] == "OPTIONS" and b"origin" in headers
        cache_scope = None
        if not preflight:  # browsers send no credentials with a CORS preflight
            if _is_api(path):
                cache_scope = self._check_api_key(headers, unix)
            elif path.startswith("/admin/") and not unix:
                self._check_admin_token(headers)
            if scope["method"] in _BODY_METHODS:
                _check_json(headers)
        kept = [(n, v) for n, v in scope["headers"] if not n.startswith(_INTERNAL_PREFIX)]
        if cache_scope:
            kept.append((CACHE_SCOPE_HEADER.encode(), cache_scope.encode()))
        admitted = {**scope, "headers": kept}
        if path == "/health":
            admitted[DETAIL_KEY] = unix or not self.credentials.api_keys or self._credentialed(headers)
        return admitted

    def _credentialed(self, headers: dict[bytes, bytes]) -> bool:
        """Whether the request carries a valid API key or the admin token."""
        key = _presented_key(headers)
        if key is not None and _digest(key) in self.credentials.api_keys:
            return True
        token = _bearer(headers.get(b"authorization"))
        return token is not None and _digest(token) == self.credentials.admin_token

    def _check_host(self, host: bytes | None, port: int) -> None:
        if host is None or not (self.loopback or self.allowed_hosts):
            return  # HTTP/1.0 without Host is no browser; beyond loopback without a list, any
        text = host.decode("latin-1").lower()
        name, given_port = _split_host(text)
        if name in self.allowed_hosts:
            return
        if self.loopback and name in LOOPBACK_NAMES:
            if given_port == port or (given_port is None and port == 80):
                return
        raise Forbidden(
            f"the Host header '{excerpt(text)}' does not name this server; if clients should reach "
            "it by that name, add it to the allowed_hosts option",
            param="host",
            code="host_not_allowed",
        )

    def _check_origin(self, origin: bytes | None) -> None:
        if origin is None:
            return
        text = origin.decode("latin-1")
        if text in self.cors_origins or "*" in self.cors_origins:
            return
        raise Forbidden(
            f"requests from the web origin '{excerpt(text)}' are not allowed; list it in the "
            "cors_origins option to let that site call this server",
            param="origin",
            code="origin_not_allowed",
        )

    def _check_api_key(self, headers: dict[bytes, bytes], unix: bool) -> str | None:
        """The caller's cache scope: its key's digest, or None without a key."""
        key = _presented_key(headers)
        if key is None:
            if self.credentials.api_keys and not unix:
                raise Unauthorized(
                    "this API needs an API key: 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                    code="invalid_api_key",
                )
            return None
        digest = _digest(key)
        if digest in self.credentials.api_keys:
            return digest
        if self.credentials.api_keys and not unix:
            raise Unauthorized("the API key is not valid for this server", code="invalid_api_key")
        return None  # keys are not checked here: an unknown key shares the common scope

    def _check_admin_token(self, headers: dict[bytes, bytes]) -> None:
        if self.credentials.admin_token is None:
            return
        token = _bearer(headers.get(b"authorization"))
        if token is None or _digest(token) != self.credentials.admin_token:
            raise Unauthorized(
                "the admin API needs 'Authorization: Bearer <admin token>' on TCP (the token is in "
                "the host's runtime directory; `mlxhost status` and `mlxhost tui` find it)",
                code="invalid_admin_token",
            )


def _bearer(value: bytes | None) -> bytes | None:
    if value is None:
        return None
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer" or not token.strip():
        return None
    return token.strip()


def _presented_key(headers: dict[bytes, bytes]) -> bytes | None:
    """The key a client presented, or None. A malformed header is no key: a 401 where keys count."""
    authorization = headers.get(b"authorization")
    if authorization is not None:
        return _bearer(authorization) or b"\x00malformed"
    key = headers.get(b"x-api-key")
    if key is not None:
        return key.strip() or b"\x00malformed"
    return None


def _declares_body(headers: dict[bytes, bytes]) -> bool:
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"").strip() not in (b"", b"0")


async def _drain(receive: Receive) -> None:
    """Read an HTTP/2 request's body, up to a bound, before refusing it.

    Hypercorn 0.18 drops the whole HTTP/2 connection when DATA arrives for a stream whose answer
    is complete (pgjones/hypercorn#334, unreleased), so a refusal sent while the client still
    sends would reach it as a broken pipe instead of this answer. A body past the bound, or one
    that stalls, is the sender's own loss: only its connection is dropped.
    """
    read = 0
    with anyio.move_on_after(_DRAIN_SECONDS):
        while read <= _DRAIN_BYTES:
            message = await receive()
            read += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                return


def _is_api(path: str) -> bool:
    """Whether `path` is the API's, which API keys guard: /v1, and the rerank aliases beside it."""
    return path.startswith(_API_PREFIXES) or path in _API_PATHS


def _check_json(headers: dict[bytes, bytes]) -> None:
    if not _declares_body(headers):
        return
    media_type = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    if media_type in _JSON_TYPES or (media_type.startswith(b"application/") and media_type.endswith(b"+json")):
        return
    given = excerpt(media_type.decode("latin-1")) if media_type else "none"
    raise UnsupportedMediaType(
        f"request bodies must be JSON: send 'Content-Type: application/json' (got {given})",
        param="content-type",
    )


def _split_host(host: str) -> tuple[str, int | None]:
    """'[::1]:8080' -> ('[::1]', 8080); 'localhost.' -> ('localhost', None); bad port -> -2."""
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name, port = name + "]", rest[1:] if rest.startswith(":") else None
    else:
        name, sep, port_text = host.rpartition(":")
        name, port = (name, port_text) if sep else (host, None)
    if port is None or port == "":
        return name.rstrip("."), None
    return name.rstrip("."), int(port) if port.isascii() and port.isdigit() else -2


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def api_keys(settings: Settings) -> frozenset[str]:
    """The API keys: `api_key`, and one per line of `api_key_file` (blank lines and #comments skipped)."""
    keys = {settings.api_key} if settings.api_key else set()
    if settings.api_key_file:
        path = Path(settings.api_key_file).expanduser()
        try:
            text = path.read_text()
            mode = path.stat().st_mode
        except OSError as exc:
            raise ConfigError(f"option 'api_key_file': cannot read {path}: {exc.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("the API key file %s can be read by other users (chmod 600 it)", path)
        file_keys = {line.strip() for line in text.splitlines()}
        keys |= {k for k in file_keys if k and not k.startswith("#")}
        if not keys:
            raise ConfigError(f"option 'api_key_file': {path} holds no key")
    return frozenset(keys)


def front_door(settings: Settings, keys: Iterable[str] = (), admin_token: str | None = None) -> list[Middleware]:
    """The middleware stack for a public app: the checks above, then CORS for listed origins."""
    stack = [Middleware(FrontDoor, settings=settings, api_keys=tuple(keys), admin_token=admin_token)]
    if settings.cors_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["authorization", "content-type", "x-api-key", "last-event-id"],
                expose_headers=[SESSION_HEADER, "retry-after"],
                max_age=600,
            )
        )
    return stack


def warn_if_exposed(settings: Settings, keys: frozenset[str]) -> None:
    """Say so at start when the API is reachable beyond this machine without a key."""
    if settings.no_tcp or is_loopback(settings.host):
        return
    if not keys:
        logger.warning(
            "listening on %s without an API key: anyone who can reach this address can use the "
            "models. Set MLXHOST_API_KEY (or api_key_file), or bind 127.0.0.1.",
            settings.host,
        )
