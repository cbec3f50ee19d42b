"""The console's jobs: the Jobs pane, a job's log, and cancelling one; in snapshots from a fixed
state (tests/unit/test_console_jobs.py's), with keys that need no host, and against a real host
running real fine-tunes of the tiny model."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.screen import Screen

from mlxhost.client.admin import Target
from mlxhost.testing import RunningHost, start_host
from mlxhost.wire.admin.jobs import JobLogEvent, parse_log_line
from mlxhost_tui.app import ConsoleApp, make_app
from mlxhost_tui.screens.confirm import ConfirmScreen
from mlxhost_tui.screens.job_log import JobLogScreen
from mlxhost_tui.widgets.jobs_table import JobsTable
from tests.e2e.test_tui import log_text, until
from tests.unit import test_console_jobs as given
from tests.unit.test_console_model import NOW, STATE

CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
SIZE = (100, 30)
WAIT_S = 60.0  # a bound on what must happen, generous for a loaded machine; never a measure


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio only


# -- a fixed state, for snapshots and the keys that need no host --------------------------------


def at(ago: float, **line: Any) -> JobLogEvent:
    return parse_log_line(json.dumps({"ts": int((NOW - ago) * 1000), **line}))


LOG = [
    at(0.4, type="started"),
    at(0.39, type="message", text="read 8 training and 8 validation examples in /data/chat"),
    at(0.35, type="progress", iteration=0, total=100, val_loss=3.2),
    at(0.3, type="progress", iteration=10, total=100, train_loss=3.1, iterations_per_s=31.5),
    at(0.2, type="progress", iteration=20, total=100, train_loss=2.8, iterations_per_s=30.9),
]


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], ConsoleApp]]:
    """A console fed the fixed state and events with jobs, through the path the network loop feeds it."""
    monkeypatch.setenv("TZ", "UTC")  # the log shows local times
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()

    def make() -> ConsoleApp:
        return make_app(Target(url="http://127.0.0.1:8080"), clock=lambda: NOW, live=False)

    yield make
    monkeypatch.undo()
    time.tzset()


async def feed(pilot: Pilot[Any]) -> None:
    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    app.main.ingest(given.JOBS_STATE, given.JOB_EVENTS)
    app.main.set_connection("connected")
    await pilot.pause()


def shown(app: ConsoleApp) -> Screen[Any]:
    """The screen on top (a function, so that a type check after an `isinstance` does not stick)."""
    return app.screen


async def open_log(pilot: Pilot[Any]) -> JobLogScreen:
    """Enter on the running fine-tune, then its log's first lines, as the screen's reader adds them."""
    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    await feed(pilot)
    jobs = app.query_one(JobsTable)
    jobs.focus()
    jobs.move_cursor(row=jobs.get_row_index(given.RUNNING))
    await pilot.press("enter")
    screen = app.screen
    assert isinstance(screen, JobLogScreen) and screen.job_id == given.RUNNING
    screen.add(LOG)
    await pilot.pause()
    return screen


def test_snapshot_jobs_80x24(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    assert snap_compare(fixed(), terminal_size=(80, 24), run_before=feed)


def test_snapshot_job_log_80x24(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    assert snap_compare(fixed(), terminal_size=(80, 24), run_before=open_log)


@pytest.mark.anyio
async def test_the_jobs_pane_shows_only_while_there_are_jobs(fixed: Callable[[], ConsoleApp]) -> None:
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        jobs = app.query_one(JobsTable)
        app.main.ingest(STATE)  # a host with no jobs (yet)
        await pilot.pause()
        assert not jobs.display and jobs.row_count == 0
        await feed(pilot)
        assert jobs.display and list(jobs.rows) == [given.QUEUED, given.RUNNING, given.DONE]
        assert jobs.get_cell(given.RUNNING, "state").plain == "running"
        assert jobs.get_cell(given.RUNNING, "progress").plain == "███░░░░░  40%"
        assert jobs.get_cell(given.RUNNING, "loss").plain == "█▅▂▁     2.41"
        await pilot.press("slash", *"quantize", "enter")  # the filter narrows the jobs too
        assert list(jobs.rows) == [given.QUEUED, given.DONE]


@pytest.mark.anyio
async def test_enter_opens_a_jobs_log_and_escape_comes_back(fixed: Callable[[], ConsoleApp]) -> None:
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_log(pilot)
        assert str(screen.title_bar.render()) == f"job {given.RUNNING}: finetune of qwen-0.5b │ running"
        lines = [strip.text for strip in screen.log_view.lines]
        assert lines[0].endswith("started")
        assert lines[-1].endswith("iter 20/100 (20%)  train 2.800  30.90 it/s")
        assert "iter 20/100 ████░░░░░░░░░░░░░░░░ 20%  train 2.800  val 3.200" in str(screen.progress.render())
        screen.add([at(0.0, type="failed", error="out of memory")])
        await pilot.pause()
        assert screen.log_view.lines[-1].text.endswith("failed after 0.4s: out of memory")
        assert str(screen.title_bar.render()).endswith("│ failed")
        await pilot.press("c")  # over: nothing to cancel, no question
        assert shown(app) is screen
        await pilot.press("escape")
        assert shown(app) is app.main


@pytest.mark.anyio
async def test_c_on_a_job_asks_before_cancelling_it(fixed: Callable[[], ConsoleApp]) -> None:
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        await feed(pilot)
        jobs = app.query_one(JobsTable)
        jobs.focus()
        jobs.move_cursor(row=jobs.get_row_index(given.RUNNING))
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        question = str(app.screen.query_one("#question").render())
        assert f"Cancel job {given.RUNNING} (finetune of qwen-0.5b)?" in question and "40/100" in question
        await pilot.press("n")
        assert shown(app) is app.main
        jobs.move_cursor(row=jobs.get_row_index(given.DONE))
        await pilot.press("c")  # a finished job: no question
        assert shown(app) is app.main
        app.main.session_table.focus()
        await pilot.press("c")  # elsewhere, c is still the sessions' (the selected one is over)
        assert shown(app) is app.main


# -- against a real host ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few chat lines to fine-tune on."""
    data = tmp_path_factory.mktemp("tui-jobs") / "chat"
    data.mkdir()
    for name in ("train.jsonl", "valid.jsonl"):
        (data / name).write_text("\n".join([json.dumps(CHAT)] * 8) + "\n")
    return data


