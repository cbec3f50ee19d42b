"""Models pulled from the Hugging Face Hub, as the console and `mlxhost status` show them: the
model.download events and the snapshot's `ModelRecord.download` folded into one download per model
(its state, bytes, rate and file), the event log's lines for a download's start and end, a pull
job's progress in bytes, and the row under the workers with its bar, drawn headless from a fixed
state with no host (as tests/e2e/test_tui_fixed_state.py draws the console's).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

import mlxhost.client.status
from mlxhost.client.admin import Target
from mlxhost.client.status import render, run_status, sizes, transfer
from mlxhost.wire.admin import AdminEvent, HostState, ModelDownload, UnknownEvent
from mlxhost.wire.admin.jobs import parse_log_line
from mlxhost_tui.app import ConsoleApp, make_app
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.screens.confirm import ConfirmScreen
from mlxhost_tui.screens.job_log import JobLogScreen
from mlxhost_tui.text import describe
from mlxhost_tui.widgets import DownloadsPanel, EventLog, WorkersTable
from mlxhost_tui.widgets.jobs_table import JobsTable
from tests.e2e.test_tui_fixed_state import screen_text
from tests.unit.test_console_jobs import job_data, ms
from tests.unit.test_console_model import EVENTS, NOW, STATE, STATE_JSON, event

pytestmark = pytest.mark.unit

MIB, GIB = 2**20, 2**30
MODEL, REPO, JOB = "qwen-7b", "mlx-community/Qwen2.5-7B-Instruct-4bit", "d0d0d0d0"
TOTAL = int(2.3 * GIB)
FILE = "model-00002-of-00004.safetensors"
SIZE = (80, 24)

# The fixed state, with a configured model whose files are still coming (a serve-time pull, run as
# a pull job of the host's), started before the snapshot.
DOWNLOADING_JSON: dict[str, Any] = copy.deepcopy(STATE_JSON)
DOWNLOADING_JSON["models"].append({
    "id": MODEL, "aliases": [], "path": REPO, "resident": False, "default": False,
    "download": {"repo": REPO, "state": "downloading", "done_bytes": 300 * MIB, "total_bytes": TOTAL,
                 "bytes_per_s": 38.5 * MIB, "job": JOB, "error": None},
})  # fmt: skip
DOWNLOADING_JSON["jobs"] = [
    job_data(JOB, "pull", REPO, "running", 10, options={"repo": REPO}, pid=6100, started_at=ms(9.5),
             progress={"iteration": 300 * MIB, "total": TOTAL, "bytes_per_s": 38.5 * MIB, "file": FILE}),
]  # fmt: skip
DOWNLOADING = HostState.from_json(DOWNLOADING_JSON)


def download(seq: int, ago: float, state: str, done: int, **fields: Any) -> AdminEvent:
    return event(seq, "model.download", ago, model=MODEL, repo=REPO, state=state, done_bytes=done,
                 total_bytes=TOTAL, job=JOB, **fields)  # fmt: skip


def ticking(seq: int, ago: float, done: int, file: str = FILE) -> AdminEvent:
    return download(seq, ago, "downloading", done, bytes_per_s=40 * MIB, file=file)


# After the console's fixed events (up to 52): two ticks of progress, about a second apart.
DOWNLOAD_EVENTS = [*EVENTS, ticking(53, 1.0, int(1.16 * GIB)), ticking(54, 0.0, int(1.2 * GIB))]


def host_with(change: Callable[[dict[str, Any]], object]) -> HostState:
    """The downloading state, with `change` made to its JSON."""
    data = copy.deepcopy(DOWNLOADING_JSON)
    change(data)
    return HostState.from_json(data)


def served(data: dict[str, Any]) -> None:
    """The state once the files came: the model lists no download, its pull job succeeded."""
    data["seq"] = 60
    del data["models"][-1]["download"]
    data["jobs"][0].update(state="succeeded", ended_at=ms(0))


def test_the_fixed_downloads_read_as_records() -> None:
    assert not [e for e in DOWNLOAD_EVENTS if isinstance(e, UnknownEvent)]
    assert DOWNLOADING.to_json()["models"][-1] == DOWNLOADING_JSON["models"][-1]
    assert STATE.models[-1].download is None and "download" not in STATE.to_json()["models"][-1]


# -- the fold ------------------------------------------------------------------------------------


def test_a_download_from_start_to_done_then_gone_with_the_next_snapshot() -> None:
    model = ConsoleModel()
    model.ingest(NOW, STATE, EVENTS)
    assert model.downloads == {}
    start = download(53, 3, "downloading", 0)
    log = model.ingest(NOW, events=[start, ticking(54, 2, 700 * MIB), ticking(55, 1, int(1.2 * GIB))])
    assert log == [start]  # the progress that follows stays out of the log, as a session's
    row = model.downloads[MODEL]
    assert (row.state, row.done_bytes, row.total_bytes, row.bytes_per_s, row.file) == (
        "downloading", int(1.2 * GIB), TOTAL, 40 * MIB, FILE
    )
    assert row.fraction == pytest.approx(1.2 / 2.3, abs=1e-6) and row.job == JOB
    done = download(56, 0, "done", TOTAL)
    assert model.ingest(NOW, events=[done]) == [done]
    # Done, it stays shown as done (its file and rate gone) until the next snapshot.
    assert (row.state, row.done_bytes, row.bytes_per_s, row.file) == ("done", TOTAL, 0.0, None)
    model.ingest(NOW, state=host_with(served))
    assert model.downloads == {}


def test_a_snapshot_and_the_events_after_it_make_one_download() -> None:
    model = ConsoleModel()
    log = model.ingest(NOW, DOWNLOADING, DOWNLOAD_EVENTS)
    assert list(model.downloads) == [MODEL]
    row = model.downloads[MODEL]
    assert (row.repo, row.done_bytes, row.bytes_per_s, row.file) == (REPO, int(1.2 * GIB), 40 * MIB, FILE)
    # First seen mid-way (the console came after its start), its first tick is logged as its start.
    assert [e.seq for e in log if isinstance(e, ModelDownload)] == [53]
    # A poll each second: the snapshot as new as the events keeps the row and its file (which
    # the snapshot leaves out).
    def as_now(data: dict[str, Any]) -> None:
        data["seq"] = 54
        data["models"][-1]["download"].update(done_bytes=int(1.25 * GIB), bytes_per_s=41 * MIB)

    model.ingest(NOW, state=host_with(as_now))
    assert model.downloads[MODEL] is row and (row.done_bytes, row.bytes_per_s, row.file) == (
        int(1.25 * GIB), 41 * MIB, FILE
    )
    # An older one (a poll that crossed the events) takes nothing back.
    model.ingest(NOW, state=host_with(lambda data: data.update(seq=50)))
    assert row.done_bytes == int(1.25 * GIB)


def test_events_that_name_the_repo_fold_into_the_configured_models_download() -> None:
    """A serve-time pull's events may name its repo (the pull job's model) where the snapshot names
    the configured model: one row, under the configured model's name."""
    model = ConsoleModel()
    by_repo = event(53, "model.download", 0, model=REPO, repo=REPO, state="downloading",
                    done_bytes=GIB, total_bytes=TOTAL, bytes_per_s=40 * MIB, file=FILE, job=JOB)  # fmt: skip
    model.ingest(NOW, DOWNLOADING, [*EVENTS, by_repo])
    assert list(model.downloads) == [MODEL] and model.downloads[MODEL].done_bytes == GIB
    # Seen first by its events, then in a snapshot: the configured model's name, the same row.
    model = ConsoleModel()
    model.ingest(NOW, STATE, [*EVENTS, by_repo])
    row = model.downloads[REPO]
    model.ingest(NOW, state=host_with(lambda data: data.update(seq=53)))
    assert model.downloads == {MODEL: row} and row.model == MODEL and row.file == FILE


