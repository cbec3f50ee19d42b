"""Isolation and supervision, with real processes: crashes, hangs, budgets, orphans, drains.

Workers that die or drain once up and the host that respawns them; what is left behind when the
host goes; in-process mode. Workers that never come up are in test_supervision_startup.py.
"""

from __future__ import annotations

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
import psutil
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until
from tests.host.supervision_helpers import SHORT_CHAT, exhausted

LONG_CHAT = {"messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 4000, "temperature": 0}


@pytest.fixture(scope="module")
def shared(tiny_model: Path) -> Iterator[RunningHost]:
    """One host for the tests that kill or drain its worker and then wait for the next one.

    No crash-loop backoff (a kill finds the respawn at once, never a 503 to retry) and room for
    every test's kill in the restart budget; liveness checks 5 times a second, and a shutdown that
    waits for streams, for the drain test. Each test first waits for a ready worker.
    """
    server = start_host(
        "--model", str(tiny_model), "--crash-backoff", "0", "--early-exit", "0", "--restart-limit", "20",
        "--health-interval", "0.2", "--shutdown-grace", "120",
    )  # fmt: skip
    yield server
    server.stop()


@pytest.fixture
def host(shared: RunningHost) -> RunningHost:
    wait_until(lambda: shared.worker()["state"] == "ready", timeout=60)
    return shared


def test_the_parent_never_loads_mlx(host: RunningHost) -> None:
    with host.http() as http:
        assert http.post("/v1/chat/completions", json=SHORT_CHAT).status_code == 200
    parent_maps = Path(f"/proc/{host.process.pid}/maps").read_text()
    worker_maps = Path(f"/proc/{host.worker()['pid']}/maps").read_text()
    assert "libmlx" in worker_maps
    assert "libmlx" not in parent_maps
    assert host.load_s is None  # nor does its ready record claim a model load
    imports = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, mlxhost.cli, mlxhost.host.serve, mlxhost.host.app;"
                "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm')))"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imports.stdout.strip() == "[]"


def test_worker_killed_mid_stream(host: RunningHost) -> None:
    before = host.worker()
    old_pid = before["pid"]
    events: list[str] = []
    with host.http() as http, http.stream("POST", "/v1/chat/completions", json={**LONG_CHAT, "stream": True}) as response:
        lines = response.iter_lines()
        for line in lines:
            if '"content":"' in line and '"content":""' not in line:
                break
        os.kill(old_pid, signal.SIGKILL)
        killed = time.monotonic()
        events = [line for line in lines if line.startswith("data: ")]
        ended = time.monotonic()
    assert ended - killed < 5
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2][6:])["error"]
    assert error["code"] == "worker_exited" and "SIGKILL" in error["message"]
    worker = wait_until(lambda: (w := host.worker())["state"] == "ready" and w)
    assert worker["pid"] != old_pid and worker["restarts"] == before["restarts"] + 1
    assert worker["last_exit"]["signal"] == "SIGKILL"
    with host.http() as http:
        assert http.post("/v1/chat/completions", json=SHORT_CHAT).status_code == 200


def test_worker_killed_mid_non_stream(host: RunningHost) -> None:
    old_pid = host.worker()["pid"]
    result: dict[str, httpx.Response] = {}

    def ask() -> None:
        with host.http() as http:
            result["response"] = http.post("/v1/chat/completions", json=LONG_CHAT)

    asking = threading.Thread(target=ask)
    asking.start()
    wait_until(lambda: host.worker()["in_flight"] == 1)
    time.sleep(0.2)
    os.kill(old_pid, signal.SIGKILL)
    killed = time.monotonic()
    asking.join(10)
    assert time.monotonic() - killed < 5
    response = result["response"]
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "worker_exited" and "SIGKILL" in error["message"]
    wait_until(lambda: host.worker()["state"] == "ready")
    with host.http() as http:
        assert http.post("/v1/chat/completions", json=SHORT_CHAT).status_code == 200


