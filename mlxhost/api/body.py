"""Reading a request body with a size limit, before anything parses it."""

from __future__ import annotations

from starlette.requests import Request

from .errors import PayloadTooLarge

__all__ = ["read_body"]


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _too_large(limit: int) -> PayloadTooLarge:
    # The rest of the body is never read, so the connection cannot carry another request.
    return PayloadTooLarge(
        f"the request body is over this server's limit of {limit} bytes", headers={"connection": "close"}
    )
