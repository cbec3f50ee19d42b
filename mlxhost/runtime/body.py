"""Reading a request body with a size limit and a deadline, before anything parses it."""

from __future__ import annotations

import anyio
from starlette.requests import ClientDisconnect, Request

from mlxhost.wire.errors import ClientClosed, PayloadTooLarge, RequestTimeout

__all__ = ["read_body"]


async def read_body(request: Request, limit: int, timeout: float | None = None) -> bytes:
    """The whole body; 413 past `limit` bytes, 408 when it takes longer than `timeout` seconds.

    A client that trickles its body holds a connection and a task; the deadline bounds what such
    a client costs before any admission decision could turn it away.
    """
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    body = bytearray()
    try:
        with anyio.fail_after(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise _too_large(limit)
    except ClientDisconnect:
        raise ClientClosed("the client closed the connection before its body arrived") from None
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {timeout:g}s", headers={"connection": "close"}
        ) from None
    return bytes(body)


def _too_large(limit: int) -> PayloadTooLarge:
    # The rest of the body is never read, so the connection cannot carry another request.
    return PayloadTooLarge(
        f"the request body is over this server's limit of {limit} bytes", headers={"connection": "close"}
    )
