"""The console's fold of managed jobs: `HostState.jobs` and the job.* and execution.changed events,
into one `JobRow` per job (its state, progress, train losses for a sparkline, age). No host and no
Textual app.

The fixed state and events (the console's fixed ones, with jobs) are also what the console's job
snapshots draw (tests/e2e/test_tui_jobs.py imports them).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlxhost.wire.admin import AdminEvent, HostState, UnknownEvent
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.text import describe
from tests.unit.test_console_model import EVENTS, NOW, STATE_JSON, event

RUNNING, QUEUED, DONE = "7f3a9c01", "0b1d2e3f", "c0ffee42"


def ms(ago: float) -> int:
    return int((NOW - ago) * 1000)


def job_data(job_id: str, kind: str, model: str, state: str, ago: float, **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id, "kind": kind, "model": model, "state": state, "options": {}, "progress": None,
        "result": None, "error": None, "pid": None, "created_at": ms(ago),
        "started_at": None, "ended_at": None, **fields,
    }  # fmt: skip


JOBS_STATE_JSON: dict[str, Any] = {
    **STATE_JSON,
    "execution": {"shared": 1, "exclusive": None, "waiting": [RUNNING], "paused": []},
    "standby": [],
    "jobs": [
        job_data(QUEUED, "quantize", "llama-3b", "queued", 20, options={"bits": 4, "group_size": 64}),
        job_data(
            RUNNING, "finetune", "qwen-0.5b", "queued", 30,
            options={"data": "/data/chat", "iters": 100, "batch_size": 4},
        ),
        job_data(
            DONE, "quantize", "qwen-0.5b", "succeeded", 900, started_at=ms(890), ended_at=ms(848),
            result={"model": f"qwen-0.5b-q4-{DONE}", "path": f"/state/jobs/{DONE}/output"},
        ),
    ],
}  # fmt: skip

JOBS_STATE = HostState.from_json(JOBS_STATE_JSON)


def progress(seq: int, ago: float, step: int, train: float | None, val: float | None = None) -> AdminEvent:
    fields = {"iteration": step, "total": 100, "train_loss": train, "val_loss": val}
    return event(seq, "job.progress", ago, job=RUNNING, **fields)


# After the console's fixed events (up to 52, 0.5 s ago): the last running session ends, so the
# waiting fine-tune gets the lease, pausing the resident worker, starts and reports.
JOB_EVENTS = [
    *EVENTS,
    event(53, "session.closed", 0.45, session="s-0123456789ab", model="qwen-0.5b", tokens=340, age_ms=12950,
          kind="completed", finish_reason="stop"),
    event(54, "execution.changed", 0.42, owner=RUNNING, change="held", paused=["qwen-0.5b"]),
    event(55, "job.started", 0.4, job=RUNNING, pid=6001),
    progress(56, 0.3, 10, 3.10),
    progress(57, 0.2, 20, 2.80),
    progress(58, 0.1, 30, 2.55, 2.90),
    progress(59, 0.0, 40, 2.41),
]  # fmt: skip


def folded() -> ConsoleModel:
    model = ConsoleModel()
    model.ingest(NOW, JOBS_STATE, JOB_EVENTS)
    return model


def test_the_fixed_jobs_read_as_records() -> None:
    assert not [e for e in JOB_EVENTS if isinstance(e, UnknownEvent)]
    assert JOBS_STATE.to_json() == JOBS_STATE_JSON
    assert [j.id for j in JOBS_STATE.jobs] == [QUEUED, RUNNING, DONE]


def test_a_snapshot_lists_its_jobs_newest_first_with_their_state() -> None:
    model = ConsoleModel.from_snapshot(JOBS_STATE, NOW)
    assert list(model.jobs) == [QUEUED, RUNNING, DONE]
    waiting, queued, done = model.jobs[RUNNING], model.jobs[QUEUED], model.jobs[DONE]
    # The fine-tune waits for the running sessions; the quantize job only waits its turn.
    assert (waiting.state, waiting.execution, waiting.shown_state()) == ("queued", "waiting", "waiting")
    assert (queued.shown_state(), queued.age(NOW)) == ("queued", 20.0)
    assert (done.shown_state(), done.terminal, done.result) == ("succeeded", True, f"qwen-0.5b-q4-{DONE}")
    assert done.age(NOW + 1000) == 42.0  # how long it ran, for good
    assert (done.total, done.train_loss, list(done.losses)) == (0, None, [])  # a quantize reports no progress


def test_events_start_a_job_and_fold_its_progress() -> None:
    model = folded()
    job = model.jobs[RUNNING]
    assert (job.shown_state(), job.execution) == ("running", "held")
    assert (job.iteration, job.total, job.fraction) == (40, 100, 0.4)
    assert list(job.losses) == [3.10, 2.80, 2.55, 2.41]
    assert (job.train_loss, job.val_loss) == (2.41, 2.90)  # the latest of each, though reported apart
    assert job.age(NOW) == pytest.approx(0.4)  # since it started
    assert model.seq == 59


def test_progress_is_quiet_and_the_rest_is_logged() -> None:
    model = ConsoleModel()
    log = model.ingest(NOW, JOBS_STATE, JOB_EVENTS)
    logged = [e.type for e in log if isinstance(e, AdminEvent) and e.seq > 53]
    assert logged == ["execution.changed", "job.started"]


def test_a_snapshot_repeating_an_event_adds_no_loss() -> None:
    model = folded()

    def as_now(data: dict[str, Any]) -> None:
        data["seq"] = 59
        data["execution"] = {"shared": 0, "exclusive": RUNNING, "waiting": [], "paused": ["qwen-0.5b"]}
        running = data["jobs"][1]
        running.update(state="running", pid=6001, started_at=ms(0.4))
        running["progress"] = {"iteration": 40, "total": 100, "train_loss": 2.41, "val_loss": 2.90}

    snapshot = copy.deepcopy(JOBS_STATE_JSON)
    as_now(snapshot)
    for _ in range(3):  # the console polls the state each second
        model.ingest(NOW, state=HostState.from_json(snapshot))
    job = model.jobs[RUNNING]
    assert list(job.losses) == [3.10, 2.80, 2.55, 2.41] and job.execution == "held"
    # A report the events skipped (they are at most one a second) shows up from the next snapshot.
    snapshot["seq"] = 60
    snapshot["jobs"][1]["progress"] = {"iteration": 45, "total": 100, "train_loss": 2.30, "val_loss": 2.90}
    model.ingest(NOW, state=HostState.from_json(snapshot))
    assert list(job.losses)[-1] == 2.30 and job.iteration == 45
    # An event that comes late, after what the snapshot said, moves nothing back.
    model.ingest(NOW, events=[progress(61, 0, 44, 2.35)])
    assert (job.iteration, list(job.losses)[-1]) == (45, 2.30)


def test_an_older_snapshot_changes_no_job() -> None:
    model = folded()
    model.ingest(NOW, state=JOBS_STATE)  # seq 40: before the job started
    job = model.jobs[RUNNING]
    assert (job.state, job.execution, job.iteration) == ("running", "held", 40)


def test_a_job_queued_then_cancelled_then_released() -> None:
    model = folded()
    model.ingest(NOW, events=[event(60, "job.queued", 0, job="a1b2c3d4", kind="fuse", model="qwen-0.5b")])
    assert list(model.jobs)[0] == "a1b2c3d4"  # newest first
    fuse = model.jobs["a1b2c3d4"]
    assert (fuse.kind, fuse.model, fuse.shown_state()) == ("fuse", "qwen-0.5b", "queued")
    assert fuse.age(NOW + 1) == 1.0
    model.ingest(NOW, events=[
        event(61, "job.finished", -0.5, job="a1b2c3d4", state="cancelled", error="cancelled by the operator"),
        event(62, "job.finished", -2.0, job=RUNNING, state="failed", error="the job process exited"),
        event(63, "execution.changed", -2.1, owner=RUNNING, change="released"),
    ])  # fmt: skip
    assert (fuse.shown_state(), fuse.terminal, fuse.error) == ("cancelled", True, "cancelled by the operator")
    job = model.jobs[RUNNING]
    assert (job.shown_state(), job.execution) == ("failed", None)
    assert job.age(NOW + 60) == pytest.approx(2.4)
    # A late progress event does not bring a finished job back to life.
    model.ingest(NOW, events=[progress(64, -3, 50, 2.0)])
    assert (job.state, job.iteration) == ("failed", 40)


def test_a_succeeded_job_says_which_model_it_made() -> None:
    model = folded()
    made = f"qwen-0.5b-lora-{RUNNING}"
    model.ingest(NOW, events=[event(60, "job.finished", 0, job=RUNNING, state="succeeded", model=made)])
    job = model.jobs[RUNNING]
    assert (job.shown_state(), job.result) == ("succeeded", f"qwen-0.5b-lora-{RUNNING}")
    assert f"qwen-0.5b-lora-{RUNNING}" in job.text()


def test_a_job_the_host_no_longer_lists_goes() -> None:
    model = folded()
    newer = {**JOBS_STATE_JSON, "seq": 61, "jobs": JOBS_STATE_JSON["jobs"][:2]}
    model.ingest(NOW, state=HostState.from_json(newer))
    assert DONE not in model.jobs and list(model.jobs[RUNNING].losses) == [3.10, 2.80, 2.55, 2.41]


def test_events_for_a_job_not_listed_change_nothing() -> None:
    model = folded()
    before = copy.deepcopy(model.jobs)
    model.ingest(NOW, events=[
        event(60, "job.started", 0, job="ffffffff", pid=1),
        event(61, "execution.changed", 0, owner="ffffffff", change="waiting"),
    ])  # fmt: skip
    assert model.jobs == before and model.seq == 61


def test_a_host_from_before_jobs_has_none() -> None:
    older = {k: v for k, v in JOBS_STATE_JSON.items() if k not in ("jobs", "execution")}
    model = ConsoleModel.from_snapshot(HostState.from_json(older), NOW)
    assert model.jobs == {}


def test_job_events_read_as_one_line_each() -> None:
    lines = {e.seq: describe(e) for e in JOB_EVENTS if e.seq > 53}
    assert lines[54] == f"{RUNNING}: runs alone, qwen-0.5b paused"
    assert lines[55] == f"{RUNNING}: started, pid 6001"
    assert lines[58] == f"{RUNNING}: 30/100, train loss 2.550, val loss 2.900"
    others: dict[str, tuple[dict[str, Any], str]] = {
        "job.queued": ({"job": "j1", "kind": "finetune", "model": "m"}, "j1: finetune of m queued"),
        "job.finished": ({"job": "j1", "state": "succeeded", "model": "m1"}, "j1: succeeded, serves as m1"),
        "execution.changed": (
            {"owner": "j1", "change": "waiting"}, "j1: waits for the running sessions to finish",
        ),
    }
    for kind, (fields, line) in others.items():
        assert describe(event(60, kind, 0, **fields)) == line
    failed = event(61, "job.finished", 0, job="j1", state="failed", error="out of memory")
    assert describe(failed) == "j1: failed: out of memory"
    released = event(62, "execution.changed", 0, owner="j1", change="released", paused=[])
    assert describe(released) == "j1: released; the workers serve again"
