"""Admission, sessions and cancellation, as clients and the operator see them."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import RunningHost, outcome_without_drafts, start_host, wait_until

PROMPT = [{"role": "user", "content": "Go on forever"}]


def chat(max_tokens: int, stream: bool = False) -> dict[str, Any]:
    return {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": stream}



def admission(server: RunningHost) -> dict[str, Any]:
    stats = server.health()["admission"]
    return next(iter(stats.values())) if stats else {"active": 0, "queued": 0, "rejected": 0}


def sessions(server: RunningHost) -> dict[str, Any]:
    with server.http() as http:
        return http.get("/admin/sessions").json()  # type: ignore[no-any-return]


def recent(server: RunningHost, session_id: str) -> dict[str, Any]:
    """The closed session. The client's stream can end before it closes: a session settles until
    its worker says it dropped the sequence, and only then is its outcome recorded."""
    return wait_until(lambda: next((s for s in sessions(server)["recent"] if s["id"] == session_id), None))


def assert_every_session_closed_once(server: RunningHost) -> None:
    registry = wait_until(lambda: (r := sessions(server)) and not r["live"] and r)
    assert registry["opened"] == registry["closed"]
    ids = [s["id"] for s in registry["recent"]]
    assert len(ids) == len(set(ids)) == registry["closed"]
    assert all(s["state"] == "closed" and s["outcome"] for s in registry["recent"])


class Background:
    """A request run in a thread, so the test can do other things meanwhile."""

    def __init__(self, server: RunningHost, body: dict[str, Any], timeout: float = 60.0) -> None:
        self.response: httpx.Response | None = None
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(server, body, timeout))
        self._thread.start()

    def _run(self, server: RunningHost, body: dict[str, Any], timeout: float) -> None:
        try:
            with server.http(timeout) as http:
                with http.stream("POST", "/v1/chat/completions", json=body) as response:
                    self.response = response
                    for line in response.iter_lines():
                        self.lines.append(line)
                    response.read()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 30.0) -> Background:
        self._thread.join(timeout)
        assert not self._thread.is_alive()
        return self

    @property
    def session(self) -> str:
        assert self.response is not None
        return self.response.headers["x-mlxhost-session"]

    def events(self) -> list[Any]:
        return [json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]" for line in self.lines if line.startswith("data: ")]


@pytest.fixture
def narrow(tiny_model: Path):  # type: ignore[no-untyped-def]
    server = start_host("--model", str(tiny_model), "--max-active", "1", "--max-queued", "2")
    yield server
    server.stop()


def test_one_runs_two_wait_in_order_the_rest_get_429(narrow: RunningHost) -> None:
    running = Background(narrow, chat(1500, stream=True))
    wait_until(lambda: admission(narrow)["active"] == 1)
    second = Background(narrow, chat(20))
    wait_until(lambda: admission(narrow)["queued"] == 1)
    third = Background(narrow, chat(20))
    wait_until(lambda: admission(narrow)["queued"] == 2)
    with narrow.http() as http:
        refused = [http.post("/v1/chat/completions", json=chat(5)) for _ in range(3)]
    for response in refused:
        assert response.status_code == 429
        assert response.headers["retry-after"]
        error = response.json()["error"]
        assert error["type"] == "resource_admission" and error["code"] == "queue_full"
    for request in (running, second, third):
        request.join()
        assert request.response is not None and request.response.status_code == 200
    assert admission(narrow)["rejected"] == 3
    # Turned away at the door: counted and announced, but never a session.
    with narrow.http() as http:
        metrics = http.get("/metrics").text
    assert 'mlxhost_requests_total{model="tiny",status="429"} 3.0' in metrics
    assert sessions(narrow)["opened"] == 3
    ours = {running.session, second.session, third.session}
    # A session closes once its worker has dropped the sequence, which can be after its response.
    closed = wait_until(lambda: ours <= set(ids := [s["id"] for s in sessions(narrow)["recent"]]) and ids)
    # With one place, the waiters ran after the first, in the order they arrived.
    assert closed.index(running.session) < closed.index(second.session) < closed.index(third.session)
    assert_every_session_closed_once(narrow)


def test_a_queued_client_that_leaves_never_runs(narrow: RunningHost) -> None:
    before = narrow.engine()
    running = Background(narrow, chat(1500, stream=True))
    wait_until(lambda: admission(narrow)["active"] == 1)
    with narrow.http() as http:
        with pytest.raises(httpx.ReadTimeout):
            http.post("/v1/chat/completions", json=chat(20), timeout=httpx.Timeout(30, read=0.5))
    left = wait_until(lambda: [s for s in sessions(narrow)["recent"] if s["outcome"]["kind"] == "cancelled"])
    assert left[0]["outcome"]["reason"] == "client_disconnected"
    running.join()
    after = narrow.engine()
    # The worker only ever saw the first request.
    assert after["completed"] + after["cancelled"] - before["completed"] - before["cancelled"] == 1
    assert_every_session_closed_once(narrow)


def test_an_operator_cancels_a_running_session(narrow: RunningHost) -> None:
    stream = Background(narrow, chat(4000, stream=True))
    wait_until(lambda: stream.response is not None and len(stream.lines) > 4)
    with narrow.http() as http:
        cancelled = http.post(f"/admin/sessions/{stream.session}/cancel")
        assert cancelled.status_code == 202
        assert http.post("/admin/sessions/s-nonexistent/cancel").status_code == 404
    stream.join()
    events = stream.events()
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "cancelled"
    assert outcome_without_drafts(recent(narrow, stream.session)["outcome"]) == {
        "kind": "cancelled",
        "reason": "requested",
    }
    narrow.wait_for(lambda c: c["active"] == 0)
    assert_every_session_closed_once(narrow)


def test_a_deadline_closes_the_session(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--request-timeout", "0.5")
    try:
        stream = Background(server, chat(4000, stream=True)).join()
        events = stream.events()
        assert events[-2]["error"]["code"] == "deadline"
        outcome = outcome_without_drafts(recent(server, stream.session)["outcome"])
        assert outcome == {"kind": "cancelled", "reason": "deadline"}
        with server.http() as http:
            whole = http.post("/v1/chat/completions", json=chat(4000))
        assert whole.status_code == 504 and whole.json()["error"]["code"] == "deadline"
        assert_every_session_closed_once(server)
    finally:
        server.stop()


def test_a_consumer_that_stops_reading_is_cancelled(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--idle-timeout", "1", "--stream-interval", "0")
    try:
        assert server.url is not None
        host, port = server.url.removeprefix("http://").split(":")
        # Twenty alternatives a token make ~1.5 kB frames: more than the kernel buffers hold.
        body = json.dumps({**chat(4000, stream=True), "logprobs": True, "top_logprobs": 20}).encode()
        reader = socket.socket()
        # A tiny receive window, and then no reading at all: the host's sends soon block.
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        reader.connect((host, int(port)))
        reader.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n".encode()
            + b"content-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        try:
            closed = wait_until(lambda: [s for s in sessions(server)["recent"]], timeout=30)
        finally:
            reader.close()
        outcome = outcome_without_drafts(closed[0]["outcome"])
        assert outcome == {"kind": "cancelled", "reason": "consumer_idle"}
        server.wait_for(lambda c: c["active"] == 0)
        # Others are served meanwhile and after.
        with server.http() as http:
            assert http.post("/v1/chat/completions", json=chat(5)).status_code == 200
    finally:
        server.stop()


def test_a_drained_restart_queues_new_sessions_instead_of_refusing_them(narrow: RunningHost) -> None:
    old_pid = narrow.worker()["pid"]
    running = Background(narrow, chat(1500, stream=True))
    wait_until(lambda: admission(narrow)["active"] == 1)
    restart: dict[str, httpx.Response] = {}

    def ask_restart() -> None:
        with narrow.http() as http:
            restart["response"] = http.post(f"/admin/workers/{narrow.worker()['id']}/restart")

    restarting = threading.Thread(target=ask_restart)
    restarting.start()
    time.sleep(0.2)
    waiting = Background(narrow, chat(5))
    wait_until(lambda: admission(narrow)["queued"] >= 1)
    running.join()
    restarting.join(30)
    waiting.join()
    assert running.events()[-2]["choices"][0]["finish_reason"] == "length"  # finished, not cut
    assert restart["response"].status_code == 200
    assert waiting.response is not None and waiting.response.status_code == 200
    assert narrow.worker()["pid"] != old_pid
    assert_every_session_closed_once(narrow)


def test_an_undrained_restart_ends_running_work_at_once(narrow: RunningHost) -> None:
    old_pid = narrow.worker()["pid"]
    running = Background(narrow, chat(4000, stream=True))
    wait_until(lambda: len(running.lines) > 4)
    with narrow.http() as http:
        answer = http.post(f"/admin/workers/{narrow.worker()['id']}/restart", params={"drain": "false"})
    assert answer.status_code == 200
    assert answer.json()["worker"]["pid"] not in (None, old_pid)
    running.join()
    # Cut, not finished: the restart did not wait for it (nor for the worker's shutdown grace).
    assert "error" in running.events()[-2], running.events()[-3:]
    with narrow.http() as http:
        assert http.post("/v1/chat/completions", json=chat(5)).status_code == 200
    assert_every_session_closed_once(narrow)


def test_a_second_signal_stops_at_once(tiny_model: Path) -> None:
    import signal

    server = start_host("--model", str(tiny_model), "--shutdown-grace", "60")
    stream = Background(server, chat(4000, stream=True))
    wait_until(lambda: len(stream.lines) > 4)
    server.process.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    server.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert server.process.wait(20) == 0
    assert time.monotonic() - started < 10  # not the 60 s grace
    stream.join()
    assert stream.events()[-2]["error"]["code"] == "shutting_down"


def test_per_model_limits_from_the_config_file(tiny_model: Path, tmp_path: Path) -> None:
    config = tmp_path / "m.toml"
    config.write_text(f'[[model]]\npath = "{tiny_model}"\nmax_tokens_limit = 16\nmax_active = 1\nmax_queued = 0\n')
    server = start_host("--config", str(config))
    try:
        with server.http() as http:
            # More than the model's limit is clamped to it (as more than fits is).
            clamped = http.post("/v1/chat/completions", json=chat(17))
            assert clamped.status_code == 200 and clamped.json()["usage"]["completion_tokens"] <= 16
            running = Background(server, chat(16, stream=True))
            assert http.post("/v1/chat/completions", json=chat(16)).status_code in (200, 429)
            running.join()
        assert admission(server)["max_queued"] == 0 and admission(server)["max_active"] == 1
    finally:
        server.stop()
