"""Jobs under stress: a full state directory, a long log replayed, a full queue, a deleted lock or store.

Real hosts with real job processes, as in test_jobs.py; what is asserted is what a user sees:
status codes and error bodies, the host's log, the files under the state directory.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until
from tests.e2e.test_jobs import FOREVER, _alive, submit, tail, wait_job, wait_running, write_dataset
from tests.filesystems import fill, small_tmpfs

pytestmark = pytest.mark.slow

TERMINAL = {"succeeded", "failed", "cancelled", "interrupted"}
MAX_QUEUED = 16
MAX_TAILS = 16


def forever(admin: httpx.Client, dataset: Path) -> dict[str, Any]:
    """A fine-tune that runs until it is stopped, holding the runner: later jobs stay queued."""
    return submit(
        admin, kind="finetune", model="tiny", data=str(dataset), iters=FOREVER, steps_per_report=1, num_layers=-1
    )


def chat(host: RunningHost) -> int:
    with host.http(timeout=60.0) as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
    return response.status_code


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"))


# -- a full state directory ------------------------------------------------------------------------


def test_a_full_state_dir_fails_the_job_not_the_host_and_a_restart_serves(
    tiny_model: Path, tmp_path: Path, dataset: Path
) -> None:
    with small_tmpfs(tmp_path / "state", 3072) as state:
        args = ("--model", str(tiny_model), "--state-dir", str(state), "--prompt-cache-disk-mb", "0")
        host = start_host(*args)
        try:
            with host.http(timeout=60.0) as admin:
                job = forever(admin, dataset)
                wait_running(admin, job["id"])
                fill(state)
                # The job's progress can no longer be recorded (SQLite's WAL grows with each write).
                wait_until(lambda: any("is full: jobs cannot be recorded" in line for line in host.log), 60.0)
                if admin.get(f"/admin/jobs/{job['id']}").json()["state"] == "running":
                    admin.post(f"/admin/jobs/{job['id']}/cancel")
                ended = wait_job(admin, job["id"], timeout=120.0)
                assert ended["state"] in TERMINAL and ended["pid"] is None and ended["error"], ended
                assert host.process.poll() is None, "".join(host.log[-40:])
                assert chat(host) == 200
                health = admin.get("/health")
                assert health.status_code == 200  # serving goes on: the host is healthy, its jobs are not
                assert f"the state directory {state} is full" in health.json()["state_dir_problem"]

                refused = admin.post("/admin/jobs", json={"kind": "quantize", "model": "tiny"})
                assert refused.status_code == 507, refused.text
                error = refused.json()["error"]
                assert error["code"] == "state_dir_full" and str(state) in error["message"]
                assert "retry-after" in refused.headers
                assert [j["id"] for j in admin.get("/admin/jobs").json()["data"]] == [job["id"]]
                assert sorted(p.name for p in (state / "jobs").iterdir()) == [job["id"]]  # no half-made folder
        finally:
            assert host.stop() == 0, "".join(host.log[-40:])

        # Still full: the host starts and serves, its jobs as far as memory and the store know.
        with start_host(*args) as again, again.http() as admin:
            assert chat(again) == 200
            shown = admin.get(f"/admin/jobs/{job['id']}").json()
            assert shown["state"] in TERMINAL, shown
            assert admin.post("/admin/jobs", json={"kind": "quantize", "model": "tiny"}).status_code == 507


# -- a long log, replayed ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def host(tiny_model: Path, state: Path) -> Iterator[RunningHost]:
    with start_host("--model", str(tiny_model), "--state-dir", str(state)) as running:
        yield running


@pytest.fixture(scope="module")
def long_log_job(host: RunningHost, state: Path) -> dict[str, Any]:
    """A finished job whose log has 100,000 lines (about 26 MB), as a long fine-tune leaves."""
    with host.http(timeout=60.0) as admin:
        job = wait_job(admin, submit(admin, kind="quantize", model="tiny", bits=4, group_size=32)["id"])
    assert job["state"] == "succeeded", job
    log = state / "jobs" / job["id"] / "log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    progress = {
        "type": "progress", "ts": 1, "iteration": 0, "total": 100_000, "train_loss": 1.2345678,
        "learning_rate": 1e-5, "iterations_per_s": 3.21, "tokens_per_s": 1234.5, "peak_memory_bytes": 123456789,
        "note": "x" * 60,
    }  # fmt: skip
    with log.open("w") as file:
        file.write(lines[0])
        for i in range(100_000):
            file.write(json.dumps({**progress, "iteration": i}) + "\n")
        file.writelines(lines[1:])
    return {**job, "log_lines": len(lines) + 100_000}


def stream_gaps(host: RunningHost, stop: threading.Event, gaps: list[float], errors: list[str]) -> None:
    """Stream chat completions back to back until `stop`; the gap between each two SSE frames."""
    body = {
        "model": "tiny", "messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 8000,
        "temperature": 0, "stream": True,
    }  # fmt: skip
    with host.http(timeout=120.0, admin=False) as http:
        while not stop.is_set():
            with http.stream("POST", "/v1/chat/completions", json=body) as response:
                if response.status_code != 200:
                    errors.append(f"{response.status_code}: {response.read()!r}")
                    return
                last = time.monotonic()
                for line in response.iter_lines():
                    now = time.monotonic()
                    if line.startswith("data: "):
                        gaps.append(now - last)
                        last = now
                    if stop.is_set():
                        break


def test_replaying_long_logs_leaves_other_streams_and_health_flowing(
    host: RunningHost, long_log_job: dict[str, Any]
) -> None:
    stop = threading.Event()
    gaps: list[float] = []
    errors: list[str] = []
    streamer = threading.Thread(target=stream_gaps, args=(host, stop, gaps, errors))
    streamer.start()
    wait_until(lambda: len(gaps) > 50 or errors, timeout=60.0)
    quiet = max(gaps[1:])
    gaps.clear()  # only what happens while the tails replay counts

    received: list[int] = []

    def replay() -> None:
        # Counted, not parsed: this process's own GIL must not be what delays the stream it measures.
        with (
            host.http(timeout=300.0) as admin,
            admin.stream("GET", f"/admin/jobs/{long_log_job['id']}/events") as response,
        ):
            text = response.read()
        assert text.endswith(b'event: end\ndata: {"reason": "done"}\n\n')
        received.append(text.count(b"\nid: "))

    tails = [threading.Thread(target=replay) for _ in range(4)]
    health_s: list[float] = []
    try:
        for thread in tails:
            thread.start()
        with host.http(timeout=60.0) as admin:
            while any(t.is_alive() for t in tails):
                started = time.monotonic()
                assert admin.get("/health").status_code == 200
                health_s.append(time.monotonic() - started)
                time.sleep(0.2)
        for thread in tails:
            thread.join()
    finally:
        stop.set()
        streamer.join(60.0)
    assert not errors, errors
    assert received == [long_log_job["log_lines"]] * 4  # every line, to each
    assert gaps, "the stream sent nothing while the tails replayed"
    print(
        f"largest frame gap {max(gaps):.3f}s over {len(gaps)} frames (before the tails: {quiet:.3f}s); "
        f"largest /health {max(health_s):.3f}s"
    )
    # Before: one replay of this log left streams without a frame for ~10 s (four: for ~40 s). The
    # bound is wide, for a loaded machine: here the largest gap was 0.13-0.27 s.
    assert max(gaps) < 5.0
    assert max(health_s) < 5.0


def test_tails_past_the_cap_are_refused_with_retry_after(host: RunningHost, long_log_job: dict[str, Any]) -> None:
    url = f"/admin/jobs/{long_log_job['id']}/events"
    with host.http(timeout=60.0) as admin:
        open_tails = []
        try:
            for _ in range(MAX_TAILS):
                # Unread: the 26 MB backlog does not fit in the socket's buffers, so each stays open.
                response = admin.send(admin.build_request("GET", url), stream=True)
                assert response.status_code == 200
                open_tails.append(response)
            refused = admin.get(url)
            assert refused.status_code == 429, refused.text[:300]
            assert refused.json()["error"]["code"] == "too_many_tails"
            assert f"({MAX_TAILS})" in refused.json()["error"]["message"]
            assert int(refused.headers["retry-after"]) > 0
            open_tails.pop().close()
            # The slot comes back once the host sees the client gone.
            wait_until(lambda: _tail_status(admin, url) == 200, timeout=30.0)
        finally:
            for response in open_tails:
                response.close()


def _tail_status(admin: httpx.Client, url: str) -> int:
    with admin.stream("GET", url) as response:
        return response.status_code


# -- a full queue --------------------------------------------------------------------------------------


def test_a_full_queue_refuses_cleanly_and_a_cancelled_job_frees_its_slot(host: RunningHost, dataset: Path) -> None:
    with host.http(timeout=60.0) as admin:
        running = forever(admin, dataset)
        try:
            wait_running(admin, running["id"])
            queued = [submit(admin, kind="quantize", model="tiny")["id"] for _ in range(MAX_QUEUED)]
            before = {j["id"] for j in admin.get("/admin/jobs").json()["data"]}
            refused = admin.post("/admin/jobs", json={"kind": "quantize", "model": "tiny"})
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "queue_full", refused.text
            assert admin.post(f"/admin/jobs/{queued[0]}/cancel").status_code == 202
            # Before: a 500 (anyio.WouldBlock), and a record left queued forever.
            again = admin.post("/admin/jobs", json={"kind": "quantize", "model": "tiny"})
            assert again.status_code == 202, again.text
            queued.append(again.json()["id"])
            assert admin.post("/admin/jobs", json={"kind": "quantize", "model": "tiny"}).status_code == 429
            after = {j["id"]: j["state"] for j in admin.get("/admin/jobs").json()["data"]}
            assert set(after) - before == {again.json()["id"]}  # the refused ones left nothing
            assert sum(state == "queued" for state in after.values()) == MAX_QUEUED
            assert f"({MAX_QUEUED})" in refused.json()["error"]["message"]
            assert int(refused.headers["retry-after"]) > 0
        finally:
            # The line first: cancelled first, the running job would hand the machine to the next
            # one in line before its own cancel arrived (seen under load), and that one would run.
            for job_id in [*queued, running["id"]]:
                admin.post(f"/admin/jobs/{job_id}/cancel")
        assert wait_job(admin, running["id"], timeout=60.0)["state"] == "cancelled"
        assert all(admin.get(f"/admin/jobs/{j}").json()["state"] == "cancelled" for j in queued[1:])


# -- the state directory's lock and store, deleted -----------------------------------------------------


def test_a_deleted_lock_file_does_not_let_a_second_host_take_over(
    tiny_model: Path, tmp_path: Path, dataset: Path
) -> None:
    state = tmp_path / "state"
    with start_host("--model", str(tiny_model), "--state-dir", str(state)) as first, first.http() as admin:
        job = forever(admin, dataset)
        pid = wait_running(admin, job["id"])["pid"]
        (state / "lock").unlink(missing_ok=True)  # a tidy-up of what looks like a stale lock file
        with start_host("--model", str(tiny_model), "--state-dir", str(state)) as second, second.http() as other:
            response = other.get("/admin/jobs")
            assert response.status_code == 503 and response.json()["error"]["code"] == "jobs_unavailable"
        assert _alive(pid)
        assert admin.get(f"/admin/jobs/{job['id']}").json()["state"] == "running"
        admin.post(f"/admin/jobs/{job['id']}/cancel")
        assert wait_job(admin, job["id"], timeout=60.0)["state"] == "cancelled"


def test_a_deleted_job_store_is_written_again_and_its_jobs_outlive_a_restart(
    tiny_model: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    args = ("--model", str(tiny_model), "--state-dir", str(state))
    with start_host(*args) as first, first.http(timeout=60.0) as admin:
        job = wait_job(admin, submit(admin, kind="quantize", model="tiny", bits=4, group_size=32)["id"])
        assert job["state"] == "succeeded", job
        for file in state.glob("jobs.db*"):
            file.unlink()
        wait_until(lambda: (state / "jobs.db").exists(), timeout=30.0)
        # The host's log reaches `first.log` through a reader thread: the line may lag the file.
        wait_until(lambda: any("jobs.db was deleted" in line for line in first.log), timeout=10.0)
    with start_host(*args, timeout=120.0) as second, second.http() as admin:
        kept = admin.get(f"/admin/jobs/{job['id']}").json()
        assert kept["state"] == "succeeded", kept
        served = {m["id"] for m in admin.get("/v1/models").json()["data"]}
        assert job["result"]["model"] in served
        _, events = tail(admin, job["id"])
        assert events[-1][1]["type"] == "succeeded"