@pytest.fixture(scope="module")
def host(tiny_model: Path, data: Path) -> Iterator[RunningHost]:
    with start_host("--model", str(tiny_model), "--state-dir", str(data.parent / "state")) as server:
        yield server


def submit(host: RunningHost, data: Path, iters: int) -> str:
    body = {"kind": "finetune", "model": "tiny", "data": str(data), "iters": iters, "batch_size": 2,
            "num_layers": -1, "steps_per_report": 2}  # fmt: skip
    with host.http() as http:
        response = http.post("/admin/jobs", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


@pytest.mark.anyio
async def test_a_finetune_shows_up_runs_and_its_log_ends_with_its_outcome(
    host: RunningHost, data: Path
) -> None:
    app = make_app(Target(url=host.url, token=host.admin_token))
    async with app.run_test(size=SIZE) as pilot:
        jobs = app.query_one(JobsTable)
        await until(pilot, lambda: app.main.status.connection == "connected", "connected", timeout=WAIT_S)
        job = submit(host, data, iters=10)
        await until(pilot, lambda: job in jobs.rows, "the job is listed", timeout=WAIT_S)
        assert jobs.display

        def succeeded() -> bool:
            return jobs.get_cell(job, "state").plain == "succeeded"

        await until(pilot, succeeded, "it succeeds", timeout=2 * WAIT_S)
        row = app.main.model.jobs[job]
        # Progress events are at most one a second: the last report may come with the next state poll.
        await until(pilot, lambda: row.iteration == 10, "its last report shows", timeout=WAIT_S)
        assert (row.total, row.result) == (10, f"tiny-lora-{job}")
        assert jobs.get_cell(job, "progress").plain.endswith("100%")
        assert f"{job}: finetune of tiny queued" in log_text(app)
        assert f"{job}: succeeded, serves as tiny-lora-{job}" in log_text(app)
        jobs.focus()
        jobs.move_cursor(row=jobs.get_row_index(job))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, JobLogScreen)
        await until(pilot, lambda: screen.outcome is not None, "the log is read to its end", timeout=WAIT_S)
        lines = [strip.text for strip in screen.log_view.lines]
        assert any("iter 10/10 (100%)" in line for line in lines)
        assert "succeeded" in lines[-1]
        assert str(screen.title_bar.render()).endswith(f"serves as tiny-lora-{job}")
        await pilot.press("escape")
        assert shown(app) is app.main


@pytest.mark.anyio
async def test_a_running_jobs_log_follows_it_and_c_cancels_it(host: RunningHost, data: Path) -> None:
    app = make_app(Target(url=host.url, token=host.admin_token))
    async with app.run_test(size=SIZE) as pilot:
        jobs = app.query_one(JobsTable)
        job = submit(host, data, iters=100_000)
        await until(pilot, lambda: job in jobs.rows, "the job is listed", timeout=WAIT_S)
        jobs.focus()
        jobs.move_cursor(row=jobs.get_row_index(job))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, JobLogScreen)

        def reports() -> int:
            return sum(" train " in strip.text for strip in screen.log_view.lines)

        await until(pilot, lambda: reports() >= 2, "its reports come as it writes them", timeout=WAIT_S)
        assert "iter " in str(screen.progress.render())
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: screen.outcome is not None, "its log ends", timeout=WAIT_S)
        assert screen.outcome is not None and screen.outcome.type == "cancelled"
        assert screen.log_view.lines[-1].text.split(" ", 1)[1].startswith("cancelled after ")
        await pilot.press("escape")

        def cancelled() -> bool:
            return jobs.get_cell(job, "state").plain == "cancelled"

        await until(pilot, cancelled, "the pane says so", timeout=WAIT_S)
        with host.http() as http:
            assert http.get(f"/admin/jobs/{job}").json()["state"] == "cancelled"
