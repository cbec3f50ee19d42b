"""The event hub: what the host does, as a stream of numbered events for the admin API.

Each event is `{"seq": n, "at": unix_ms, "type": "...", ...}`; `seq` only grows. The hub keeps a
bounded ring of recent events so a client can resume after a reconnect (`Last-Event-ID`), and says
`stream.reset` when it asks for events older than the ring. Publishing never waits: a subscriber
whose buffer is full is dropped with a last `stream.lagged` event, so a slow dashboard never slows
generation.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["Event", "EventHub"]

Event = dict[str, Any]
RING_SIZE = 2048
SUBSCRIBER_BUFFER = 512


class EventHub:
    def __init__(self, ring_size: int = RING_SIZE, subscriber_buffer: int = SUBSCRIBER_BUFFER) -> None:
        self._seq = itertools.count(1)
        self.last_seq = 0
        self._ring: collections.deque[Event] = collections.deque(maxlen=ring_size)
        self._subscribers: set[MemoryObjectSendStream[Event]] = set()
        self._buffer = subscriber_buffer
        self.published = 0
        self.dropped_subscribers = 0

    def publish(self, type: str, **fields: Any) -> Event:
        event = {"seq": next(self._seq), "at": int(time.time() * 1000), "type": type, **fields}
        self.last_seq = event["seq"]
        self.published += 1
        self._ring.append(event)
        for send in list(self._subscribers):
            self._offer(send, event)
        return event

    def _offer(self, send: MemoryObjectSendStream[Event], event: Event) -> None:
        # One place is kept free for the `stream.lagged` notice.
        if send.statistics().current_buffer_used >= self._buffer - 1:
            lagged = {"seq": event["seq"], "at": event["at"], "type": "stream.lagged"}
            self._drop(send, lagged)
            return
        try:
            send.send_nowait(event)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._drop(send, None)

    def _drop(self, send: MemoryObjectSendStream[Event], last: Event | None) -> None:
        self._subscribers.discard(send)
        self.dropped_subscribers += 1
        if last is not None:
            try:
                send.send_nowait(last)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
        send.close()

    def close(self) -> None:
        """End every subscription (the host is stopping): clients see their streams end."""
        for send in list(self._subscribers):
            send.close()
        self._subscribers.clear()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self, after: int | None = None) -> AsyncIterator[Event]:
        """Events after `after` (from the ring), then live ones; `stream.reset` if too old."""
        send, receive = anyio.create_memory_object_stream[Event](self._buffer)
        backlog: list[Event] = []
        if after is not None and after < self.last_seq:
            oldest = self._ring[0]["seq"] if self._ring else self.last_seq + 1
            if after + 1 < oldest:
                backlog = [{"seq": self.last_seq, "at": int(time.time() * 1000), "type": "stream.reset"}]
            else:
                backlog = [e for e in self._ring if e["seq"] > after]
        for event in backlog[-(self._buffer - 1) :]:
            send.send_nowait(event)
        self._subscribers.add(send)
        return _Subscription(self, send, receive)


class _Subscription:
    def __init__(
        self, hub: EventHub, send: MemoryObjectSendStream[Event], receive: MemoryObjectReceiveStream[Event]
    ) -> None:
        self._hub = hub
        self._send = send
        self._receive = receive

    def __aiter__(self) -> _Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._hub._subscribers.discard(self._send)
        self._send.close()
        self._receive.close()
