"""Pulls by a running host: at start for a configured repo not in the cache, and as admin jobs
(POST /admin/models/pull, `mlxhost pull --url`), against a hub-protocol server on loopback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.testing import ADMIN_TOKEN, RunningHost, start_host, wait_until
from mlxhost.testing_hub import HubServer

from .jobs_helpers import tail, wait_job

pytestmark = pytest.mark.slow

BIG = "org/big"
BIG_FILE = "filler.json"
BIG_SIZE = 4 * 1024 * 1024
CHAT = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def hub(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    big = tmp_path_factory.mktemp("repos") / "big"
    shutil.copytree(tiny_model, big)
    (big / BIG_FILE).write_bytes(os.urandom(BIG_SIZE))  # a servable model with bytes enough to watch
    with HubServer() as server:
        server.add_repo("mlx-community/tiny", tiny_model)
        server.add_repo(BIG, big)
        server.add_repo("org/big-two", big)
        yield server


def hf_env(hub: HubServer, cache: Path) -> dict[str, str]:
    return {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(cache.parent / "hf-home"),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_OFFLINE": "0",
    }


@pytest.fixture(scope="module")
def host(hub: HubServer, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    cache = tmp_path_factory.mktemp("hf") / "cache"
    with start_host("--model", str(tiny_model), "--max-resident", "4", env=hf_env(hub, cache)) as running:
        yield running


@pytest.fixture
def admin(host: RunningHost) -> Iterator[httpx.Client]:
    with host.http(timeout=60.0) as client:
        yield client


def pull(admin: httpx.Client, **body: Any) -> dict[str, Any]:
    response = admin.post("/admin/models/pull", json=body)
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def events_of(admin: httpx.Client, kind: str) -> list[dict[str, Any]]:
    """The admin stream's events of `kind` so far: the ring the host keeps, read until it goes quiet."""
    found = []
    try:
        with admin.stream(
            "GET", "/admin/events", headers={"last-event-id": "0"}, timeout=httpx.Timeout(10.0, read=1.5)
        ) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if event.get("type") == kind:
                        found.append(event)
    except httpx.ReadTimeout:
        pass  # nothing more for a while: what was kept has all come
    return found


