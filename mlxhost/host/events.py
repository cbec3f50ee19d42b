"""The event hub: what the host does, as a stream of numbered events for the admin API.

Producers publish records (`mlxhost.wire.admin`); the hub numbers each one and keeps it as the JSON
`{"seq": n, "at": unix_ms, "type": "...", ...}` it sends; `seq` only grows. The hub keeps a
bounded ring of recent events so a client can resume after a reconnect (`Last-Event-ID`), and says
`stream.reset` when it asks for events older than the ring. Publishing never waits: a subscriber
whose buffer is full is dropped with a last `stream.lagged` event, so a slow dashboard never slows
generation.

Events carry text a client chose (a model name, a failure message quoting a request), so every
string in one is cut to an excerpt with its control characters escaped as it is published, and
the ring is bounded by bytes as well as by count: no request can make the hub hold megabytes or
send an ESC sequence to an operator's terminal. Each event is encoded once, as its SSE frame,
when it is published; the ring's byte count and every subscriber's stream reuse that encoding.
"""

from __future__ import annotations

import collections
import itertools
import json
import time
from typing import Any, NamedTuple

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mlxhost.wire.admin import AdminEvent, StreamLagged, StreamReset
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

__all__ = ["Event", "EventHub", "Published", "Subscription"]

Event = dict[str, Any]  # an event as it goes on the wire: what `AdminEvent.to_json` gives
RING_SIZE = 2048
RING_BYTES = 4 << 20  # encoded events; a normal event is 100-300 bytes, so the count binds first
SUBSCRIBER_BUFFER = 512
# A string field keeps this many characters: room for a MESSAGE_CHARS excerpt made upstream to
# pass whole, with its own "… (n characters in all)".
FIELD_CHARS = MESSAGE_CHARS + 64
CONTAINER_ITEMS = 64  # items kept of a list or dict inside an event
CONTAINER_DEPTH = 4  # deeper values are kept as an excerpt of their text



def _bounded(value: Any, depth: int = 0) -> Any:
    kind = type(value)
    if kind is int or kind is float or kind is bool or value is None:  # the common case, first
        return value
    if isinstance(value, str):
        # Most fields are short printable names: one C-speed check lets them through as they are.
        # `isprintable` is false for every character `excerpt` escapes.
        if len(value) <= FIELD_CHARS and value.isprintable():
            return value
        return excerpt(value, FIELD_CHARS)
    if isinstance(value, int | float):
        return value
    if depth < CONTAINER_DEPTH:
        if isinstance(value, dict):
            items = itertools.islice(value.items(), CONTAINER_ITEMS)
            return {_bounded(str(k), depth + 1): _bounded(v, depth + 1) for k, v in items}
        if isinstance(value, list | tuple):
            return [_bounded(v, depth + 1) for v in itertools.islice(value, CONTAINER_ITEMS)]
    return excerpt(value, FIELD_CHARS)


# Events are trees `_bounded` just built: no cycle to look for.
_encode_json = json.JSONEncoder(check_circular=False).encode


class Published(NamedTuple):
    """An event with its SSE frame (`id: n` and `data: <json>`), encoded once at publish."""

    event: Event
    frame: bytes

    @classmethod
    def encode(cls, event: Event) -> Published:
        return cls(event, f"id: {event['seq']}\ndata: {_encode_json(event)}\n\n".encode())


class EventHub:
    def __init__(
        self,
        ring_size: int = RING_SIZE,
        subscriber_buffer: int = SUBSCRIBER_BUFFER,
        ring_bytes: int = RING_BYTES,
    ) -> None:
        self._seq = itertools.count(1)
        self.last_seq = 0
        self._ring: collections.deque[Published] = collections.deque()
        self._ring_size = ring_size
        self._ring_bytes = ring_bytes
        self.ring_bytes = 0  # the encoded size of the events the ring holds
        self._subscribers: set[MemoryObjectSendStream[Published]] = set()
        self._buffer = subscriber_buffer
        self._closed = False
        self.published = 0
        self.dropped_subscribers = 0

    def publish(self, record: AdminEvent) -> Event:
        """Number `record`, bound its strings, and send it to every subscriber; returns its JSON."""
        seq = next(self._seq)
        event: Event = {"seq": seq, "at": int(time.time() * 1000), "type": record.type}
        for key, value in record.payload().items():
            event[key] = _bounded(value)
        published = Published.encode(event)
        self.last_seq = seq
        self.published += 1
        self._keep(published)
        for send in list(self._subscribers):
            self._offer(send, published)
        return event

    def _keep(self, published: Published) -> None:
        ring = self._ring
        ring.append(published)
        self.ring_bytes += len(published.frame)
        # The newest event always stays, whatever its size, so that a resume right after it works.
        while len(ring) > 1 and (len(ring) > self._ring_size or self.ring_bytes > self._ring_bytes):
            self.ring_bytes -= len(ring.popleft().frame)

    def _offer(self, send: MemoryObjectSendStream[Published], published: Published) -> None:
        # One place is kept free for the `stream.lagged` notice.
        if send.statistics().current_buffer_used >= self._buffer - 1:
            event = published.event
            # Numbered as the last event it did get: a client resuming after it (an EventSource
            # does so by itself) is sent this one, not told it already had it.
            lagged = StreamLagged(seq=event["seq"] - 1, at=event["at"])
            self._drop(send, Published.encode(lagged.to_json()))
            return
        try:
            send.send_nowait(published)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._drop(send, None)

    def _drop(self, send: MemoryObjectSendStream[Published], last: Published | None) -> None:
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
        self._closed = True
        for send in list(self._subscribers):
            send.close()
        self._subscribers.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def subscribe(self, after: int | None = None) -> Subscription:
        """Events after `after` (from the ring), then live ones; `stream.reset` if too old."""
        send, receive = anyio.create_memory_object_stream[Published](self._buffer)
        backlog: list[Published] = []
        if after is not None and after < self.last_seq:
            oldest = self._ring[0].event["seq"] if self._ring else self.last_seq + 1
            if after + 1 < oldest:
                reset = StreamReset(seq=self.last_seq, at=int(time.time() * 1000))
                backlog = [Published.encode(reset.to_json())]
            else:
                backlog = [p for p in self._ring if p.event["seq"] > after]
        for published in backlog[-(self._buffer - 1) :]:
            send.send_nowait(published)
        if self._closed:
            send.close()  # the host is stopping: what was missed, then the end
        else:
            self._subscribers.add(send)
        return Subscription(self, send, receive)


class Subscription:
    """One subscriber's events, as dicts (`async for`) or with their frames (`receive`)."""

    def __init__(
        self, hub: EventHub, send: MemoryObjectSendStream[Published], receive: MemoryObjectReceiveStream[Published]
    ) -> None:
        self._hub = hub
        self._send = send
        self._receive = receive

    async def receive(self) -> Published:
        """The next event; `anyio.EndOfStream` once the hub ended this subscription."""
        try:
            return await self._receive.receive()
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        try:
            return (await self.receive()).event
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self._hub._subscribers.discard(self._send)
        self._send.close()
        self._receive.close()
