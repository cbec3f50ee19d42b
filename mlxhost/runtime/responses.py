"""Errors as HTTP responses: the handlers both the parent's app and the worker's app install."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxhost.wire.errors import APIError, InternalError, MethodNotAllowed, NotFound
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

__all__ = ["EXCEPTION_HANDLERS", "error_response"]


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status_code, headers=error.headers)


async def api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(exc)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    # The method and path are the client's text: quoted short and inert.
    method, path = excerpt(request.method, 16), excerpt(request.url.path)
    if exc.status_code == 404:
        return error_response(NotFound(f"no route {method} {path}"))
    if exc.status_code == 405:
        error = MethodNotAllowed(f"{method} is not allowed on {path}")
        return JSONResponse(error.body(), status_code=405, headers=exc.headers)
    return error_response(APIError(excerpt(exc.detail, MESSAGE_CHARS)))


async def internal_error(request: Request, exc: Exception) -> Response:
    # Starlette logs the traceback after this handler answers; the client sees no details.
    return error_response(InternalError("the server failed to handle this request"))


EXCEPTION_HANDLERS = {APIError: api_error, HTTPException: http_error, Exception: internal_error}
