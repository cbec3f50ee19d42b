"""The admin API: events, state, metrics, access control and `mlxhost status`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from mlxhost.client.admin import AdminClient, Target
from mlxhost.host.events import EventHub
from mlxhost.testing import ADMIN_TOKEN, RunningHost, start_host
from mlxhost.wire.admin import HostState, UnknownEvent, parse_event

CHAT = {"messages": [{"role": "user", "content": "Go on forever"}], "temperature": 0}


@pytest.fixture(scope="module")
def host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    socket = tmp_path_factory.mktemp("admin") / "host.sock"
    server = start_host("--model", str(tiny_model), "--unix", str(socket))
    yield server
    server.stop()


def tick(n: int) -> UnknownEvent:
    return UnknownEvent.of({"type": "tick", "n": n})


def target(server: RunningHost) -> Target:
    return Target(url=server.url, token=ADMIN_TOKEN)


def collect(server: RunningHost, after: int | None, until: str, action: Any = None, limit: int = 500) -> list[dict[str, Any]]:
    """Events after `after` until one of type `until`, while `action` runs in a thread."""

    async def main() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        if action is not None:  # events after `after` wait in the ring: none is missed
            threading.Thread(target=action).start()
        async with AdminClient(target(server)) as client:
            with anyio.fail_after(30):
                async for event in client.events(after):
                    seen.append(event)
                    if event["type"] == until or len(seen) >= limit:
                        return seen
        return seen

    return anyio.run(main)


def chat(server: RunningHost, max_tokens: int) -> None:
    with server.http() as http:
        http.post("/v1/chat/completions", json={**CHAT, "max_tokens": max_tokens})


def test_events_follow_a_session_in_order_and_match_the_snapshot(host: RunningHost) -> None:
    with host.http() as http:
        state = http.get("/admin/state").json()
    # The first event after the snapshot is the one right after its seq: nothing in between is lost.
    with host.http() as http:
        http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})
    events = collect(host, state["seq"], "session.closed")
    assert events[0]["seq"] == state["seq"] + 1
    assert [e["seq"] for e in events] == sorted({e["seq"] for e in events})
    types = [e["type"] for e in events]
    assert types[0] == "session.opened" and types[-1] == "session.closed"
    assert events[-1]["kind"] == "completed" and events[-1]["tokens"] == 3
    # The host's documents are its records' JSON, key for key: each reads back into one unchanged.
    assert HostState.from_json(state).to_json() == state
    for event in events:
        record = parse_event(event)
        assert not isinstance(record, UnknownEvent) and record.to_json() == event


def test_progress_events_are_throttled(host: RunningHost) -> None:
    with host.http() as http:
        after = http.get("/admin/state").json()["seq"]
    events = collect(host, after, "session.closed", action=lambda: chat(host, 3000))
    progress = [e for e in events if e["type"] == "session.progress"]
    assert progress and progress[-1]["tokens"] > 0
    closed = events[-1]
    # At most about four a second for one session.
    assert len(progress) <= closed["age_ms"] / 1000 * 4 + 2


def test_resuming_with_last_event_id(host: RunningHost) -> None:
    with host.http() as http:
        after = http.get("/admin/state").json()["seq"]
        http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 2})
    first = collect(host, after, "session.closed")
    resumed = collect(host, first[1]["seq"], "session.closed")
    assert resumed[0]["seq"] == first[2]["seq"]
    assert resumed == first[2:]
    with httpx.stream(
        "GET", f"{host.url}/admin/events", headers={"authorization": f"Bearer {ADMIN_TOKEN}", "last-event-id": str(after)}
    ) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("retry: ")
        next(lines)
        assert next(lines) == f"id: {after + 1}"


def test_the_hub_resets_a_client_that_asks_for_too_old_events() -> None:
    async def main() -> None:
        hub = EventHub(ring_size=4)
        for n in range(10):
            hub.publish(tick(n))
        old = hub.subscribe(after=2)
        assert (await anext(old))["type"] == "stream.reset"
        recent = hub.subscribe(after=7)
        assert [(await anext(recent))["n"] for _ in range(2)] == [7, 8]

    anyio.run(main)


def test_a_lagging_subscriber_is_dropped_and_never_blocks_publishing() -> None:
    async def main() -> None:
        hub = EventHub(subscriber_buffer=8)
        slow = hub.subscribe()
        with anyio.fail_after(1):  # publishing never waits for a reader
            for n in range(1000):
                hub.publish(tick(n))
        received = [event async for event in slow]
        assert received[-1]["type"] == "stream.lagged"
        assert [e["n"] for e in received[:-1]] == list(range(len(received) - 1))
        assert hub.subscribers == 0 and hub.dropped_subscribers == 1

    anyio.run(main)


def test_metrics_in_prometheus_format(host: RunningHost) -> None:
    with host.http() as http:
        http.post("/v1/chat/completions", json={**CHAT, "max_tokens": 4, "stream": True})
        text = http.get("/metrics").text
    model = host.worker()["model"]
    assert f'mlxhost_requests_total{{model="{model}",status="200"}}' in text
    assert f'mlxhost_tokens_total{{kind="completion",model="{model}"}}' in text
    assert f'mlxhost_sessions_running{{model="{model}"}} 0.0' in text
    assert "mlxhost_time_to_first_token_seconds_bucket" in text
    assert f'mlxhost_worker_state{{state="ready",worker="{model}"}} 1.0' in text
    assert f'mlxhost_worker_memory_bytes{{kind="active",worker="{model}"}}' in text


def test_the_admin_api_needs_the_token_on_tcp_but_not_on_the_unix_socket(host: RunningHost) -> None:
    with host.http(admin=False) as http:
        denied = http.get("/admin/state")
        assert denied.status_code == 401 and denied.json()["error"]["type"] == "authentication_error"
        assert http.get("/admin/state", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert http.get("/v1/models").status_code == 200  # no api_key configured
    with host.http() as http:
        assert http.get("/admin/state").status_code == 200
    unix = RunningHost(host.process, None, host.unix)
    with unix.http() as http:
        assert http.get("/admin/state").status_code == 200


def test_api_key_protects_v1(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--api-key", "sk-local")
    try:
        with server.http(admin=False) as http:
            assert http.get("/v1/models").status_code == 401
            assert http.get("/v1/models", headers={"authorization": "Bearer sk-local"}).status_code == 200
        with server.client(api_key="sk-local") as client:
            assert client.models.list().data
    finally:
        server.stop()


def run_status(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlxhost", "status", *args],
        capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})},
    )


def test_status_prints_the_host(host: RunningHost) -> None:
    table = run_status("--url", host.url or "", "--token", ADMIN_TOKEN)
    assert table.returncode == 0, table.stderr
    assert "WORKER" in table.stdout and host.worker()["id"] in table.stdout and "ready" in table.stdout
    as_json = run_status("--unix", str(host.unix), "--json")
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout)["state"]["workers"][0]["state"] == "ready"
    denied = run_status("--url", host.url or "", "--token", "wrong", env={"XDG_RUNTIME_DIR": "/nonexistent"})
    assert denied.returncode == 1 and "401" in denied.stderr


def test_status_finds_the_local_host_and_fails_when_none_runs(tiny_model: Path, tmp_path: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert run_status(env=env).returncode == 1
    server = start_host("--model", str(tiny_model), env=env)
    try:
        found = run_status(env=env)
        assert found.returncode == 0, found.stderr
        assert server.url in found.stdout
        # With --url of that host, the local token is found too.
        assert run_status("--url", server.url or "", env=env).returncode == 0
    finally:
        server.stop()
    gone = run_status(env=env)
    assert gone.returncode == 1
    unreachable = run_status("--url", "http://127.0.0.1:9", env=env)
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr


@pytest.mark.parametrize(
    ("headers", "query", "named"),
    [
        ({"last-event-id": "١".encode()}, "", "Last-Event-ID"),  # an Arabic-Indic one: isdigit() says yes
        ({"last-event-id": b"12x"}, "", "Last-Event-ID"),
        ({}, "?after=%C2%B2", "after"),  # a superscript two
    ],
)
def test_a_resume_point_that_is_not_ascii_digits_is_a_400_naming_it(
    host: RunningHost, headers: dict[str, bytes], query: str, named: str
) -> None:
    with host.http() as http, http.stream("GET", f"/admin/events{query}", headers=headers) as response:
        assert response.status_code == 400  # not an event stream (that would never end)
        error = json.loads(response.read())["error"]
    assert error["param"] == named and named in error["message"]


def test_the_event_stream_says_end_when_the_host_stops(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model))
    raw: list[str] = []

    def read_raw() -> None:  # what any SSE client sees
        with server.http(timeout=60) as http, http.stream("GET", "/admin/events") as response:
            raw.extend(response.iter_lines())

    async def main() -> tuple[list[dict[str, Any]], str | None]:
        seen: list[dict[str, Any]] = []
        reader = threading.Thread(target=read_raw)
        reader.start()
        async with AdminClient(target(server)) as client:
            with anyio.fail_after(60):
                async for event in client.events(0):
                    seen.append(event)
                    if event["type"] == "host.started":
                        # Both subscribers are in before the host is told to stop.
                        while not raw:
                            await anyio.sleep(0.05)
                        threading.Thread(target=server.stop).start()
            # The loop ended without an error: the host ended the stream, and said why.
            await anyio.to_thread.run_sync(reader.join, 60)
            return seen, client.end_reason

    try:
        seen, reason = anyio.run(main)
    finally:
        server.stop()
    assert "host.stopping" in [e["type"] for e in seen]
    records = [parse_event(e) for e in seen]  # host.started, worker.spawned, worker.ready, ...
    assert [r.to_json() for r in records] == seen
    assert not [r for r in records if isinstance(r, UnknownEvent)]
    assert reason == "host_stopping"
    assert raw[-3:] == ["event: end", 'data: {"reason": "host_stopping"}', ""]


def test_status_ignores_proxies_for_a_local_host(host: RunningHost) -> None:
    proxies = {name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")}
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"} | proxies
    table = subprocess.run(
        [sys.executable, "-m", "mlxhost", "status", "--url", host.url or "", "--token", ADMIN_TOKEN],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert host.worker()["id"] in table.stdout


def test_status_escapes_control_characters_from_the_host() -> None:
    from mlxhost.client.status import render
    from mlxhost.wire.admin import (
        ExitRecord,
        HostRecord,
        HostState,
        ModelRecord,
        SessionRecord,
        SessionsRecord,
        WorkerRecord,
    )  # fmt: skip

    evil = "\x1b]0;pwned\x07\x1b[2J"
    last_exit = ExitRecord(pid=2, code=None, signal=f"SIG{evil}", uptime_s=1.0, ready=True, reason=evil)
    worker = WorkerRecord(
        id=f"w{evil}", model=evil, state="exited", pid=None, socket=evil, restarts=1, in_flight=0,
        uptime_s=None, ready_s=None, last_exit=last_exit, memory=None,
    )  # fmt: skip
    session = SessionRecord(
        id=f"s-{evil}", model=evil, stream=True, state="running", opened_at=0.0, age_s=1.0, tokens=1,
        tokens_per_s=1.0, outcome=None,
    )  # fmt: skip
    state = HostState(
        seq=1, host=HostRecord(pid=1, started=0.0, uptime_s=1.0, accepting=True), workers=(worker,),
        models=(ModelRecord(id=f"m{evil}", aliases=(evil,), path=evil, default=True, resident=False),),
        admission={}, sessions=SessionsRecord(live=(session,), recent=(), closed=0, opened=1),
    )  # fmt: skip
    table = render(Target(url="http://127.0.0.1:1"), {"status": f"ok{evil}"}, state)
    assert "pwned" in table and "\\x1b" in table
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f]", table)