def test_restart_budget_is_exhausted_then_an_operator_restarts(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--restart-limit", "2", "--crash-backoff", "0")
    try:
        for _ in range(3):
            worker = wait_until(lambda: (w := server.worker())["state"] == "ready" and w)
            os.kill(worker["pid"], signal.SIGKILL)
            wait_until(lambda p=worker["pid"]: server.worker()["pid"] != p or server.worker()["state"] != "ready")
        wait_until(lambda: server.worker()["state"] == "exhausted")
        with server.http() as http:
            refused = http.post("/v1/chat/completions", json=SHORT_CHAT)
            assert refused.status_code == 503
            error = refused.json()["error"]
            assert error["code"] == "restart_limit_reached"
            assert "/admin/workers/" in error["message"] and "restart" in error["message"]
            assert http.get("/health").status_code == 503
            restart = http.post(f"/admin/workers/{server.worker()['id']}/restart")
            assert restart.status_code == 200 and restart.json()["worker"]["state"] == "ready"
        wait_until(lambda: server.worker()["state"] == "ready")
        with server.http() as http:
            assert http.post("/v1/chat/completions", json=SHORT_CHAT).status_code == 200
            assert http.get("/health").status_code == 200
    finally:
        server.stop()


def test_restarting_answers_503_with_retry_after(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--crash-backoff", "3", "--early-exit", "60")
    try:
        # Two early exits in a row: the third start waits crash_backoff seconds.
        for _ in range(2):
            worker = wait_until(lambda: (w := server.worker())["state"] == "ready" and w)
            os.kill(worker["pid"], signal.SIGKILL)
            wait_until(lambda p=worker["pid"]: server.worker()["pid"] != p or server.worker()["state"] == "restarting")
        wait_until(lambda: server.worker()["state"] == "restarting")
        with server.http() as http:
            response = http.post("/v1/chat/completions", json=SHORT_CHAT)
        assert response.status_code == 503
        assert response.headers["retry-after"]
        assert response.json()["error"]["code"] == "model_restarting"
    finally:
        server.stop()


def test_a_request_sent_while_the_worker_respawns_waits_for_it(host: RunningHost) -> None:
    # No standby: the respawn imports MLX afresh, seconds in which the worker is "restarting".
    before = host.worker()
    killed = before["pid"]
    os.kill(killed, signal.SIGKILL)
    wait_until(lambda: host.worker()["state"] == "restarting")
    with host.http(timeout=120) as http:
        response = http.post("/v1/chat/completions", json=SHORT_CHAT)
    assert response.status_code == 200, response.text  # no 503 to retry: it waited
    assert response.json()["usage"]["completion_tokens"] > 0
    worker = host.worker()
    assert worker["pid"] != killed and worker["state"] == "ready"
    assert worker["restarts"] == before["restarts"] + 1


def test_killing_the_parent_leaves_no_worker_behind(tiny_model: Path, tmp_path: Path) -> None:
    server = start_host("--model", str(tiny_model), "--runtime-dir", str(tmp_path))
    worker = psutil.Process(server.worker()["pid"])
    server.process.kill()
    server.process.wait()

    def gone() -> bool:
        try:
            return worker.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(gone, timeout=20)
    wait_until(lambda: not list(tmp_path.iterdir()))  # nor its socket or runtime directory


def test_the_runtime_directory_is_private_and_removed(tiny_model: Path, tmp_path: Path) -> None:
    server = start_host("--model", str(tiny_model), "--runtime-dir", str(tmp_path))
    (runtime,) = list(tmp_path.iterdir())
    assert runtime.stat().st_mode & 0o777 == 0o700
    assert any(p.suffix == ".sock" for p in runtime.iterdir())
    assert server.stop() == 0
    assert not runtime.exists()


def test_in_process_mode_serves_without_a_worker(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--in-process")
    try:
        with server.client() as client:
            reply = client.chat.completions.create(model="x", messages=SHORT_CHAT["messages"], max_tokens=3)  # type: ignore[arg-type]
        assert reply.usage is not None and reply.usage.completion_tokens == 3
        health = server.health()
        assert "engine" in health and "workers" not in health
        assert "libmlx" in Path(f"/proc/{server.process.pid}/maps").read_text()
        assert not [p for p in psutil.Process(server.process.pid).children() if "mlxhost.worker" in " ".join(p.cmdline())]
        # Its ready record says how long it took to load the model, as its ready line does.
        loaded = next(line for line in server.log if "mlxhost ready:" in line)
        assert server.load_s is not None and f"(loaded in {server.load_s:.2f}s)" in loaded
    finally:
        assert server.stop() == 0


def test_a_gone_worker_shows_no_pid_and_no_memory(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--restart-limit", "0")
    try:
        worker = wait_until(lambda: (w := server.worker())["memory"] and w)
        os.kill(worker["pid"], signal.SIGKILL)
        gone = exhausted(server)
        assert gone["pid"] is None and gone["memory"] is None
        assert gone["last_exit"]["pid"] == worker["pid"] and gone["last_exit"]["signal"] == "SIGKILL"
    finally:
        assert server.stop() == 0


def read_stream(lines) -> list[str]:  # type: ignore[no-untyped-def]
    """The `data:` frames left in a stream, up to its end."""
    return [line for line in lines if line.startswith("data: ")]


def first_text(lines) -> None:  # type: ignore[no-untyped-def]
    for line in lines:
        if '"content":"' in line and '"content":""' not in line:
            return


def assert_finished(frames: list[str]) -> None:
    assert frames[-1] == "data: [DONE]"
    assert not [f for f in frames if '"error"' in f], frames[-3:]
    finish = [json.loads(f[6:])["choices"][0]["finish_reason"] for f in frames[:-1] if '"choices":[{' in f]
    assert finish[-1] in ("length", "stop")


def test_ctrl_c_lets_a_running_stream_finish(tiny_model: Path) -> None:
    # As at a terminal: the host is a foreground job, and Ctrl-C signals its whole process group.
    server = start_host(
        "--model", str(tiny_model), "--health-interval", "0.2", "--shutdown-grace", "120", new_session=True
    )
    try:
        body = {**LONG_CHAT, "max_tokens": 3000, "stream": True}
        with server.http(timeout=120) as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()
            first_text(lines)
            os.killpg(server.process.pid, signal.SIGINT)
            frames = read_stream(lines)
        assert_finished(frames)
        assert server.process.wait(60) == 0
    finally:
        if server.process.poll() is None:
            server.stop()
    assert "worker_exited" not in "".join(server.log)


def test_a_worker_draining_on_its_own_is_not_taken_for_hung(host: RunningHost) -> None:
    # The shared host checks liveness every 0.2 s: the seconds this stream drains span many checks.
    pid = host.worker()["pid"]
    body = {**LONG_CHAT, "max_tokens": 3000, "stream": True}
    with host.http(timeout=120) as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        first_text(lines)
        os.kill(pid, signal.SIGTERM)  # it drains: its /health says 503 "stopping"
        frames = read_stream(lines)
    assert_finished(frames)
    worker = wait_until(lambda: (w := host.worker())["state"] == "ready" and w["pid"] != pid and w, timeout=60)
    assert worker["last_exit"]["code"] == 0 and worker["last_exit"]["signal"] is None
