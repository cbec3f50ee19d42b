"""Sessions: outcomes and the recent list stay small whatever a request carries; a session closes
only once its worker has let go of it."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from mlxhost.config import Settings
from mlxhost.host.serving.sessions import RECENT_KEPT, Outcome, SessionRegistry
from mlxhost.host.workers.pool import ModelPool, UnknownModel
from mlxhost.catalog.spec import ModelSpec
from mlxhost.testing import RunningHost, start_host
from mlxhost.wire.inert import EXCERPT_CHARS, MESSAGE_CHARS

HUGE = "\x1b]0;pwned\x07\x1b[2J" + "k" * 1_000_000
SLACK = 40  # what an excerpt adds: "… (N characters in all)"


def test_a_failed_outcome_keeps_a_short_inert_excerpt() -> None:
    outcome = Outcome.failed(HUGE, f"unknown field '{HUGE}'")
    assert outcome.message is not None and outcome.code is not None
    assert len(outcome.message) <= MESSAGE_CHARS + SLACK and len(outcome.code) <= EXCERPT_CHARS + SLACK
    assert outcome.message.startswith("unknown field '\\x1b]0;pwned\\x07\\x1b[2J")
    assert not any(ord(c) < 0x20 for c in outcome.message + outcome.code)
    assert Outcome.failed("queue_full", "the model is at capacity") == Outcome(
        "failed", code="queue_full", message="the model is at capacity"
    )


def test_the_recent_sessions_hold_bounded_bytes() -> None:
    async def main() -> int:
        registry = SessionRegistry()
        for _ in range(RECENT_KEPT + 10):
            session = registry.open("m", stream=False)
            registry.close(session, Outcome.failed(HUGE[:100_000], HUGE[:100_000]))
        return len(json.dumps([s.snapshot().to_json() for s in registry.recent()]))

    assert anyio.run(main) < RECENT_KEPT * 2 * 1024


def test_an_unknown_model_name_is_quoted_as_an_excerpt(tmp_path: Path) -> None:
    async def main() -> str:
        spec = ModelSpec("alpha", str(tmp_path))
        settings = Settings(strict_models=True)
        async with ModelPool.open(settings, (spec,), {"alpha": tmp_path}, tmp_path) as pool:
            with pytest.raises(UnknownModel) as refused:
                pool.resolve(HUGE)
        return str(refused.value)

    message = anyio.run(main)
    assert len(message) < 300 and "\x1b" not in message and "characters in all" in message


def live_session(server: RunningHost, session_id: str) -> dict[str, Any] | None:
    with server.http() as http:
        live = http.get("/admin/state").json()["sessions"]["live"]
    return next((s for s in live if s["id"] == session_id), None)


def test_a_cancelled_session_closes_once_its_worker_dropped_the_sequence(tiny_model: Path) -> None:
    # No liveness checks: the worker is frozen on purpose for a moment.
    server = start_host("--model", str(tiny_model), "--health-interval", "0")
    target: dict[str, str] = {}
    seen: dict[str, Any] = {}

    def watch() -> None:
        with server.http(timeout=120) as http, http.stream("GET", "/admin/events?after=0") as events:
            for line in events.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "session.closed" and event["session"] == target.get("id"):
                    seen["engine"] = server.engine()  # at once, as the close is observed
                    seen["event"] = event
                    return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        pid = server.worker()["pid"]
        # Greedy on a prompt the tiny model never ends by itself (as the other long streams are):
        # at temperature 1 it wrote its end token within 60 tokens in 5 of 64 samples, and a
        # generation that ended before the worker froze left nothing to wait for.
        body = {
            "messages": [{"role": "user", "content": "Go on forever"}],
            "max_tokens": 4000,
            "temperature": 0,
            "stream": True,
        }
        with server.http(timeout=60) as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
            target["id"] = response.headers["x-mlxhost-session"]
            for line in response.iter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    break
            os.kill(pid, signal.SIGSTOP)  # frozen, it cannot drop the sequence yet
        try:  # the client has gone; the host cancels the session and waits for the worker
            deadline = time.monotonic() + 10
            while (session := live_session(server, target["id"])) and session["state"] != "settling":
                assert time.monotonic() < deadline, session
                time.sleep(0.02)
            assert session is not None, "closed while its worker still held the sequence"
            assert "event" not in seen
        finally:
            os.kill(pid, signal.SIGCONT)
        watcher.join(30)
        assert seen["event"]["reason"] == "client_disconnected"
        assert seen["engine"]["active"] == 0 and seen["engine"]["waiting"] == 0
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("path", "body", "last"),
    [
        ("/v1/responses", {"input": "Hello", "max_output_tokens": 3}, b"event: response.completed"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}, b"[DONE]"),
    ],
)
def test_a_client_that_hangs_up_after_the_last_event_completed_its_session(
    server: RunningHost, path: str, body: dict[str, Any], last: bytes
) -> None:
    """Codex closes the connection as soon as it reads `response.completed`: it got its whole answer,
    and the operator should see a completed session, not a cancelled one (this raced)."""
    import httpx

    ids = []
    for _ in range(5):
        with httpx.Client(base_url=server.url or "", timeout=30) as http:
            with http.stream("POST", path, json={"model": "tiny", "stream": True, **body}) as response:
                ids.append(response.headers["x-mlxhost-session"])
                seen = b""
                for chunk in response.iter_raw():
                    seen += chunk
                    if last in seen:
                        break  # and hang up at once
    with server.http() as http:
        recent = {s["id"]: s for s in http.get("/admin/sessions").json()["recent"]}
    assert [recent[i]["outcome"]["kind"] for i in ids] == ["completed"] * 5, [recent[i]["outcome"] for i in ids]
