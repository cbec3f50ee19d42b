"""Isolation and supervision, with real processes: crashes, hangs, budgets, orphans, drains."""

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

FAULTY = f"{sys.executable} {Path(__file__).parent / 'workers' / 'faulty.py'}"
LONG_CHAT = {"messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 4000, "temperature": 0}
SHORT_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


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


def test_a_worker_that_exits_during_load_is_reported(tiny_model: Path) -> None:
    server = start_host(
        "--model", str(tiny_model),
        "--worker-command", f"{FAULTY} exit-during-load",
        "--restart-limit", "1", "--crash-backoff", "0.1",
    )
    try:
        worker = wait_until(lambda: (w := server.worker())["state"] == "exhausted" and w)
        assert worker["last_exit"]["code"] == 3
        assert worker["last_exit"]["ready"] is False
        assert worker["last_exit"]["reason"] == "fatal: the weights file is corrupt"
        with server.http() as http:
            response = http.post("/v1/chat/completions", json=SHORT_CHAT)
            assert response.status_code == 503
            assert "the weights file is corrupt" in response.json()["error"]["message"]
            assert http.get("/health").json()["status"] == "unavailable"
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def never_ready(tiny_model: Path) -> Iterator[RunningHost]:
    """A worker that never says it is ready: each try outlasts the restart window, and one respawn."""
    server = start_host(
        "--model", str(tiny_model), "--worker-command", f"{FAULTY} never-ready",
        "--load-timeout", "0.5", "--restart-window", "0.2", "--restart-limit", "1", "--crash-backoff", "0",
    )  # fmt: skip
    yield server
    assert server.stop() == 0


def test_a_worker_that_never_becomes_ready_times_out(never_ready: RunningHost) -> None:
    worker = wait_until(lambda: (w := never_ready.worker())["state"] == "exhausted" and w)
    assert worker["last_exit"]["reason"] == "did not become ready within 0.5s"
    assert worker["last_exit"]["signal"] == "SIGKILL"


@pytest.fixture(scope="module")
def version_99(tiny_model: Path) -> Iterator[RunningHost]:
    """The real worker handed a launch record of protocol version 99: it refuses it, and is not tried again."""
    server = start_host("--model", str(tiny_model), "--worker-command", f"{FAULTY} version 99", "--crash-backoff", "0")
    yield server
    assert server.stop() == 0
    assert "".join(server.log).count("spawned pid") == 1  # nor as it stopped


def test_the_worker_refuses_another_protocol_version(
    tiny_model: Path, tmp_path: Path, version_99: RunningHost
) -> None:
    record = {"version": 99, "worker_id": "w", "socket": str(tmp_path / "s"), "model_path": str(tiny_model), "model_id": "m", "options": {}}
    refusals = [
        (json.dumps(record) + "\n", "protocol version 99"),
        ("not json\n", "not JSON"),
        (json.dumps({**record, "version": 1, "socket": 5}) + "\n", "'socket' must be a non-empty string"),
    ]
    # Independent processes, each seconds of imports: started at once, and read one by one.
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "mlxhost.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(len(refusals) + 1)
    ]
    try:
        for worker, (stdin, said) in zip(workers, refusals, strict=False):
            _, stderr = worker.communicate(stdin, timeout=60)
            assert worker.returncode == 2
            assert said in stderr
        # No record at all is a parent that went before it needed this process (a standby): not a refusal.
        _, stderr = workers[-1].communicate("", timeout=60)
        assert workers[-1].returncode == 0 and "launch record" not in stderr and "Traceback" not in stderr
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    # The parent reports the worker's reason.
    worker_state = wait_until(lambda: (w := version_99.worker())["state"] == "exhausted" and w)
    assert worker_state["last_exit"]["code"] == 2
    assert "protocol version 99" in worker_state["last_exit"]["reason"]


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


def exhausted(server: RunningHost) -> dict:  # type: ignore[type-arg]
    return wait_until(lambda: (w := server.worker())["state"] == "exhausted" and w, timeout=60)  # type: ignore[no-any-return]


def test_a_worker_that_cannot_be_spawned_leaves_the_host_up(tiny_model: Path) -> None:
    server = start_host(
        "--model", str(tiny_model), "--worker-command", "/nonexistent",
        "--restart-limit", "2", "--crash-backoff", "0.1",
    )
    try:
        worker = exhausted(server)
        why = "cannot start the worker: [Errno 2] No such file or directory: '/nonexistent'"
        assert worker["last_exit"]["reason"] == why
        assert worker["restarts"] == 2 and worker["pid"] is None and worker["memory"] is None
        with server.http() as http:
            health = http.get("/health")
            assert health.status_code == 503
            assert health.json()["workers"][0]["last_exit"]["reason"] == why
            response = http.post("/v1/chat/completions", json=SHORT_CHAT)
            assert response.status_code == 503
            assert why in response.json()["error"]["message"]
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("ready-socket", "its ready line names the socket"),
        ("ready-version 7", "its ready line speaks protocol version 7, this host 1"),
        ("version 99", "launch record protocol version 99"),  # the real worker, exit status 2
    ],
)
def test_a_launch_mismatch_is_not_tried_again(
    tiny_model: Path, mode: str, said: str, request: pytest.FixtureRequest
) -> None:
    if mode == "version 99":  # shared with the test above: its fixture stops it and counts its spawns
        server: RunningHost = request.getfixturevalue("version_99")
    else:
        server = start_host(
            "--model", str(tiny_model), "--worker-command", f"{FAULTY} {mode}", "--crash-backoff", "0"
        )
    try:
        worker = exhausted(server)
        assert said in worker["last_exit"]["reason"]
        assert worker["restarts"] == 0 and worker["last_exit"]["ready"] is False
        if mode.startswith("ready-"):  # it said it was ready, wrongly: the host killed it
            assert worker["last_exit"]["signal"] == "SIGKILL"
        else:
            assert worker["last_exit"]["code"] == 2
        with server.http() as http:
            error = http.post("/v1/chat/completions", json=SHORT_CHAT).json()["error"]
        assert error["code"] == "worker_cannot_start" and said in error["message"]
    finally:
        if mode != "version 99":
            assert server.stop() == 0
    if mode != "version 99":
        assert "".join(server.log).count("spawned pid") == 1


def test_a_load_that_keeps_timing_out_is_given_up(never_ready: RunningHost) -> None:
    # Each try outlasts the restart window (as a 15-minute load outlasts a 60 s window), so the
    # window alone would never run out: failed starts in a row are counted too.
    worker = exhausted(never_ready)
    assert worker["last_exit"]["reason"] == "did not become ready within 0.5s"
    assert worker["restarts"] == 1
    with never_ready.http() as http:
        error = http.post("/v1/chat/completions", json=SHORT_CHAT).json()["error"]
    assert error["code"] == "restart_limit_reached" and "failed to start 2 times in a row" in error["message"]


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