def test_a_pulled_model_serves_at_once(hub: HubServer, admin: httpx.Client) -> None:
    job = pull(admin, model="mlx-community/tiny")
    assert job["kind"] == "pull" and job["model"] == "mlx-community/tiny"
    done = wait_job(admin, job["id"], timeout=60)
    assert done["state"] == "succeeded", done
    assert done["result"]["model"] == "mlx-community/tiny"
    models = [m["id"] for m in admin.get("/v1/models").json()["data"]]
    assert "mlx-community/tiny" in models
    answer = admin.post("/v1/chat/completions", json=CHAT | {"model": "mlx-community/tiny"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "mlx-community/tiny"


def test_a_pull_job_streams_its_progress_in_bytes(hub: HubServer, admin: httpx.Client) -> None:
    hub.throttle(2 * 1024 * 1024)
    try:
        job = pull(admin, model="org/big-two")
        _, lines = tail(admin, job["id"])
    finally:
        hub.throttle(None)
    progress = [event for _, event in lines if event["type"] == "progress"]
    assert len(progress) >= 3
    assert all(p["total"] > BIG_SIZE for p in progress)
    assert [p["iteration"] for p in progress] == sorted(p["iteration"] for p in progress)
    assert progress[-1]["iteration"] == progress[-1]["total"]
    assert any(p.get("file") == BIG_FILE and p["bytes_per_s"] > 0 for p in progress)
    assert lines[-1][1]["type"] == "succeeded"


def test_two_pulls_of_one_repo_share_one_download_and_a_cancelled_one_resumes(
    hub: HubServer, admin: httpx.Client
) -> None:
    hub.throttle(1024 * 1024)
    try:
        first = pull(admin, model=BIG)
        second = pull(admin, model=BIG)
        assert second["id"] == first["id"]  # joined: one job, one download
        wait_until(lambda: hub.sent(BIG, BIG_FILE) > 2_500_000, timeout=30)  # two of its pieces on disk
        assert admin.post(f"/admin/jobs/{first['id']}/cancel").status_code == 202
        cancelled = wait_job(admin, first["id"], timeout=30)
    finally:
        hub.throttle(None)
    assert cancelled["state"] == "cancelled"
    sent = hub.sent(BIG, BIG_FILE)
    assert sent < BIG_SIZE
    downloads = events_of(admin, "model.download")
    assert any(d["job"] == first["id"] and d["state"] == "cancelled" for d in downloads)
    again = pull(admin, model=BIG)
    assert again["id"] != first["id"]
    assert wait_job(admin, again["id"], timeout=60)["state"] == "succeeded"
    resent = hub.sent(BIG, BIG_FILE) - sent
    assert resent < BIG_SIZE  # the part the cancelled pull kept was not sent again


def test_bad_pulls_are_refused_naming_the_field(admin: httpx.Client) -> None:
    response = admin.post("/admin/models/pull", json={"model": "../etc"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "model"
    response = admin.post("/admin/models/pull", json={"model": "a/b", "quantize": 7})
    assert response.status_code == 400 and response.json()["error"]["param"] == "quantize"
    response = admin.post("/admin/models/pull", json={"model": "a/b", "path": "/tmp"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "path"
    missing = pull(admin, model="org/nothing")
    failed = wait_job(admin, missing["id"], timeout=30)
    assert failed["state"] == "failed" and "org/nothing was not found" in failed["error"]


def test_a_pull_needs_the_admin_token(host: RunningHost) -> None:
    assert host.url is not None
    response = httpx.post(f"{host.url}/admin/models/pull", json={"model": "mlx-community/tiny"})
    assert response.status_code == 401


def test_mlxhost_pull_url_asks_the_host(hub: HubServer, host: RunningHost, tmp_path: Path) -> None:
    assert host.url is not None
    done = subprocess.run(
        [sys.executable, "-m", "mlxhost", "pull", "org/big-two", "--url", host.url, "--token", ADMIN_TOKEN],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pull job" in done.stderr and "succeeded" in done.stderr


def test_serve_pulls_a_configured_repo_missing_from_the_cache(hub: HubServer, tmp_path: Path) -> None:
    hub.throttle(1024 * 1024)
    try:
        with start_host("--model", BIG, env=hf_env(hub, tmp_path / "cache")) as host, host.http() as admin:
            health = admin.get("/health")
            # It serves already, and says the model is on its way, not failed.
            assert health.status_code == 503 and health.json()["status"] == "downloading"
            download = health.json()["models"][0]["download"]
            assert download["repo"] == BIG and download["state"] == "downloading"
            refused = admin.post("/v1/chat/completions", json=CHAT)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "model_downloading"
            wait_until(lambda: admin.get("/health").json()["status"] == "ok", timeout=60, interval=0.2)
            assert admin.post("/v1/chat/completions", json=CHAT).status_code == 200
            downloads = events_of(admin, "model.download")
            states = [d["state"] for d in downloads]
            assert states[-1] == "done" and states.count("downloading") >= 2
            assert all(d["repo"] == BIG for d in downloads)
            growing = [d["done_bytes"] for d in downloads]
            assert growing == sorted(growing) and downloads[-1]["done_bytes"] == downloads[-1]["total_bytes"]
            log = "\n".join(host.log)
            assert f"pulling {BIG} from the hub" in log and f"pulled {BIG}" in log
    finally:
        hub.throttle(None)


def test_offline_serve_refuses_a_repo_it_does_not_have(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="pulling is off"):
        start_host("--model", "org/elsewhere", "--offline", env=hf_env(hub, tmp_path / "cache"), timeout=30)
    assert hub.total_sent == hub.total_sent  # nothing to compare: the host never asked


def test_in_process_serve_pulls_its_model_first(hub: HubServer, tmp_path: Path) -> None:
    with start_host("--model", "mlx-community/tiny", "--in-process", env=hf_env(hub, tmp_path / "cache")) as host:
        with host.http() as client:
            assert client.post("/v1/chat/completions", json=CHAT).status_code == 200
        assert any("pulling mlx-community/tiny: 100%" in line for line in host.log)


def test_a_configured_model_named_by_its_repo_is_pending_beside_one_that_serves(
    hub: HubServer, tiny_model: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mlxhost.toml"
    config.write_text(
        f'[[model]]\nid = "local"\npath = "{tiny_model}"\n\n[[model]]\nid = "big"\npath = "{BIG}"\npreload = true\n'
    )
    hub.throttle(1024 * 1024)
    try:
        with start_host("--config", str(config), env=hf_env(hub, tmp_path / "cache")) as host, host.http() as admin:
            health = admin.get("/health").json()
            assert health["status"] == "ok"  # one model serves while the other comes
            big = next(m for m in health["models"] if m["id"] == "big")
            assert big["download"]["repo"] == BIG
            assert admin.post("/v1/chat/completions", json=CHAT | {"model": "local"}).status_code == 200
            waiting = admin.post("/v1/chat/completions", json=CHAT | {"model": "big"})
            assert waiting.status_code == 503 and "retry-after" in waiting.headers
            wait_until(
                lambda: any(w["model"] == "big" and w["state"] == "ready" for w in admin.get("/health").json()["workers"]),
                timeout=60,
                interval=0.2,
            )
            assert admin.post("/v1/chat/completions", json=CHAT | {"model": "big"}).status_code == 200
    finally:
        hub.throttle(None)


def test_a_request_never_makes_the_host_pull(hub: HubServer, host: RunningHost, admin: httpx.Client) -> None:
    before = len(hub.requests)
    # A repo the hub has, named by a request but configured by no one: the default model answers.
    answer = admin.post("/v1/chat/completions", json=CHAT | {"model": "org/never-configured"})
    assert answer.status_code == 200
    assert len(hub.requests) == before


def test_a_pull_with_quantize_queues_a_quantize_job_whose_model_serves(
    hub: HubServer, admin: httpx.Client, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from mlxhost.demo import make_model

    plain = make_model(tmp_path_factory.mktemp("plain") / "q", size="quantizable")
    hub.add_repo("org/plain", plain)
    job = pull(admin, model="org/plain", quantize=4)
    assert wait_job(admin, job["id"], timeout=60)["state"] == "succeeded"
    quantize = wait_until(
        lambda: next((j for j in admin.get("/admin/jobs").json()["data"] if j["kind"] == "quantize"
                      and j["model"] == "org/plain"), None),
        timeout=30,
    )  # fmt: skip
    done = wait_job(admin, quantize["id"], timeout=240)
    assert done["state"] == "succeeded", done
    name = done["result"]["model"]
    assert name == f"org/plain-q4-{quantize['id']}"
    assert admin.post("/v1/chat/completions", json=CHAT | {"model": name}).status_code == 200