def test_a_failed_download_stays_with_its_error_until_the_model_is_served() -> None:
    model = ConsoleModel()
    model.ingest(NOW, DOWNLOADING, DOWNLOAD_EVENTS)
    failed = download(55, 0, "failed", int(1.2 * GIB), error="401 Unauthorized: the repo is gated")
    assert model.ingest(NOW, events=[failed]) == [failed]
    row = model.downloads[MODEL]
    assert (row.state, row.error, row.file, row.bytes_per_s) == (
        "failed", "401 Unauthorized: the repo is gated", None, 0.0
    )

    def failing(data: dict[str, Any]) -> None:  # the host keeps the model pending, with why
        data["seq"] = 56
        failure = {"state": "failed", "done_bytes": 0, "bytes_per_s": 0.0, "error": row.error}
        data["models"][-1]["download"] |= failure
        data["jobs"][0].update(state="failed", error=row.error, ended_at=ms(0))

    model.ingest(NOW, state=host_with(failing))
    assert model.downloads == {MODEL: row} and (row.state, row.error) == ("failed", failed.error)
    # Pulled again (by hand, say) and spawned: it is served, and the row goes at once.
    model.ingest(NOW, events=[event(57, "worker.spawned", 0, worker=MODEL, model=MODEL, pid=6200)])
    assert model.downloads == {}


