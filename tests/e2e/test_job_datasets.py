"""A fine-tune's dataset, checked at `POST /admin/jobs` on a real host: every line of it, in bounded
memory and off the event loop, with a 400 that names the file and the line; nothing is created for
a refused one. The reader itself is unit-tested in tests/unit/test_job_datasets.py."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from mlxhost.testing import RunningHost, start_host

GOOD = json.dumps(
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
)


@pytest.fixture(scope="module")
def host(tiny_model: Path) -> Iterator[RunningHost]:
    with start_host("--model", str(tiny_model)) as running:  # a temporary state directory
        yield running


@pytest.fixture
def admin(host: RunningHost) -> Iterator[httpx.Client]:
    with host.http(timeout=120.0) as client:
        yield client


def dataset(where: Path, train: bytes, valid: bytes | None = None) -> Path:
    where.mkdir()
    (where / "train.jsonl").write_bytes(train)
    (where / "valid.jsonl").write_bytes(lines(GOOD, 4) if valid is None else valid)
    return where


def lines(line: str, count: int) -> bytes:
    return (line + "\n").encode() * count


def refused(admin: httpx.Client, data: str | Path, **options: Any) -> str:
    """The message of the 400 a fine-tune of `data` gets, having checked it named `data` and left no job."""
    before = len(admin.get("/admin/jobs").json()["data"])
    response = admin.post(
        "/admin/jobs",
        json={"kind": "finetune", "model": "tiny", "num_layers": -1, "data": str(data), **options},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "data" and error["message"].startswith("data: "), error
    assert len(admin.get("/admin/jobs").json()["data"]) == before
    return str(error["message"])


@pytest.mark.parametrize(
    ("train", "message"),
    [
        # A line past the limit (the one a job would have tokenized into gigabytes).
        (
            lines(GOOD, 2) + json.dumps({"text": "a" * (2 << 20)}).encode() + b"\n",
            "train.jsonl line 3: longer than 1,048,576 bytes (1 MiB)",
        ),
        (b"", "train.jsonl has no examples"),
        (b"\n\n", "train.jsonl has no examples"),
        (
            lines(GOOD, 5) + b'{"text": "caf\xe9"}\n',
            "train.jsonl line 6: not UTF-8 (byte 0xe9 at byte offset",
        ),
        (lines(GOOD, 5) + b"[" * 50_000 + b"\n", "train.jsonl line 6: nests too deeply"),
        (lines(GOOD, 900) + b"{oops\n", "train.jsonl line 901: not JSON"),
        # A byte order mark is passed by, as the job passes it by: what is left is a count.
        (b"\xef\xbb\xbf" + lines(GOOD, 3), "train.jsonl has 3 examples, fewer than batch_size=4"),
    ],
    ids=["too-long", "empty", "blank", "not-utf8", "too-deep", "line-901", "bom"],
)
def test_a_bad_dataset_is_refused_naming_the_file_and_the_line(
    admin: httpx.Client, tmp_path: Path, train: bytes, message: str
) -> None:
    data = dataset(tmp_path / "data", train)
    assert f"{data}/{message}" in refused(admin, data)


def test_an_empty_validation_file_is_refused(admin: httpx.Client, tmp_path: Path) -> None:
    data = dataset(tmp_path / "data", lines(GOOD, 4), valid=b"")
    assert "valid.jsonl has no examples" in refused(admin, data)


@pytest.mark.parametrize(
    "data",
    ["/" + "a" * 4000, "/tmp/" + "a" * 300 + "/data", "~no-such-user-here/data"],
    ids=["4000", "300", "~user"],
)
def test_a_path_the_filesystem_cannot_take_is_a_400(admin: httpx.Client, data: str) -> None:
    message = refused(admin, data)
    assert "too long" in message or "no such user" in message


def test_a_200_mb_line_is_refused_without_reading_it(
    host: RunningHost, admin: httpx.Client, tmp_path: Path
) -> None:
    """A sparse file: 200 MB of NULs and not one newline (it costs the disk nothing)."""
    data = tmp_path / "data"
    data.mkdir()
    with (data / "train.jsonl").open("wb") as file:
        file.truncate(200 << 20)
    (data / "valid.jsonl").write_bytes(lines(GOOD, 4))
    rss = psutil.Process(host.pid).memory_info().rss
    assert f"{data}/train.jsonl line 1: longer than 1,048,576 bytes" in refused(admin, data)
    grew = psutil.Process(host.pid).memory_info().rss - rss
    assert grew < 64 << 20, f"the host grew by {grew:,} bytes reading it"


@pytest.mark.slow
def test_serving_goes_on_while_a_200_mb_dataset_is_read(
    host: RunningHost, admin: httpx.Client, tmp_path: Path
) -> None:
    """The host reads every line of a 200 MB train.jsonl (two million examples, the last one bad)
    in a worker thread: /health answers all the while, and the host's memory stays put.

    A measured bound, as the finding asks; the margins are wide (the read takes seconds, a /health
    answer milliseconds: the median while it reads is a few, the slowest a few hundred on two busy
    cores), so a busy machine does not fail it."""
    line = json.dumps({"text": "x" * 80})
    count = (200 << 20) // (len(line) + 1)
    data = dataset(tmp_path / "data", lines(line, count) + b"{oops\n")
    process = psutil.Process(host.pid)
    baseline = process.memory_info().rss
    answer: list[httpx.Response] = []

    def submit() -> None:
        with host.http(timeout=300.0) as client:
            answer.append(
                client.post(
                    "/admin/jobs",
                    json={"kind": "finetune", "model": "tiny", "num_layers": -1, "data": str(data)},
                )
            )

    submitting = threading.Thread(target=submit)
    started = time.monotonic()
    submitting.start()
    pings: list[float] = []  # how long each /health took while the read went on
    peak = baseline
    while submitting.is_alive():
        sent = time.monotonic()
        assert admin.get("/health").status_code == 200
        pings.append(time.monotonic() - sent)
        peak = max(peak, process.memory_info().rss)
        time.sleep(0.05)
    submitting.join()
    took = time.monotonic() - started
    assert answer[0].status_code == 400
    assert f"train.jsonl line {count + 1}: not JSON" in answer[0].json()["error"]["message"]
    slowest = max(pings)
    print(
        f"read in {took:.1f} s; {len(pings)} pings, the slowest {slowest:.3f} s; rss +{(peak - baseline) >> 20} MiB"
    )
    assert took > 1.0 and len(pings) >= 5, "the read was too quick to say anything"
    # Read on the event loop, /health would wait for nearly all of it: a ping or two in all, each
    # as long as the read. The median, not the slowest: one ping may meet a busy moment.
    assert statistics.median(pings) < took / 4, pings
    assert peak - baseline < 64 << 20, f"the host grew by {peak - baseline:,} bytes"
