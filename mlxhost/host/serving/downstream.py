"""The client's side of a session: what was sent to it, and every send guarded by the idle timeout.

The worker's side is `mlxhost.host.workers.upstream`; the relay (`serving.relay`) passes the
answer from one to the other. A client that stops reading makes a send wait; past the idle timeout
the session is cancelled (`consumer_idle`). The errors the parent writes itself, whole or as a
stream's last frame, are worded in the session's dialect.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio
from starlette.types import Message, Send

from mlxhost.host.serving.sessions import CancelReason, Outcome, Session
from mlxhost.runtime.error_responses import error_response
from mlxhost.wire.dialect import Dialect, sse_error
from mlxhost.wire.errors import APIError, WorkerFailed
from mlxhost.wire.headers import SESSION_HEADER

__all__ = ["HOP_BY_HOP", "Downstream", "closing_sse_error"]

# Headers that belong to one connection, relayed in neither direction.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "date",  # Hypercorn writes its own
        "server",
    }
)
GOODBYE_TIMEOUT = 1.0  # sending a last error frame to a client must not hold up anything


class Downstream:
    """The client side of a session: what was sent, and sends guarded by the idle timeout."""

    def __init__(self, send: Send, session: Session, idle_timeout: float, dialect: Dialect) -> None:
        self._send = send
        self._session = session
        self._idle_timeout = idle_timeout
        self._dialect = dialect
        self.started = False
        self.ended = False
        self.event_stream = False

    async def start(
        self, status: int, headers: Iterable[tuple[str, str]], length: int | None = None
    ) -> None:
        raw = [
            (k.lower().encode("latin-1"), v.encode("latin-1"))
            for k, v in headers
            if k.lower() not in HOP_BY_HOP
        ]
        if length is not None:  # a body we hold whole goes out with its length, not chunked
            raw.append((b"content-length", str(length).encode()))
        raw.append((SESSION_HEADER.encode(), self._session.id.encode()))
        self.event_stream = any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in raw)
        await self._guarded({"type": "http.response.start", "status": status, "headers": raw})
        self.started = True
        self._session.status = status

    async def body(self, chunk: bytes, more: bool = True) -> None:
        await self._guarded({"type": "http.response.body", "body": chunk, "more_body": more})
        self.ended = not more

    async def error(self, error: APIError) -> Outcome:
        """Answer with `error` (nothing was sent yet) and return the outcome it means."""
        response = error_response(error, self._dialect)
        await self.start(response.status_code, response.headers.items(), len(response.body))
        await self.body(bytes(response.body), more=False)
        if isinstance(error, WorkerFailed):
            return Outcome.cancelled(CancelReason.WORKER_EXITED)
        return Outcome.failed(error.code or error.type, error.message)

    async def goodbye(self, error: APIError | None) -> None:
        """After a cancellation: tell the client why, if it is still there to read it."""
        if error is None or self.ended:
            return
        with anyio.move_on_after(GOODBYE_TIMEOUT):
            if not self.started:
                await self.error(error)
            elif self.event_stream:
                await self.body(closing_sse_error(error, self._dialect), more=False)

    async def _guarded(self, message: Message) -> None:
        # A client that stops reading makes send() wait; past the idle timeout it is let go.
        with anyio.move_on_after(self._idle_timeout) as guard:
            await self._send(message)
        if guard.cancelled_caught:
            self._session.cancel(CancelReason.CONSUMER_IDLE)
            await anyio.lowlevel.checkpoint()


def closing_sse_error(error: APIError, dialect: Dialect) -> bytes:
    """A stream's last frame, saying `error`, wherever the stream broke off."""
    # The blank line first ends whatever frame the stream was in the middle of.
    return b"\n\n" + sse_error(error, dialect)
