"""The event hub keeps what clients wrote short and inert, within a byte budget, and the admin
event stream says `event: end` when the host ends it."""

from __future__ import annotations

import json
import re
import tracemalloc
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from mlxhost.host.events import EventHub
from mlxhost.host.routes.admin import admin_routes
from mlxhost.wire.admin import HostStopping, Outcome, SessionClosed, SessionOpened, UnknownEvent
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

FIELD_CHARS = MESSAGE_CHARS + 64  # what a string field keeps: a message excerpt made upstream, whole
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
EVIL = "\x1b]0;pwned\x07\x1b[2J"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def tick(n: int, **more: Any) -> UnknownEvent:
    """An event of a type no client knows: the hub carries it all the same."""
    return UnknownEvent.of({"type": "tick", "n": n, **more})


def test_client_text_in_an_event_is_cut_short_and_its_controls_escaped() -> None:
    hub = EventHub()
    huge = "x" * 1_000_000
    event = hub.publish(
        UnknownEvent.of(
            {
                "type": "session.closed",
                "session": "s-1",
                "model": EVIL + huge,
                "message": f"unknown field '{huge}'",
                "last_exit": {"reason": EVIL * 3, huge: [EVIL, huge]},
                "tokens": 3,
                "stream": True,
                "tokens_per_s": 1.5,
            }
        )
    )
    assert event["session"] == "s-1" and event["tokens"] == 3 and event["stream"] is True
    assert event["tokens_per_s"] == 1.5
    frame = json.dumps(event)
    assert len(frame) < 8 * FIELD_CHARS
    assert not CONTROLS.search(json.loads(frame)["model"])
    for text in (event["model"], event["message"], event["last_exit"]["reason"]):
        assert not CONTROLS.search(text) and len(text) < FIELD_CHARS + 40
    assert event["model"].startswith("\\x1b]0;pwned\\x07\\x1b[2J")  # escaped, so still readable
    assert f"({len(EVIL) + len(huge)} characters in all)" in event["model"]
    (key, value), = [(k, v) for k, v in event["last_exit"].items() if k != "reason"]
    assert len(key) < FIELD_CHARS + 40 and len(value[1]) < FIELD_CHARS + 40
    assert value[0] == "\\x1b]0;pwned\\x07\\x1b[2J"


def test_a_message_already_cut_upstream_passes_whole() -> None:
    message = excerpt("y" * 10_000, MESSAGE_CHARS)
    closed = SessionClosed(session="s-1", model="m", tokens=0, age_ms=1, outcome=Outcome("failed", message=message))
    assert EventHub().publish(closed)["message"] == message


def test_a_hundred_megabyte_messages_cost_the_hub_next_to_nothing() -> None:
    hub = EventHub()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for n in range(100):
            name = chr(65 + n % 26) * 1_000_000  # a new megabyte each time
            outcome = Outcome("failed", code="invalid_request", message=f"unknown field '{name}'")
            hub.publish(SessionClosed(session=f"s-{n}", model="m", tokens=0, age_ms=1, outcome=outcome))
        del name, outcome
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 1_000_000  # a hundred events, each well under 10 kB


def test_the_ring_is_bounded_by_bytes_as_well_as_by_count() -> None:
    async def main() -> None:
        hub = EventHub(ring_size=1000, ring_bytes=20_000)
        for n in range(200):
            hub.publish(tick(n, text="z" * 400))
        assert hub.ring_bytes <= 20_000
        # Resuming within what is kept works; before it, the client is told to start over.
        recent = hub.subscribe(after=198)  # seq n + 1
        assert [(await anext(recent))["n"] for _ in range(2)] == [198, 199]
        old = hub.subscribe(after=100)
        assert (await anext(old))["type"] == "stream.reset"
        await recent.aclose()
        await old.aclose()

    anyio.run(main)


def test_the_newest_event_is_kept_whatever_its_size() -> None:
    hub = EventHub(ring_bytes=10)
    hub.publish(tick(1))
    hub.publish(tick(2))
    assert [p.event["n"] for p in hub._ring] == [2]


def test_each_event_is_encoded_once_and_its_frame_is_what_subscribers_get() -> None:
    async def main() -> None:
        hub = EventHub()
        subscription = hub.subscribe()
        event = hub.publish(SessionOpened(session="s-1", model="m", stream=False))
        published = await subscription.receive()
        assert published.event is event and published is hub._ring[-1]
        assert published.frame == f"id: {event['seq']}\ndata: {json.dumps(event)}\n\n".encode()
        await subscription.aclose()

    anyio.run(main)


# -- the SSE route, in process (the real host's shutdown is in tests/test_admin.py) -------------


def admin_app(hub: EventHub) -> Starlette:
    app = Starlette(routes=admin_routes)
    app.state.parent = SimpleNamespace(events=hub, admin_token=None, settings=SimpleNamespace(idle_timeout=30.0))
    return app


async def read_events(hub: EventHub, then: Any) -> str:
    """The whole body of GET /admin/events, with `then(hub)` run once it is subscribed."""
    transport = httpx.ASGITransport(app=admin_app(hub))
    answer: dict[str, httpx.Response] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://mlxhost") as client:

        async def get() -> None:
            answer["response"] = await client.get("/admin/events")

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(get)
                while hub.subscribers == 0:
                    await anyio.sleep(0.01)
                then(hub)
    assert answer["response"].status_code == 200
    return answer["response"].text


@pytest.mark.anyio
async def test_a_lagging_stream_ends_with_event_end() -> None:
    def flood(hub: EventHub) -> None:
        for n in range(1000):  # never yields: the subscriber cannot keep up
            hub.publish(tick(n))

    body = await read_events(EventHub(subscriber_buffer=8), flood)
    frames = body.strip().split("\n\n")
    assert json.loads(frames[-2].split("data: ")[1])["type"] == "stream.lagged"
    assert frames[-1] == 'event: end\ndata: {"reason": "lagged"}'
    # The notice carries the id of the last event delivered: resuming after it misses nothing.
    ids = [int(f.split("\n")[0].removeprefix("id: ")) for f in frames if f.startswith("id: ")]
    assert ids[-1] == ids[-2]


@pytest.mark.anyio
async def test_a_stream_the_hub_closes_ends_with_event_end() -> None:
    def stop(hub: EventHub) -> None:
        hub.publish(HostStopping(reason="SIGTERM", grace_s=1.0))
        hub.close()

    body = await read_events(EventHub(), stop)
    frames = body.strip().split("\n\n")
    assert json.loads(frames[-2].split("data: ")[1])["type"] == "host.stopping"
    assert frames[-1] == 'event: end\ndata: {"reason": "host_stopping"}'
