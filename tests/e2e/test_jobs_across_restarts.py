"""Managed jobs across host lifetimes: a host killed or stopped mid-job, and a second host on one state dir.

Each job is a real `python -m mlxhost.job` process under the host's runner, running mlx-lm's own
training on the tiny model; after a restart its record and its log (the admin API's SSE tail, as
`mlxhost jobs tail` follows it) say how it ended.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from mlxhost.testing import start_host, wait_until
from tests.e2e.jobs_helpers import (
    FOREVER,
    TERMINAL,
    _alive,
    dataset_fixture,  # noqa: F401 - the `dataset` fixture
    submit,
    tail,
    wait_running,
)

pytestmark = pytest.mark.slow


def test_a_job_killed_with_its_host_is_interrupted_after_a_restart(
    tiny_model: Path, tmp_path: Path, dataset: Path
) -> None:
    state = tmp_path / "state"
    first = start_host("--model", str(tiny_model), "--state-dir", str(state))
    try:
        with first.http(timeout=60.0) as admin:
            job = submit(
                admin,
                kind="finetune",
                model="tiny",
                data=str(dataset),
                iters=FOREVER,
                steps_per_report=1,
                num_layers=-1,
            )
            pid = wait_running(admin, job["id"])["pid"]
    finally:
        first.stop(signal.SIGKILL)
    # Its stdin closed with the host: the job ends itself rather than train on as an orphan.
    wait_until(lambda: not _alive(pid), timeout=30.0)
    with start_host("--model", str(tiny_model), "--state-dir", str(state)) as second, second.http() as admin:
        record = admin.get(f"/admin/jobs/{job['id']}").json()
        assert record["state"] == "interrupted"
        assert record["error"] == "job interrupted by a previous process exit"
        text, events = tail(admin, job["id"])
        terminal = [e for _, e in events if e["type"] in TERMINAL]
        assert len(terminal) == 1 and terminal[0]["type"] == "interrupted"
        assert events[-1][1] is terminal[0]
        assert text.endswith('event: end\ndata: {"reason": "done"}\n\n')
        assert not (state / "jobs" / job["id"] / "output").exists()


def test_a_host_stopped_mid_job_ends_the_job_and_exits_cleanly(
    tiny_model: Path, tmp_path: Path, dataset: Path
) -> None:
    state = tmp_path / "state"
    first = start_host("--model", str(tiny_model), "--state-dir", str(state), "--stop-timeout", "20")
    try:
        with first.http(timeout=60.0) as admin:
            job = submit(
                admin,
                kind="finetune",
                model="tiny",
                data=str(dataset),
                iters=FOREVER,
                steps_per_report=1,
                num_layers=-1,
            )
            queued = submit(admin, kind="quantize", model="tiny", group_size=32)
            pid = wait_running(admin, job["id"])["pid"]
    finally:
        assert first.stop(signal.SIGTERM) == 0, "".join(first.log[-30:])
    assert not _alive(pid)
    with start_host("--model", str(tiny_model), "--state-dir", str(state)) as second, second.http() as admin:
        stopped = admin.get(f"/admin/jobs/{job['id']}").json()
        assert (stopped["state"], stopped["error"]) == ("interrupted", "the host exited")
        never = admin.get(f"/admin/jobs/{queued['id']}").json()
        assert (never["state"], never["error"]) == ("interrupted", "the host stopped before the job ran")
        _, events = tail(admin, job["id"])
        assert [e["type"] for _, e in events if e["type"] in TERMINAL] == ["interrupted"]


def test_a_second_host_on_the_same_state_dir_runs_without_jobs(tiny_model: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with start_host("--model", str(tiny_model), "--state-dir", str(state)) as first:
        with (
            start_host("--model", str(tiny_model), "--state-dir", str(state)) as second,
            second.http() as admin,
        ):
            response = admin.get("/admin/jobs")
            assert response.status_code == 503 and response.json()["error"]["code"] == "jobs_unavailable"
        with first.http() as admin:
            assert admin.get("/admin/jobs").status_code == 200