def test_a_failure_the_next_snapshot_does_not_list_goes() -> None:
    model = ConsoleModel()
    model.ingest(NOW, DOWNLOADING, DOWNLOAD_EVENTS)
    model.ingest(NOW, events=[download(55, 0, "cancelled", GIB, error="cancelled by the operator")])
    assert model.downloads[MODEL].state == "cancelled"
    model.ingest(NOW, state=host_with(served))
    assert model.downloads == {}


def test_a_pull_jobs_download_stays_while_its_job_runs_and_the_job_reads_in_bytes() -> None:
    """`mlxhost pull REPO --url`: a pull job whose events name the repo, which no configured model
    names; the jobs pane keeps its outcome once it ends."""
    other, repo = "e1e1e1e1", "mlx-community/SmolLM-135M-4bit"

    def pulling(data: dict[str, Any]) -> None:
        data["seq"] = 52
        data["models"].pop()
        data["jobs"] = [job_data(other, "pull", repo, "running", 5, options={"repo": repo}, started_at=ms(4))]

    def pulled(data: dict[str, Any]) -> None:
        pulling(data)
        data["seq"] = 56
        data["jobs"][0].update(state="succeeded", ended_at=ms(0))

    tick = event(53, "model.download", 0, model=repo, repo=repo, state="downloading", done_bytes=40 * MIB,
                 total_bytes=90 * MIB, bytes_per_s=20 * MIB, file="model.safetensors", job=other)  # fmt: skip
    model = ConsoleModel()
    model.ingest(NOW, host_with(pulling), [*EVENTS, tick])
    assert list(model.downloads) == [repo]
    job = model.jobs[other]
    assert job.pulls and (job.iteration, job.total, job.bytes_per_s, job.file) == (
        40 * MIB, 90 * MIB, 20 * MIB, "model.safetensors"
    )
    model.ingest(NOW, state=host_with(lambda data: (pulling(data), data.update(seq=54))))
    assert list(model.downloads) == [repo]  # no model names it: the events are all that say it
    model.ingest(NOW, state=host_with(pulled))
    assert model.downloads == {}


def test_a_new_host_has_no_downloads_of_the_old_ones() -> None:
    model = ConsoleModel()
    model.ingest(NOW, DOWNLOADING, DOWNLOAD_EVENTS)
    model.ingest(NOW, state=host_with(lambda data: (data["host"].update(pid=9999), data["models"].pop())))
    assert model.downloads == {}


