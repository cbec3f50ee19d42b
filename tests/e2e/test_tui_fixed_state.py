"""The `mlxhost tui` console drawn from a fixed state (`given`), with no host: snapshots, the keys
that need no host, text from the host with control characters in it, and a worker group's ranks."""

from __future__ import annotations

import dataclasses
import io
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console
from textual.pilot import Pilot

from mlxhost.client.admin import Target
from mlxhost.wire.admin import RankRecord, StandbyRecord
from mlxhost_tui.app import ConsoleApp, make_app
from mlxhost_tui.screens.confirm import ConfirmScreen
from mlxhost_tui.screens.help import HelpScreen
from mlxhost_tui.widgets import EventLog, SessionsTable, StatusBar, WorkersTable
from mlxhost_tui.widgets.workers_table import RANK_KEY
from tests.e2e.tui_helpers import SIZE, anyio_backend  # noqa: F401
from tests.unit import test_console_model as given  # the fixed state the snapshots draw
from tests.unit import test_console_sessions as pooled  # embed and rerank sessions

STANDBY = (StandbyRecord(pid=5100, state="ready", rss_bytes=310 << 20),)  # the snapshots show its row


@pytest.fixture
def fixed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], ConsoleApp]]:
    """A console fed the fixed state and events, through the path the network loop feeds it."""
    monkeypatch.setenv("TZ", "UTC")  # the log shows local times
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()

    def make() -> ConsoleApp:
        return make_app(Target(url="http://127.0.0.1:8080"), clock=lambda: given.NOW, live=False)

    yield make
    monkeypatch.undo()
    time.tzset()


async def feed(pilot: Pilot[Any], connection: str = "connected", detail: str = "") -> None:
    app: ConsoleApp = pilot.app  # type: ignore[assignment]
    app.main.ingest(dataclasses.replace(given.STATE, standby=STANDBY), given.EVENTS)
    app.main.set_connection(connection, detail)
    await pilot.pause()


