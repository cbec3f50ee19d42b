"""Warm standby workers through the real host: a killed worker's successor is the standby, and no
standby outlives its host, however the host ends."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import psutil

from mlxhost.testing import RunningHost, start_host, wait_until

SHORT_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
WAIT = 120.0  # a standby imports MLX, mlx-lm and transformers first, on a busy machine


def ready_standby(host: RunningHost) -> dict[str, Any]:
    """The host's ready standby, once there is one."""
    return wait_until(  # type: ignore[no-any-return]
        lambda: next((s for s in host.health()["standby"] if s["state"] == "ready"), None), timeout=WAIT
    )


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_worker_is_replaced_by_the_standby(tiny_model: Path) -> None:
    with start_host("--model", str(tiny_model), "--crash-backoff", "0", "--standby-workers", "1") as host:
        standby = ready_standby(host)
        assert standby["rss_bytes"] > 0
        assert "mlxhost.worker" in " ".join(psutil.Process(standby["pid"]).cmdline())
        worker = host.worker()
        assert standby["pid"] != worker["pid"]
        with host.http() as http:
            (listed,) = http.get("/admin/state").json()["standby"]
            assert listed["pid"] == standby["pid"] and listed["state"] == "ready" and listed["rss_bytes"] > 0
            metrics = http.get("/metrics").text
            assert 'mlxhost_standby_workers{state="ready"} 1.0' in metrics
            assert "mlxhost_standby_rss_bytes " in metrics

            os.kill(worker["pid"], signal.SIGKILL)
            respawned = wait_until(
                lambda: (w := host.worker())["state"] == "ready" and w["pid"] != worker["pid"] and w,
                timeout=WAIT,
            )
            assert respawned["pid"] == standby["pid"]  # the standby became the worker
            assert respawned["restarts"] == 1 and respawned["last_exit"]["signal"] == "SIGKILL"
            assert http.post("/v1/chat/completions", json=SHORT_CHAT).status_code == 200
        replacement = ready_standby(host)
        assert replacement["pid"] not in (standby["pid"], worker["pid"])


def test_a_host_stopped_by_sigterm_leaves_no_standby(tiny_model: Path) -> None:
    host = start_host("--model", str(tiny_model), "--standby-workers", "1")
    try:
        pid = ready_standby(host)["pid"]
    finally:
        assert host.stop() == 0
    assert gone(pid)


def test_a_host_killed_by_sigkill_leaves_no_standby(tiny_model: Path) -> None:
    host = start_host("--model", str(tiny_model), "--standby-workers", "1")
    pid = ready_standby(host)["pid"]
    worker = host.worker()["pid"]
    host.stop(signal.SIGKILL)
    # Nobody closes it: it reads the end of its stdin, and exits.
    wait_until(lambda: gone(pid) and gone(worker), timeout=30)
