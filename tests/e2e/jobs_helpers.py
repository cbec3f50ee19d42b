"""Shared by the managed-job tests: a tiny dataset, and submitting, waiting on and tailing jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlxhost.testing import wait_until

FOREVER = 1_000_000  # iterations: a fine-tune that runs until it is stopped


def write_dataset(where: Path, train: int = 16, valid: int = 4) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.jsonl", train), ("valid.jsonl", valid)):
        with (where / name).open("w") as file:
            for i in range(count):
                example = {
                    "messages": [
                        {"role": "user", "content": f"What is {i} plus {i}?"},
                        {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."},
                    ]
                }
                file.write(json.dumps(example) + "\n")
    return where


@pytest.fixture(scope="module", name="dataset")
def dataset_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data"))


def submit(admin: httpx.Client, **body: Any) -> dict[str, Any]:
    response = admin.post("/admin/jobs", json=body)
    assert response.status_code == 202, response.text
    return response.json()  # type: ignore[no-any-return]


def wait_job(admin: httpx.Client, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        record = admin.get(f"/admin/jobs/{job_id}").json()
        return record if record["state"] not in ("queued", "running") else None

    return wait_until(ended, timeout=timeout, interval=0.2)


def wait_running(admin: httpx.Client, job_id: str) -> dict[str, Any]:
    return wait_until(
        lambda: (
            (r := admin.get(f"/admin/jobs/{job_id}").json())["state"] == "running" and r["progress"] and r
        ),
        timeout=120.0,
        interval=0.1,
    )


def tail(
    admin: httpx.Client, job_id: str, after: int | None = None
) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
    """The SSE stream whole: its raw text, and each (id, event)."""
    headers = {"last-event-id": str(after)} if after is not None else {}
    with admin.stream("GET", f"/admin/jobs/{job_id}/events", headers=headers, timeout=120.0) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = []
    for frame in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in frame.splitlines() if ": " in line and not line.startswith(":")
        )
        if "id" in fields and "data" in fields:
            events.append((int(fields["id"]), json.loads(fields["data"])))
    return text, events


TERMINAL = {"succeeded", "failed", "cancelled", "interrupted"}


def admin_events_until(admin: httpx.Client, last: Any) -> list[dict[str, Any]]:
    """/admin/events from the start of what the host keeps, up to the first event `last` accepts."""
    seen: list[dict[str, Any]] = []
    with admin.stream("GET", "/admin/events", params={"after": 0}, timeout=30.0) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line.removeprefix("data: ")))
                if last(seen[-1]):
                    return seen
    raise AssertionError(f"the stream ended first: {seen[-5:]}")


def _alive(pid: int) -> bool:
    # A zombie (exited, not yet reaped by its parent) is gone for every purpose here.
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
