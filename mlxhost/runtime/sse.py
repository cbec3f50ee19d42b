"""A server-sent-events response: the framing of `mlxhost.wire.sse`, and a guard on idle readers.

Its producer yields frames (bytes), None when a heartbeat is due (it times its own quiet, as it
knows what it waits on), and at most one `End` with the reason, after which nothing more is sent.
The response opens with `retry:`. A producer that stops without an `End` was cut short (the
host is stopping under it): the client sees no `event: end` and knows to reconnect.

The hub drops a lagging subscriber without waiting for it, but the connection would stay: a write
to a client that never reads waits forever. Each write here waits at most `idle_timeout`; past it
the response ends, and the producer is closed (which unsubscribes it, or frees its tail slot).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Message, Send

from mlxhost.wire.sse import HEARTBEAT_FRAME, RETRY_FRAME, end_frame

__all__ = ["End", "EventStream", "Frames"]


@dataclass(frozen=True)
class End:
    reason: str  # one of wire.sse's END_* reasons


Frames = AsyncIterator["bytes | End | None"]


class EventStream(StreamingResponse):
    def __init__(self, frames: Frames, idle_timeout: float) -> None:
        self._frames = frames
        super().__init__(
            self._framed(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
        )
        self._idle_timeout = idle_timeout

    async def _framed(self) -> AsyncIterator[bytes]:
        yield RETRY_FRAME
        async for item in self._frames:
            if item is None:
                yield HEARTBEAT_FRAME
            elif isinstance(item, End):
                yield end_frame(item.reason)
                return
            else:
                yield item

    async def stream_response(self, send: Send) -> None:
        async def guarded(message: Message) -> None:
            with anyio.fail_after(self._idle_timeout):
                await send(message)

        try:
            await super().stream_response(guarded)
        except TimeoutError:
            pass  # the client stopped reading: end the response, and with it the connection
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            aclose = getattr(self._frames, "aclose", None)
            if aclose is not None:
                await aclose()  # unsubscribes, gives a tail slot back