# -- words ---------------------------------------------------------------------------------------


def test_the_log_says_a_download_started_and_how_it_ended() -> None:
    start, done = download(53, 0, "downloading", 0), download(54, 0, "done", TOTAL)
    assert describe(start) == f"{MODEL}: downloading {REPO}, 2.3 GiB"
    assert describe(done) == f"{MODEL}: downloaded {REPO}, 2.3 GiB"
    failed = download(55, 0, "failed", GIB, error="404 Not Found")
    assert describe(failed) == f"{MODEL}: download of {REPO} failed: 404 Not Found"
    assert describe(download(56, 0, "cancelled", GIB)) == f"{MODEL}: download of {REPO} cancelled"
    by_repo = event(57, "model.download", 0, model=REPO, repo=REPO, state="downloading", done_bytes=0,
                    total_bytes=0)  # fmt: skip
    assert describe(by_repo) == f"{REPO}: downloading"  # a pull job's: its repo, said once; no size yet


@pytest.mark.parametrize(
    ("done", "total", "rate", "text"),
    [
        (int(1.2 * GIB), TOTAL, 40 * MIB, "52% 1.2/2.3 GiB 40.0 MiB/s"),
        (312 * MIB, int(2.1 * GIB), 0.0, "14% 312.0 MiB/2.1 GiB"),
        (TOTAL - 1, TOTAL, 0.0, "99% 2.3/2.3 GiB"),  # 100% only once it is all there
        (5 * MIB, 0, 1.5 * MIB, "5.0 MiB 1.5 MiB/s"),  # the hub has not said how much yet
    ],
)  # fmt: skip
def test_a_downloads_progress_in_few_characters(done: int, total: int, rate: float, text: str) -> None:
    assert transfer(done, total, rate) == text


def test_sizes_say_their_unit_once_where_they_share_it() -> None:
    assert (sizes(GIB, 2 * GIB), sizes(512 * MIB, 2 * GIB)) == ("1.0/2.0 GiB", "512.0 MiB/2.0 GiB")


# -- mlxhost status ------------------------------------------------------------------------------


def test_mlxhost_status_shows_a_downloading_model() -> None:
    text = render(Target(url="http://127.0.0.1:8080"), {"status": "downloading"}, DOWNLOADING)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("MODEL"))
    assert header.split() == ["MODEL", "RESIDENT", "ACTIVE", "QUEUED", "REJECTED", "DOWNLOAD"]
    row = next(line for line in lines if line.startswith(MODEL))
    assert row.endswith(f"downloading 12% 300.0 MiB/2.3 GiB 38.5 MiB/s from {REPO}")
    assert row.index("downloading") == header.index("DOWNLOAD")
    assert next(line for line in lines if line.startswith("qwen-0.5b (default)")).endswith("  -")


def test_mlxhost_status_says_why_a_download_failed() -> None:
    def failing(data: dict[str, Any]) -> None:
        data["models"][-1]["download"] |= {"state": "failed", "bytes_per_s": 0.0, "error": "401 Unauthorized"}

    text = render(Target(url="http://127.0.0.1:8080"), {"status": "ok"}, host_with(failing))
    assert f"failed: 401 Unauthorized ({REPO})" in text


def test_mlxhost_status_without_downloads_reads_as_before() -> None:
    text = render(Target(url="http://127.0.0.1:8080"), {"status": "ok"}, STATE)
    assert "DOWNLOAD" not in text
    assert "MODEL                RESIDENT  ACTIVE  QUEUED  REJECTED" in text.splitlines()


