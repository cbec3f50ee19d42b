"""Errors as HTTP responses: the handlers both the parent's app and the worker's app install.

Each answers in the dialect of the request's path (see wire.dialect), so an Anthropic client's
404 or 429 reads as Anthropic's, whichever process answered it.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxhost.wire.dialect import Dialect, error_body
from mlxhost.wire.errors import APIError, InternalError, MethodNotAllowed, NotFound
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

__all__ = ["EXCEPTION_HANDLERS", "error_response"]


def error_response(
    error: APIError, dialect: Dialect = Dialect.CHAT, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """`error` as a response in `dialect`, with its own headers (or `headers`, given)."""
    headers = error.headers if headers is None else headers
    return JSONResponse(error_body(error, dialect), status_code=error.status_code, headers=headers)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(exc, Dialect.of_path(request.url.path))


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    dialect = Dialect.of_path(request.url.path)
    # The method and path are the client's text: quoted short and inert.
    method, path = excerpt(request.method, 16), excerpt(request.url.path)
    if exc.status_code == 404:
        return error_response(NotFound(f"no route {method} {path}"), dialect)
    if exc.status_code == 405:
        return error_response(MethodNotAllowed(f"{method} is not allowed on {path}"), dialect, exc.headers)
    return error_response(APIError(excerpt(exc.detail, MESSAGE_CHARS)), dialect)


async def internal_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback after this handler answers; the client sees no details.
    error = InternalError("the server failed to handle this request")
    return error_response(error, Dialect.of_path(request.url.path))


EXCEPTION_HANDLERS = {APIError: api_error, HTTPException: http_error, Exception: internal_error}
