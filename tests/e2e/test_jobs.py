"""Managed jobs on a real host: fine-tune, quantize and fuse the tiny model, serve what they made.

Each job is a real `python -m mlxhost.job` process under the host's runner, running mlx-lm's own
training and conversion on the tiny model; its log is followed over the admin API's SSE tail, as
`mlxhost jobs tail` and the console follow it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until
from tests.e2e.jobs_helpers import (
    FOREVER,
    TERMINAL,
    _alive,
    admin_events_until,
    dataset_fixture,  # noqa: F401 - the `dataset` fixture
    submit,
    tail,
    wait_job,
    wait_running,
    write_dataset,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    state = tmp_path_factory.mktemp("state")
    with start_host("--model", str(tiny_model), "--state-dir", str(state), "--max-resident", "4") as running:
        yield running


@pytest.fixture
def admin(host: RunningHost) -> Iterator[httpx.Client]:
    with host.http(timeout=60.0) as client:
        yield client


def test_a_finetune_succeeds_and_its_adapter_serves_at_once(
    host: RunningHost, admin: httpx.Client, dataset: Path
) -> None:
    job = submit(
        admin, kind="finetune", model="tiny", data=str(dataset), iters=20, batch_size=2, num_layers=-1
    )
    assert job["state"] == "queued" and job["kind"] == "finetune" and job["options"]["iters"] == 20
    done = wait_job(admin, job["id"])
    assert done["state"] == "succeeded", done
    model = done["result"]["model"]
    assert model == f"tiny-lora-{job['id']}"
    assert Path(done["result"]["path"], "adapters.safetensors").is_file()
    assert done["progress"]["iteration"] == 20 and done["progress"]["train_loss"] is not None

    listed = {m["id"]: m for m in admin.get("/v1/models").json()["data"]}
    assert listed[model]["metadata"] == {"job": job["id"], "kind": "finetune", "base": "tiny"}
    with host.client() as client:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What is 2 plus 2?"}], max_tokens=8
        )
    assert reply.model == model and reply.choices[0].message.content is not None

    text, events = tail(admin, job["id"])
    assert text.startswith("retry: 2000\n\n")
    assert text.endswith('event: end\ndata: {"reason": "done"}\n\n')
    kinds = [e["type"] for _, e in events]
    assert kinds[0] == "started" and kinds.count("progress") >= 2
    assert [k for k in kinds if k in TERMINAL] == ["succeeded"] and kinds[-1] == "succeeded"
    assert [n for n, _ in events] == list(range(1, len(events) + 1))
    losses = [
        e["train_loss"] for _, e in events if e["type"] == "progress" and e.get("train_loss") is not None
    ]
    assert losses, "no training loss reported"

    # A client that lost its connection resumes after the last line it saw.
    _, resumed = tail(admin, job["id"], after=2)
    assert resumed == events[2:]

    # The admin event stream told the story too.
    story = [
        (e["type"], e.get("change"))
        for e in admin_events_until(
            admin, lambda e: e["type"] == "execution.changed" and e["change"] == "released"
        )
        if e.get("job", e.get("owner")) == job["id"]
    ]
    assert story[0] == ("job.queued", None)
    assert story.index(("execution.changed", "waiting")) < story.index(("execution.changed", "held"))
    assert story.index(("execution.changed", "held")) < story.index(("job.started", None))
    assert ("job.progress", None) in story
    assert story[-2:] == [("job.finished", None), ("execution.changed", "released")]


def test_a_quantized_model_serves(host: RunningHost, admin: httpx.Client) -> None:
    job = submit(admin, kind="quantize", model="tiny", bits=4, group_size=32)
    done = wait_job(admin, job["id"])
    assert done["state"] == "succeeded", done
    model = done["result"]["model"]
    assert model == f"tiny-q4-{job['id']}"
    config = json.loads(Path(done["result"]["path"], "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    with host.client() as client:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert reply.model == model


def test_a_fused_model_serves(host: RunningHost, admin: httpx.Client, dataset: Path) -> None:
    tuned = wait_job(
        admin, submit(admin, kind="finetune", model="tiny", data=str(dataset), iters=4, num_layers=-1)["id"]
    )
    assert tuned["state"] == "succeeded", tuned["error"]
    job = submit(admin, kind="fuse", adapter=tuned["id"])
    assert job["model"] == "tiny"
    done = wait_job(admin, job["id"])
    assert done["state"] == "succeeded", done
    with host.client() as client:
        reply = client.chat.completions.create(
            model=done["result"]["model"], messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    assert reply.choices[0].message.content is not None


def test_a_cancelled_job_ends_cancelled_with_its_process_gone(admin: httpx.Client, dataset: Path) -> None:
    job = submit(
        admin,
        kind="finetune",
        model="tiny",
        data=str(dataset),
        iters=FOREVER,
        steps_per_report=1,
        num_layers=-1,
    )
    running = wait_running(admin, job["id"])
    pid = running["pid"]
    assert pid and _alive(pid)
    cancelled = admin.post(f"/admin/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 202
    done = wait_job(admin, job["id"], timeout=60.0)
    assert done["state"] == "cancelled" and done["pid"] is None and done["result"] is None
    wait_until(lambda: not _alive(pid), timeout=10.0)
    _, events = tail(admin, job["id"])
    assert [e["type"] for _, e in events if e["type"] in TERMINAL] == ["cancelled"]
    assert admin.post(f"/admin/jobs/{job['id']}/cancel").status_code == 409
    # Nothing half-made is left behind.
    assert not any(Path(done["options"]["model_path"]).parent.glob(f"**/{job['id']}/output*"))


def test_chat_requests_wait_for_a_job_then_complete(
    host: RunningHost, admin: httpx.Client, dataset: Path
) -> None:
    job = submit(
        admin,
        kind="finetune",
        model="tiny",
        data=str(dataset),
        iters=FOREVER,
        steps_per_report=1,
        num_layers=-1,
    )
    wait_running(admin, job["id"])
    state = admin.get("/admin/state").json()
    assert state["execution"]["exclusive"] == job["id"]
    assert "tiny" in state["execution"]["paused"]
    assert state["jobs"][0]["id"] == job["id"] and state["jobs"][0]["state"] == "running"
    metrics = dict(line.rsplit(" ", 1) for line in admin.get("/metrics").text.splitlines() if line[:1] != "#")
    assert metrics["mlxhost_execution_exclusive"] == "1.0"
    assert float(metrics["mlxhost_workers_paused"]) == len(state["execution"]["paused"])
    assert metrics['mlxhost_jobs{kind="finetune",state="running"}'] == "1.0"

    results: list[int] = []

    def ask() -> None:
        with host.http(timeout=120.0, admin=False) as client:
            response = client.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            )
            results.append(response.status_code)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for thread in threads:
        thread.start()
    # They wait (queued sessions), they are not refused.
    wait_until(lambda: len(admin.get("/admin/state").json()["execution"]["waiting"]) == 3, timeout=30.0)
    assert results == []
    assert admin.post(f"/admin/jobs/{job['id']}/cancel").status_code == 202
    for thread in threads:
        thread.join(120.0)
    assert results == [200, 200, 200]
    assert admin.get("/admin/state").json()["execution"]["exclusive"] is None


def test_a_worker_killed_during_a_job_respawns_only_after_it(
    host: RunningHost, admin: httpx.Client, dataset: Path
) -> None:
    before = host.worker("tiny")["pid"]
    job = submit(
        admin,
        kind="finetune",
        model="tiny",
        data=str(dataset),
        iters=FOREVER,
        steps_per_report=1,
        num_layers=-1,
    )
    wait_running(admin, job["id"])
    os.kill(before, signal.SIGKILL)
    wait_until(lambda: host.worker("tiny")["pid"] is None, timeout=30.0)
    progress = admin.get(f"/admin/jobs/{job['id']}").json()["progress"]["iteration"]
    # The job goes on; the worker does not come back while it holds the lease.
    wait_until(lambda: admin.get(f"/admin/jobs/{job['id']}").json()["progress"]["iteration"] > progress + 2)
    assert host.worker("tiny")["pid"] is None
    admin.post(f"/admin/jobs/{job['id']}/cancel")
    wait_job(admin, job["id"])
    # Spawned is not ready: until it is, its requests get 503 "restarting", as documented.
    after = wait_until(lambda: (w := host.worker("tiny"))["state"] == "ready" and w["pid"], timeout=60.0)
    assert after != before
    with host.client() as client:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"kind": "train", "model": "tiny"}, "kind"),
        ({"model": "tiny"}, "kind"),
        ({"kind": "finetune", "model": "nope", "data": "/tmp"}, "model"),
        ({"kind": "finetune", "model": "tiny"}, "data"),
        ({"kind": "finetune", "model": "tiny", "data": "relative/dir"}, "data"),
        ({"kind": "finetune", "model": "tiny", "data": "/nonexistent/dataset"}, "data"),
        ({"kind": "finetune", "model": "tiny", "data": "/tmp", "iters": 0}, "iters"),
        ({"kind": "quantize", "model": "tiny", "bits": 7}, "bits"),
        ({"kind": "quantize", "model": "tiny", "colour": "red"}, "colour"),
        ({"kind": "fuse", "adapter": "nope"}, "adapter"),
    ],
)
def test_bad_submissions_are_refused_naming_the_field(
    admin: httpx.Client, body: dict[str, Any], param: str
) -> None:
    before = len(admin.get("/admin/jobs").json()["data"])
    response = admin.post("/admin/jobs", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert len(admin.get("/admin/jobs").json()["data"]) == before  # nothing half-created


def test_a_finetune_without_num_layers_fits_the_default_to_the_model(admin: httpx.Client, dataset: Path) -> None:
    # mlx-lm's default is 16 layers; the tiny model has 2: a default nobody sent must not refuse it.
    job = submit(admin, kind="finetune", model="tiny", data=str(dataset), iters=2)
    assert job["options"]["num_layers"] == 2
    done = wait_job(admin, job["id"])
    assert done["state"] == "succeeded", done
    _, events = tail(admin, job["id"])
    assert any("2 of 2 layers" in e.get("text", "") for _, e in events), events[:6]


def test_a_malformed_dataset_is_refused_before_it_runs(admin: httpx.Client, tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "data")
    response = admin.post(
        "/admin/jobs", json={"kind": "finetune", "model": "tiny", "data": str(data), "num_layers": 16}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "num_layers"
    assert "has 2 layers" in response.json()["error"]["message"]
    (data / "train.jsonl").write_text("not json\n")
    response = admin.post("/admin/jobs", json={"kind": "finetune", "model": "tiny", "data": str(data)})
    assert response.status_code == 400 and response.json()["error"]["param"] == "data"
    assert "train.jsonl line 1" in response.json()["error"]["message"]
    (data / "valid.jsonl").unlink()
    (data / "train.jsonl").write_text('{"text": "hi"}\n')
    response = admin.post("/admin/jobs", json={"kind": "finetune", "model": "tiny", "data": str(data)})
    assert response.status_code == 400 and "valid.jsonl" in response.json()["error"]["message"]


def test_jobs_need_the_admin_token_on_tcp(host: RunningHost) -> None:
    with host.http(admin=False) as client:
        assert client.get("/admin/jobs").status_code == 401
        assert client.post("/admin/jobs", json={"kind": "quantize", "model": "tiny"}).status_code == 401