def test_mlxhost_status_json_has_the_download(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def read(target: Target) -> tuple[int, dict[str, Any], HostState]:  # no host: the state as read
        return 200, {"status": "downloading"}, DOWNLOADING

    monkeypatch.setattr(mlxhost.client.status, "_read", read)
    assert run_status("http://127.0.0.1:8080", None, None, as_json=True) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"]["models"][-1]["download"] == DOWNLOADING_JSON["models"][-1]["download"]
    assert run_status("http://127.0.0.1:8080", None, None, as_json=False) == 0
    assert f"downloading 12% 300.0 MiB/2.3 GiB 38.5 MiB/s from {REPO}" in capsys.readouterr().out


# -- the console, headless -----------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio only


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], ConsoleApp]]:
    """A console fed the downloading state and events, through the path the network loop feeds it."""
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
    app.main.ingest(DOWNLOADING, DOWNLOAD_EVENTS)
    app.main.set_connection("connected")
    await pilot.pause()


ROW = f" {MODEL}    downloading  ████░░░░ 52% 1.2/2.3 GiB 40.0 MiB/s  model-00002-of-0…"


def test_snapshot_download_80x24(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    assert snap_compare(fixed(), terminal_size=SIZE, run_before=feed)


@pytest.mark.anyio
async def test_a_download_shows_as_a_row_under_the_workers(fixed: Callable[[], ConsoleApp]) -> None:
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        panel = app.query_one(DownloadsPanel)
        app.main.ingest(STATE)  # nothing downloads: no row
        await pilot.pause()
        assert not panel.display
        await feed(pilot)
        assert panel.display
        lines = [line.rstrip() for line in screen_text(app).splitlines()]
        workers = app.query_one(WorkersTable)
        at = lines.index(ROW)  # right under the workers' rows, STATE under STATE
        assert lines[at - 1].startswith(" llama-3b   starting")
        assert lines[at].index("downloading") == lines[at - 3].index("STATE") and workers.row_count == 2
        assert lines[at + 1].startswith("─Admission")
        log = [line.plain for line in app.query_one(EventLog).entries]
        assert log[-1].endswith(f"model.download     {MODEL}: downloading {REPO}, 2.3 GiB")
        jobs = app.query_one(JobsTable)  # its pull job: bytes, and the rate where a loss would be
        assert jobs.get_cell(JOB, "progress").plain == "████░░░░  52%"
        assert jobs.get_cell(JOB, "loss").plain == "40.0 MiB/s"
        jobs.focus()
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        question = str(app.screen.query_one("#question").render())
        assert f"(pull of {REPO})" in question and "It has 1.2/2.3 GiB;" in question
        await pilot.press("n", "enter")  # its log, in bytes too
        screen = app.screen
        assert isinstance(screen, JobLogScreen) and screen.job_id == JOB
        screen.add([parse_log_line(json.dumps({"type": "progress", "ts": ms(0), "iteration": int(1.2 * GIB),
                                                "total": TOTAL, "bytes_per_s": 40 * MIB, "file": FILE}))])
        await pilot.pause()
        assert screen.log_view.lines[-1].text.endswith(f"1.2 GiB/2.3 GiB (52%)  40.0 MiB/s  {FILE}")
        await pilot.press("escape")
        app.main.ingest(events=[download(55, -0.5, "done", TOTAL)])
        await pilot.pause()
        assert str(panel.render()) == f"{MODEL}    done         ████████ 100% 2.3/2.3 GiB"
        assert app.query_one(EventLog).entries[-1].plain.endswith(f"{MODEL}: downloaded {REPO}, 2.3 GiB")
        app.main.ingest(host_with(served))
        await pilot.pause()
        assert not panel.display and "█ 100%" not in screen_text(app)


@pytest.mark.anyio
async def test_a_failed_download_shows_why(fixed: Callable[[], ConsoleApp]) -> None:
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        await feed(pilot)
        app.main.ingest(events=[download(55, 0, "failed", GIB, error="401 Unauthorized: the repo is gated")])
        await pilot.pause()
        panel = app.query_one(DownloadsPanel)
        assert str(panel.render()) == f"{MODEL}    failed       401 Unauthorized: the repo is gated"
