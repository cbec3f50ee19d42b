"""The worker's event loop is never blocked by a request, and a hung worker is told from a busy one.

Real `mlxhost serve` processes and real workers: a stream is read while hostile bodies arrive, a
worker whose generation thread wedges (tests/host/workers/wedged.py) is found out by its own /health,
and a worker whose parent goes away while it loads ends without a word on its ready line.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until
from mlxhost.wire.launch import WORKER_READY, LaunchRecord
from mlxhost.wire.layout import ADMIN_TOKEN_FILE

WEDGED = f"{sys.executable} {Path(__file__).parent / 'workers' / 'wedged.py'}"
JSON = {"content-type": "application/json"}
LONG = {
    "messages": [{"role": "user", "content": "Go on forever"}],
    "max_tokens": 4000,
    "temperature": 0,
    "stream": True,
}
# The stream read while hostile bodies arrive: about 3 s of tokens here, several times what
# answering them takes (each test asserts the stream outlasted them).
READ = {**LONG, "max_tokens": 2000}
# 100,000 empty messages: 3.3 MB, under max_body_bytes. Before, the chat template rendered them
# on the worker's event loop for about 4 s.
EMPTY_MESSAGES = json.dumps({"messages": [{"role": "user", "content": ""}] * 100_000}).encode()



class Reader:
    """A stream read in a thread, with the arrival time of each SSE frame."""

    def __init__(self, server: RunningHost, body: dict[str, object] = READ) -> None:
        self.arrivals: list[float] = []
        self.frames: list[str] = []
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(server, body), daemon=True)
        self._thread.start()
        assert self._started.wait(60), "the stream never started"

    def _read(self, server: RunningHost, body: dict[str, object]) -> None:
        with server.http(timeout=120) as http, http.stream("POST", "/v1/chat/completions", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.arrivals.append(time.monotonic())
                    self.frames.append(line)
                    if len(self.arrivals) == 5:
                        self._started.set()
        self._started.set()

    def largest_gap(self, start: float, end: float) -> float:
        """The longest silence between two frames, over the frames around [start, end]."""
        times = self.arrivals
        assert times[-1] > end, "the stream ended before the window closed: nothing was measured"
        pairs = itertools.pairwise(times)
        return max(b - a for a, b in pairs if b >= start and a <= end)

    def finish(self) -> list[str]:
        self._thread.join(120)
        assert not self._thread.is_alive()
        return self.frames


def post_raw(server: RunningHost, body: bytes) -> httpx.Response:
    with server.http(timeout=120) as http:
        return http.post("/v1/chat/completions", content=body, headers=JSON)


@pytest.fixture(scope="module")
def watched(tiny_model: Path) -> Iterator[RunningHost]:
    """A host that kills a worker not answering its health check within 2 s, checked 4 times a second.

    It does not draft: a drafting stream's frames come in bursts whose spacing depends on which
    steps verify (priced by this machine's timing), which is not what these tests measure (a
    hostile body must not stall the stream read beside it)."""
    server = start_host(
        "--model", str(tiny_model), "--health-interval", "0.25", "--health-timeout", "2",
        "--prefill-step", "256", "--speculate", "off",
    )
    yield server
    server.stop()


def test_a_body_of_100000_empty_messages_is_refused_without_stalling_a_stream(watched: RunningHost) -> None:
    reader = Reader(watched)
    start = time.monotonic()
    response = post_raw(watched, EMPTY_MESSAGES)
    end = time.monotonic() + 0.3
    wait_until(lambda: reader.arrivals[-1] > end, timeout=10, interval=0.01)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "messages" and error["code"] == "context_length_exceeded"
    assert "messages are at least" in error["message"] and "4096" in error["message"]
    gap = reader.largest_gap(start, end)
    print(f"\nlargest gap between frames while the body was answered: {gap * 1000:.0f} ms")
    assert gap < 0.3
    assert reader.finish()[-1] == "data: [DONE]"


def test_eight_such_bodies_and_a_long_prompt_restart_no_worker(watched: RunningHost) -> None:
    before = watched.worker()
    reader = Reader(watched)
    results: list[int] = []
    # A prompt that does fit: about 3,000 tokens, encoded in the tokenizer thread and prefilled
    # in chunks while the stream decodes.
    long_prompt = {"prompt": "the harbour at dawn " * 250, "max_tokens": 8}

    def hostile() -> None:
        results.append(post_raw(watched, EMPTY_MESSAGES).status_code)

    def legitimate() -> None:
        with watched.http(timeout=120) as http:
            results.append(http.post("/v1/completions", json=long_prompt).status_code)

    threads = [threading.Thread(target=hostile) for _ in range(8)] + [threading.Thread(target=legitimate)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    answered = time.monotonic()
    assert sorted(results) == [200] + [400] * 8
    frames = reader.finish()
    assert reader.arrivals[-1] > answered, "the stream ended before the bodies were answered: it read nothing"
    assert frames[-1] == "data: [DONE]" and '"finish_reason":"length"' in frames[-2] + frames[-3]
    after = watched.worker()
    assert after["restarts"] == before["restarts"] and after["pid"] == before["pid"]
    assert after["state"] == "ready"


def test_a_wedged_generation_thread_says_so_on_health(tiny_model: Path) -> None:
    # No liveness checks here, so the stalled worker stays up to be looked at.
    server = start_host(
        "--model", str(tiny_model), "--worker-command", WEDGED, "--stall-timeout", "1",
        "--health-interval", "0", "--shutdown-grace", "0.1", "--stop-timeout", "0.2", "--restart-limit", "0",
    )
    wedged = server.worker()["pid"]
    try:
        assert server.worker_health()["status"] == "ok"
        threading.Thread(target=post_raw, args=(server, json.dumps(LONG).encode()), daemon=True).start()
        transport = httpx.HTTPTransport(uds=server.worker()["socket"])
        with httpx.Client(base_url="http://worker", transport=transport, timeout=10) as worker:
            answer = wait_until(lambda: (r := worker.get("/health")).status_code == 503 and r)
        health = answer.json()
        assert health["status"] == "stalled" and health["step_seconds"] >= 1
    finally:
        # Its stream never ends, which would hold the host's stop for seconds: it goes first, for good.
        os.kill(wedged, signal.SIGKILL)
        server.stop()


def test_a_wedged_worker_is_killed_and_replaced(tiny_model: Path) -> None:
    server = start_host(
        "--model", str(tiny_model), "--worker-command", WEDGED, "--stall-timeout", "1",
        "--health-interval", "0.5", "--crash-backoff", "0", "--request-timeout", "60",
    )
    try:
        wedged_pid = server.worker()["pid"]
        with server.http(timeout=60) as http:
            response = http.post("/v1/chat/completions", json=LONG)
        # The stream's client learns that the worker went, rather than waiting forever.
        frames = [line for line in response.text.splitlines() if line.startswith("data: ")]
        assert frames[-1] == "data: [DONE]"
        assert json.loads(frames[-2][6:])["error"]["code"] == "worker_exited"
        worker = wait_until(lambda: (w := server.worker())["state"] == "ready" and w["pid"] != wedged_pid and w)
        assert worker["restarts"] == 1
        assert "hung" in worker["last_exit"]["reason"] and worker["last_exit"]["signal"] == "SIGKILL"
    finally:
        server.stop()


def test_a_worker_whose_parent_goes_during_load_exits_at_once(tiny_model: Path, tmp_path: Path) -> None:
    # The parent's runtime directory, with the parent's file in it: the worker did not make it.
    (tmp_path / ADMIN_TOKEN_FILE).write_text("the parent's")
    record = LaunchRecord("w1", str(tmp_path / "w1.sock"), str(tiny_model), "tiny")
    worker = subprocess.Popen(
        [sys.executable, "-m", "mlxhost.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    # The launch record, then end of file: the parent is gone before the model could load.
    out, err = worker.communicate(record.encode(), timeout=60)
    assert worker.returncode == 0, err
    assert WORKER_READY not in out.decode()  # it never offered to serve
    assert b"parent gone" in err
    assert not (tmp_path / "w1.sock").exists()
    assert (tmp_path / ADMIN_TOKEN_FILE).read_text() == "the parent's"
