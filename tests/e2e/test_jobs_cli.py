"""`mlxhost jobs` against a real host: real fine-tunes of the tiny model (a few iterations on a
few chat lines), through the real command, read as a user and a script read it.

The last tests need no host: the printer `tail` uses, fed log events, on a terminal and off one.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlxhost.client.jobs import EXIT_FAILED, EXIT_OK, EXIT_USAGE, TailPrinter, outcome_line
from mlxhost.testing import RunningHost, start_host
from mlxhost.wire.admin.jobs import JobLogEvent, JobRecord, parse_log_line

CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
FINETUNE = ("--iters", "6", "--batch-size", "2", "--num-layers", "-1")  # the tiny model has 2 layers


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The caller's directory: a dataset in `chat/`, named relative to it."""
    root = tmp_path_factory.mktemp("jobs-cli")
    data = root / "chat"
    data.mkdir()
    for name in ("train.jsonl", "valid.jsonl"):
        (data / name).write_text("\n".join([json.dumps(CHAT)] * 8) + "\n")
    return root


@pytest.fixture(scope="module")
def host(tiny_model: Path, work: Path) -> Iterator[RunningHost]:
    with start_host("--model", str(tiny_model), "--state-dir", str(work / "state")) as server:
        yield server


def jobs(
    host: RunningHost, *args: str, cwd: Path | None = None, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`mlxhost jobs ARGS`, run in `cwd`, as a script runs it."""
    where = ["--url", host.url or "", "--token", token or host.admin_token]
    command = [sys.executable, "-m", "mlxhost", "jobs", *args, *where]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)


def submit(host: RunningHost, work: Path, *args: str) -> str:
    done = jobs(host, "submit", "finetune", "--model", "tiny", "--data", "chat", *args, cwd=work)
    assert done.returncode == EXIT_OK, done.stderr
    return done.stdout.strip()


def test_a_finetune_submitted_followed_listed_and_shown(host: RunningHost, work: Path) -> None:
    job = submit(host, work, *FINETUNE)
    tail = jobs(host, "tail", job)
    assert tail.returncode == EXIT_OK, tail.stdout + tail.stderr
    lines = tail.stdout.splitlines()
    assert lines[0] == "started"
    # Off a terminal, one line per progress report; the last line is the outcome.
    assert any(line.startswith("iter 6/6 (100%)") and "train " in line for line in lines), lines
    assert lines[-1].startswith("succeeded in ") and f"model tiny-lora-{job} (" in lines[-1]
    assert "\r" not in tail.stdout and "\x1b" not in tail.stdout

    # A job already over: its log again, and the same ending, at once.
    again = jobs(host, "tail", job)
    assert again.returncode == EXIT_OK and again.stdout == tail.stdout

    listing = jobs(host, "list")
    assert listing.returncode == EXIT_OK
    header, row = listing.stdout.splitlines()[:2]
    assert header.split() == ["ID", "KIND", "MODEL", "STATE", "PROGRESS", "AGE", "RESULT"]
    assert row.split()[:5] == [job, "finetune", "tiny", "succeeded", "6/6"]
    assert row.endswith(f"tiny-lora-{job}")
    as_json = json.loads(jobs(host, "list", "--json").stdout)
    assert [r["id"] for r in as_json["data"]][:1] == [job]

    shown = jobs(host, "show", job)
    assert shown.returncode == EXIT_OK
    assert shown.stdout.startswith(f"job {job}: finetune of tiny, succeeded\n")
    assert f"  model: tiny-lora-{job}\n" in shown.stdout and "  progress: iter 6/6 (100%)" in shown.stdout
    record = JobRecord.from_json(json.loads(jobs(host, "show", job, "--json").stdout))
    assert record.options["data"] == str(work / "chat")  # resolved where the command ran
    assert record.result is not None and record.result.model == f"tiny-lora-{job}"
    with host.http() as http:
        assert f"tiny-lora-{job}" in [m["id"] for m in http.get("/v1/models").json()["data"]]

    # Fusing it names the fine-tune alone: the model is the fine-tune's.
    fused = jobs(host, "submit", "fuse", "--adapter", job, "--json")
    assert fused.returncode == EXIT_OK, fused.stderr
    fuse = json.loads(fused.stdout)
    assert (fuse["kind"], fuse["model"], fuse["options"]["adapter"]) == ("fuse", "tiny", job)
    tail = jobs(host, "tail", fuse["id"])
    assert tail.returncode == EXIT_OK and f"model tiny-fused-{fuse['id']}" in tail.stdout.splitlines()[-1]

    # Over, it cannot be cancelled: exit 1, as the host says why.
    cancel = jobs(host, "cancel", job)
    assert cancel.returncode == EXIT_FAILED and "already ended" in cancel.stderr


def test_a_cancelled_job_ends_its_tail_with_exit_1(host: RunningHost, work: Path) -> None:
    job = submit(host, work, "--iters", "100000", "--batch-size", "2", "--num-layers", "-1")
    cancel = jobs(host, "cancel", job)
    assert cancel.returncode == EXIT_OK and cancel.stdout.split() in ([job, "cancelling"], [job, "cancelled"])
    tail = jobs(host, "tail", job)
    assert tail.returncode == EXIT_FAILED
    assert tail.stdout.splitlines()[-1].startswith("cancelled")
    assert jobs(host, "show", job, "--json").stdout.count('"state": "cancelled"') == 1


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--data", "nowhere"), "data"),
        (("--data", "chat", "--iters", "0"), "iters"),
        (("--data", "chat", "--learning-rate", "2"), "learning_rate"),
    ],
)
def test_a_bad_request_says_which_field_and_exits_2(
    host: RunningHost, work: Path, args: tuple[str, ...], field: str
) -> None:
    done = jobs(host, "submit", "finetune", "--model", "tiny", *args, cwd=work)
    assert done.returncode == EXIT_USAGE and done.stdout == ""
    assert done.stderr.startswith("mlxhost: ") and field in done.stderr, done.stderr


def test_an_unknown_job_exits_2(host: RunningHost) -> None:
    for action in ("show", "tail", "cancel"):
        done = jobs(host, action, "no-such-job")
        assert done.returncode == EXIT_USAGE, (action, done.stderr)
        assert "no job 'no-such-job'" in done.stderr


def test_no_host_or_a_wrong_token_exits_2(host: RunningHost) -> None:
    wrong = jobs(host, "list", token="not-the-token")
    assert wrong.returncode == EXIT_USAGE and "401" in wrong.stderr and "--token" in wrong.stderr
    gone = subprocess.run(
        [sys.executable, "-m", "mlxhost", "jobs", "list", "--url", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert gone.returncode == EXIT_USAGE and "cannot reach http://127.0.0.1:9" in gone.stderr
    train = [sys.executable, "-m", "mlxhost", "jobs", "submit", "train"]  # not a kind
    bad_flag = subprocess.run(train, capture_output=True, text=True, timeout=30)
    assert bad_flag.returncode == 2 and "invalid choice" in bad_flag.stderr


def test_tail_on_a_terminal_rewrites_one_progress_line(host: RunningHost, work: Path) -> None:
    job = submit(host, work, "--iters", "20", "--batch-size", "2", "--num-layers", "-1")
    parent, child = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "24"}
    command = [sys.executable, "-m", "mlxhost", "jobs", "tail", job, "--url", host.url or ""]
    command += ["--token", host.admin_token]
    process = subprocess.Popen(command, stdout=child, stderr=subprocess.PIPE, env=env)
    os.close(child)
    shown = b""
    while True:
        try:
            chunk = os.read(parent, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        shown += chunk
    os.close(parent)
    assert process.wait(60) == EXIT_OK
    text = shown.decode()
    # Each report rewrites the line in place (with a bar); the last report stays, then the outcome.
    assert text.count("\r") >= 2 and "\x1b[K" in text
    assert "iter 20/20 " + "█" * 20 + " 100%" in text
    last_lines = text.replace("\r\n", "\n").split("\n")
    assert last_lines[-2].startswith("succeeded in ") and last_lines[-1] == ""


# -- the printer, without a host ----------------------------------------------------------------


def log(*lines: dict[str, Any]) -> list[JobLogEvent]:
    return [parse_log_line(json.dumps({"ts": 1_000_000 + i * 1000, **line})) for i, line in enumerate(lines)]


LOG = log(
    {"type": "started"},
    {"type": "message", "text": "read 8 training examples"},
    {"type": "progress", "iteration": 1, "total": 4, "val_loss": 7.0},
    {"type": "progress", "iteration": 2, "total": 4, "train_loss": 6.5, "iterations_per_s": 3.25},
    {"type": "message", "text": "saved \x1b[2Jadapters"},
    {"type": "progress", "iteration": 4, "total": 4, "train_loss": 6.0, "val_loss": 6.8,
     "peak_memory_bytes": 3 * 2**20},
    {"type": "succeeded", "output": "/state/jobs/j1/output"},
)


def printed(live: bool) -> str:
    out = io.StringIO()
    printer = TailPrinter(out, live=live, width=200)
    for event in LOG[:-1]:
        printer.show(event)
    printer.finish(LOG[-1])
    return out.getvalue()


def test_off_a_terminal_each_report_is_a_line_and_losses_carry_over() -> None:
    assert printed(live=False).splitlines() == [
        "started",
        "read 8 training examples",
        "iter 1/4 (25%)  val 7.000",
        "iter 2/4 (50%)  train 6.500  val 7.000  3.25 it/s",
        "saved \\x1b[2Jadapters",  # controls from the log are shown, not obeyed
        "iter 4/4 (100%)  train 6.000  val 6.800  peak 3.0 MiB",
        "succeeded in 6.0s: /state/jobs/j1/output",
    ]


def test_on_a_terminal_reports_rewrite_one_line_and_messages_go_above_it() -> None:
    text = printed(live=True)
    first = "\riter 1/4 " + "█" * 5 + "░" * 15 + " 25%  val 7.000\x1b[K"
    assert text.startswith("started\nread 8 training examples\n" + first)
    assert "\r\x1b[Ksaved \\x1b[2Jadapters\niter 2/4 " in text  # the live line is drawn again below it
    last = "\riter 4/4 " + "█" * 20 + " 100%  train 6.000  val 6.800  peak 3.0 MiB\x1b[K\n"
    assert text.endswith(last + "succeeded in 6.0s: /state/jobs/j1/output\n")


def test_the_live_line_never_reaches_the_last_column() -> None:
    out = io.StringIO()
    printer = TailPrinter(out, live=True, width=30)
    printer.show(LOG[3])
    assert out.getvalue() == "\riter 2/4 " + "█" * 10 + "░" * 10 + "\x1b[K"  # 29 columns of 30


def test_outcome_lines() -> None:
    failed = log({"type": "started"}, {"type": "failed", "error": "out of memory"})
    assert outcome_line(failed[1], None, failed[0].ts) == "failed after 1.0s: out of memory"
    interrupted = log({"type": "interrupted", "error": "job interrupted by a previous process exit"})[0]
    assert outcome_line(interrupted, None, None) == "interrupted: job interrupted by a previous process exit"


def test_a_refusal_without_the_hosts_error_document_reads_as_its_text() -> None:
    from mlxhost.client.admin import AdminRefused

    plain = AdminRefused.from_response(httpx.Response(404, text="Not Found"))
    assert (plain.status_code, plain.message, plain.param) == (404, "Not Found", None)
    error = {"message": "iters: must be at least 1", "type": "invalid_request_error", "param": "iters"}
    body = {"error": error}
    named = AdminRefused.from_response(httpx.Response(400, json=body))
    assert (named.message, named.param, named.code) == ("iters: must be at least 1", "iters", None)
