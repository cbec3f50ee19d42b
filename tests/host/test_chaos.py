"""Chaos: kill, freeze and abandon things under load; every client still gets a clean answer.

Run alone with `pytest -m chaos`; CI runs them with the rest.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until

pytestmark = pytest.mark.chaos

PROMPT = [{"role": "user", "content": "Go on forever"}]
CLEAN_ERRORS = {"worker_exited", "model_restarting", "shutting_down", "queue_full", "cancelled"}


@dataclass
class Tally:
    """What every client saw; anything not a completion or a clean error is a failure."""

    completed: int = 0
    clean_errors: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    # Connection errors before any answer began: only acceptable while the host is going away.
    unanswered: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, code: str) -> None:
        with self.lock:
            if code in CLEAN_ERRORS:
                self.clean_errors[code] = self.clean_errors.get(code, 0) + 1
            else:
                self.failures.append(f"error code {code}")


def stream_once(server: RunningHost, tally: Tally, max_tokens: int, stop_after: int | None = None) -> None:
    body = {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    answered = False
    try:
        with server.http(timeout=15) as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
            answered = True
            if response.status_code != 200:
                response.read()
                tally.error(response.json()["error"]["code"])
                if response.status_code == 503:
                    time.sleep(0.2)  # as Retry-After asks, roughly: a client that spins tests nothing
                return
            events = []
            for n, line in enumerate(response.iter_lines()):
                if stop_after is not None and n >= stop_after:
                    return  # this client leaves mid-stream
                if line.startswith("data: "):
                    events.append(line[6:])
            if events[-1] != "[DONE]":
                tally.failures.append("stream ended without [DONE]")
            last = json.loads(events[-2])
            if "error" in last:
                tally.error(last["error"]["code"])
            elif last["choices"][0]["finish_reason"]:
                with tally.lock:
                    tally.completed += 1
            else:
                tally.failures.append(f"stream ended on {events[-2][:80]}")
    except httpx.TimeoutException:
        tally.failures.append("hung: no answer within 15 s")
    except httpx.TransportError as exc:
        (tally.failures if answered else tally.unanswered).append(f"{type(exc).__name__}: {exc}")
    except (httpx.HTTPError, ValueError, IndexError, KeyError) as exc:
        tally.failures.append(f"{type(exc).__name__}: {exc}")


def clients(server: RunningHost, tally: Tally, stop: threading.Event, count: int = 8, **kwargs: Any) -> list[threading.Thread]:
    def loop() -> None:
        while not stop.is_set():
            stream_once(server, tally, **kwargs)

    threads = [threading.Thread(target=loop) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def spawned_pids(server: RunningHost) -> set[int]:
    return {int(m) for line in server.log for m in re.findall(r"spawned pid (\d+)", line)}


def assert_clean_aftermath(server: RunningHost) -> None:
    """No session open, every old worker gone, only live sockets in the runtime directory."""
    deadline = time.monotonic() + 15
    while True:
        with server.http() as http:
            registry = http.get("/admin/sessions").json()
            health = http.get("/health").json()
        if not registry["live"] and health["workers"] and health["workers"][0]["state"] == "ready":
            break
        assert time.monotonic() < deadline, f"sessions still open: {registry['live']}"
        time.sleep(0.1)
    assert registry["opened"] == registry["closed"]
    current = health["workers"][0]["pid"]
    for pid in spawned_pids(server) - {current}:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    runtime = Path(health["workers"][0]["socket"]).parent
    assert sorted(p.name for p in runtime.iterdir()) == sorted(["admin-token", Path(health["workers"][0]["socket"]).name])


@pytest.mark.slow
def test_twenty_kills_under_eight_streams(tiny_model: Path) -> None:
    # With the default warm standby, as users run it: a kill that finds it ready respawns in
    # about a model load; one soon after (its replacement still importing) spawns afresh.
    server = start_host(
        "--model", str(tiny_model), "--restart-limit", "100", "--crash-backoff", "0", "--early-exit", "0",
        "--standby-workers", "1",
    )  # fmt: skip
    tally, stop = Tally(), threading.Event()
    try:
        threads = clients(server, tally, stop, max_tokens=60)
        kills = 0
        while kills < 20:
            worker = server.health()["workers"][0]
            if worker["state"] == "ready":
                time.sleep(random.uniform(0.2, 0.8))  # let some streams get going, some finish
                os.kill(worker["pid"], signal.SIGKILL)
                kills += 1
                while server.health()["workers"][0]["pid"] == worker["pid"]:
                    time.sleep(0.02)
            time.sleep(0.02)
        stop.set()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive(), "a client hung"
        assert not tally.failures and not tally.unanswered, (tally.failures + tally.unanswered)[:5]
        assert tally.clean_errors.get("worker_exited", 0) > 0 and tally.completed > 0
        assert_clean_aftermath(server)
    finally:
        stop.set()
        assert server.stop() == 0


def test_a_frozen_worker_is_replaced_and_its_clients_released(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--health-interval", "0.3", "--health-timeout", "1")
    tally = Tally()
    try:
        frozen = server.health()["workers"][0]["pid"]
        client = threading.Thread(target=stream_once, args=(server, tally, 4000))
        client.start()
        wait_until(lambda: server.health()["workers"][0]["in_flight"] == 1, timeout=30)
        os.kill(frozen, signal.SIGSTOP)
        stopped_at = time.monotonic()
        client.join(15)
        assert not client.is_alive()
        assert time.monotonic() - stopped_at < 5
        assert tally.clean_errors == {"worker_exited": 1}, (tally.clean_errors, tally.failures)
        worker = server.health()["workers"][0]
        deadline = time.monotonic() + 10
        while worker["state"] != "ready" or worker["pid"] == frozen:
            assert time.monotonic() < deadline
            time.sleep(0.05)
            worker = server.health()["workers"][0]
        assert "hung" in worker["last_exit"]["reason"] and worker["last_exit"]["signal"] == "SIGKILL"
        assert not psutil.pid_exists(frozen) or psutil.Process(frozen).status() == psutil.STATUS_ZOMBIE
        assert_clean_aftermath(server)
    finally:
        if psutil.pid_exists(frozen):
            os.kill(frozen, signal.SIGCONT)
        server.stop()


def test_clients_that_leave_at_random_points(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model))
    tally = Tally()
    try:
        rng = random.Random(7)
        for _ in range(5):
            threads = [
                threading.Thread(target=stream_once, args=(server, tally, 2000, rng.randint(0, 60)))
                for _ in range(8)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
        assert not tally.failures and not tally.unanswered, (tally.failures + tally.unanswered)[:5]
        server.wait_for(lambda c: c["active"] == 0 and c["waiting"] == 0)
        assert_clean_aftermath(server)
        with server.http() as http:
            assert http.post("/v1/chat/completions", json={"messages": PROMPT, "max_tokens": 3}).status_code == 200
    finally:
        server.stop()


def test_a_slow_reader_slows_only_itself(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--stream-interval", "0")
    tally = Tally()
    try:
        body = {"messages": PROMPT, "max_tokens": 400, "temperature": 0, "stream": True}
        slow_lines: list[str] = []
        fast_done = threading.Event()

        def slow() -> None:
            with server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
                for line in response.iter_lines():
                    slow_lines.append(line)
                    if not fast_done.is_set():
                        time.sleep(0.01)  # 100 lines a second: its 800-odd take 8 s

        reader = threading.Thread(target=slow)
        reader.start()
        fast = [threading.Thread(target=stream_once, args=(server, tally, 400)) for _ in range(4)]
        for thread in fast:
            thread.start()
        for thread in fast:
            thread.join(30)
        read_by_then = list(slow_lines)
        fast_done.set()  # its pace showed what it had to: it reads the rest at once
        reader.join(60)
        assert tally.completed == 4 and not tally.failures and not tally.unanswered
        assert slow_lines[-2] == "data: [DONE]"
        # The fast clients finished well before the slow one had read its stream.
        assert "data: [DONE]" not in read_by_then, f"the slow reader had read all {len(read_by_then)} lines"
    finally:
        server.stop()


def test_sigterm_in_the_middle_of_it_all(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--shutdown-grace", "1")
    tally, stop = Tally(), threading.Event()
    threads = clients(server, tally, stop, max_tokens=3000)
    # Every client's stream under way, then a moment of their tokens.
    wait_until(lambda: server.health()["workers"][0]["in_flight"] == 8, timeout=30)
    time.sleep(0.3)
    pids = spawned_pids(server)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(30) == 0
    stop.set()
    for thread in threads:
        thread.join(20)
        assert not thread.is_alive()
    # Every answer that began ended with a completion or an error saying the server is going
    # away; only connections made as it went away were refused or reset. None hung.
    assert not tally.failures, tally.failures[:5]
    assert tally.clean_errors.get("shutting_down", 0) > 0
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
