"""Supervision of workers that never come up, with real processes: exits and hangs during load,
launch mismatches (protocol versions, ready lines), commands that cannot be spawned; each is
reported, and given up on rather than restarted for ever, while the host stays up.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxhost.testing import RunningHost, start_host, wait_until
from tests.host.supervision_helpers import SHORT_CHAT, exhausted

FAULTY = f"{sys.executable} {Path(__file__).parent / 'workers' / 'faulty.py'}"


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