def test_snapshot_80x24(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    assert snap_compare(fixed(), terminal_size=(80, 24), run_before=feed)


def test_snapshot_120x40(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    assert snap_compare(fixed(), terminal_size=(120, 40), run_before=feed)


def test_snapshot_disconnected(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    async def lost(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        pilot.app.main.set_connection("disconnected", "cannot connect")  # type: ignore[attr-defined]
        await pilot.pause()

    assert snap_compare(fixed(), terminal_size=(80, 24), run_before=lost)


def test_snapshot_pooled_80x24(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    """An embed session closed a moment ago and a rerank session running, above the generations."""
    opened = given.event(
        56, "session.opened", 0.05, session=pooled.RERANK, model="bge-small", stream=False, kind="rerank"
    )
    rerank = pooled.pooled_data(pooled.RERANK, "rerank", "running", 0, 0)
    embedded = pooled.pooled_data(pooled.EMBED, "embed", "closed", 64, 12_345) | {
        "outcome": {"kind": "completed", "finish_reason": "stop"}
    }

    def poll(data: dict[str, Any]) -> None:  # older than the events: it only adds what they leave out
        data["sessions"]["live"].append(rerank)
        data["sessions"]["recent"] = [embedded]

    async def both(pilot: Pilot[Any]) -> None:
        app: ConsoleApp = pilot.app  # type: ignore[assignment]
        events = [*given.EVENTS, *pooled.embed_events(53), opened]
        app.main.ingest(dataclasses.replace(given.STATE, standby=STANDBY), events)
        app.main.ingest(given.state_with(poll))  # the embed session's prompt tokens
        app.main.set_connection("connected")
        await pilot.pause()

    assert snap_compare(fixed(), terminal_size=(80, 24), run_before=both)


def test_snapshot_drafts_80x24(fixed: Callable[[], ConsoleApp], snap_compare: Any) -> None:
    """The running generation ended at its length limit, 11 of its 18 drafts accepted: the widest
    common outcome still fits its cell at 80 columns."""
    closed = given.event(
        53, "session.closed", 0.1, session="s-0123456789ab", model="qwen-0.5b", tokens=340, age_ms=12_600,
        kind="completed", finish_reason="length", drafted_tokens=18, accepted_tokens=11,
    )  # fmt: skip

    async def drafted(pilot: Pilot[Any]) -> None:
        await feed(pilot)
        pilot.app.main.ingest(events=[closed])  # type: ignore[attr-defined]
        await pilot.pause()

    assert snap_compare(fixed(), terminal_size=(80, 24), run_before=drafted)


@pytest.mark.anyio
async def test_filter_help_and_quit_keys(fixed: Callable[[], ConsoleApp]) -> None:
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        await feed(pilot)
        sessions, log = app.query_one(SessionsTable), app.query_one(EventLog)
        await pilot.press("slash", *"llama")
        assert list(sessions.rows) == ["s-abcdef012345"]
        assert log.lines and all("llama" in line.text for line in log.lines)
        await pilot.press("enter")
        assert sessions.has_focus and app.main.filter_text == "llama"
        await pilot.press("c")  # a closed session cannot be cancelled: no question
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("slash", "escape")
        assert len(sessions.rows) == 3 and app.main.filter_text == ""
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert app.screen is app.main
        await pilot.press("q")
    assert app.return_code == 0


CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but the line ends of the export


def screen_text(app: ConsoleApp) -> str:
    """What the terminal would be sent for the screen now, as text (styles left out)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), force_terminal=True, color_system="truecolor",
        record=True, legacy_windows=False,
    )  # fmt: skip
    console.print(update)
    return console.export_text(styles=False)


@pytest.mark.anyio
async def test_control_characters_from_the_host_never_reach_the_screen(
    fixed: Callable[[], ConsoleApp],
) -> None:
    app = fixed()
    async with app.run_test(size=(160, 40)) as pilot:
        app.main.ingest(given.state_with(given.with_controls), [*given.EVENTS, *given.EVENTS_WITH_CONTROLS])
        app.main.set_connection("disconnected", f"HTTP 500 {given.EVIL}")
        await pilot.pause()
        shown = screen_text(app)
        assert "pwned" in shown  # the text is there, its controls are not
        assert not CONTROL.search(shown), repr(CONTROL.findall(shown))
        sessions, log = app.query_one(SessionsTable), app.query_one(EventLog)
        cells = [cell.plain for row in sessions.rows for cell in sessions.get_row(row)]
        for text in [*cells, *(line.plain for line in log.entries), app.query_one(StatusBar).render().plain]:
            assert not CONTROL.search(text), repr(text)


@pytest.mark.anyio
async def test_a_worker_groups_ranks_show_under_their_model(fixed: Callable[[], ConsoleApp]) -> None:
    ranks = (
        RankRecord(rank=0, host="mac-1", pid=7001, rss_bytes=2 << 30),
        RankRecord(rank=1, host="mac-2", pid=7002, rss_bytes=None),
    )
    worker = dataclasses.replace(given.STATE.workers[0], ranks=ranks)
    state = dataclasses.replace(given.STATE, workers=(worker, *given.STATE.workers[1:]))
    app = fixed()
    async with app.run_test(size=SIZE) as pilot:
        app.main.ingest(state, given.EVENTS)
        await pilot.pause()
        table = app.query_one(WorkersTable)
        rows = {key: [cell.plain for cell in cells] for key, cells in table.rows_now().items()}
        keys = list(rows)
        at = keys.index(worker.id)
        assert keys[at + 1 : at + 3] == [f"{worker.id}{RANK_KEY}0", f"{worker.id}{RANK_KEY}1"]
        first, second = rows[keys[at + 1]], rows[keys[at + 2]]
        assert "rank 0 @mac-1" in first[0] and first[2] == "7001" and first[5] == "2.0 GiB"
        assert "rank 1 @mac-2" in second[0] and second[2] == "7002" and second[5] == "-"  # another machine
