"""The console's panels. Each owns its slice of what the host said, folds in the events it cares
about, and draws itself; none of them does I/O."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Input, RichLog, Static

from mlxhost_tui.state import (
    QUIET_EVENTS,
    Gauge,
    HostInfo,
    Session,
    Worker,
    bar,
    clock_time,
    describe,
    duration,
    size,
    sparkline,
)

__all__ = ["AdmissionPanel", "EventLog", "FilterInput", "SessionsTable", "StatusBar", "WorkersTable"]

Clock = Callable[[], float]
Event = dict[str, Any]
Cells = tuple[Text, ...]

STATE_STYLES = {
    "ready": "green",
    "running": "green",
    "completed": "green",
    "starting": "yellow",
    "restarting": "yellow",
    "unloading": "yellow",
    "queued": "yellow",
    "preparing": "yellow",
    "settling": "yellow",
    "cancelled": "yellow",
    "exited": "red",
    "exhausted": "bold red",
    "failed": "red",
    "closed": "dim",
}


def _state(value: str) -> Text:
    return Text(value, STATE_STYLES.get(value, ""))


class StatusBar(Static):
    """Where the console is connected, and the host at a glance; loud when the link is down."""

    DEFAULT_CSS = """
    StatusBar {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $panel;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    StatusBar.-offline {
        background: $error;
        color: $text;
        text-style: bold;
    }
    """

    connection: reactive[str] = reactive("connecting")
    detail: reactive[str] = reactive("")

    def __init__(self, where: str, clock: Clock) -> None:
        super().__init__()
        self.where = where
        self.clock = clock
        self.host: HostInfo | None = None
        self.seq = 0
        self.live = 0

    def watch_connection(self, connection: str) -> None:
        self.set_class(connection == "disconnected", "-offline")

    def render(self) -> Text:
        text = Text(f"{self.where.removeprefix('http://')} ")
        if self.connection == "connected":
            text.append("● connected", "bold green")
        elif self.connection == "disconnected":
            text.append("✖ disconnected — retrying")
        else:
            text.append("… connecting")
        if self.detail:
            text.append(f" ({self.detail})")
        if self.host is not None:
            host = self.host
            uptime = duration(max(0.0, self.clock() - host.started))
            text.append(f" │ host {host.pid} up {uptime}")
            if not host.accepting:
                text.append(", stopping", "bold yellow")
            text.append(f" │ {self.live} live of {host.opened} │ #{self.seq}")
        return text


class _Table(DataTable[Text]):
    """A table redrawn from its owner's data: in place while the rows stay, rebuilt when they change."""

    COLUMNS: Sequence[tuple[str, str]] = ()

    def __init__(self, clock: Clock, id: str) -> None:
        super().__init__(cursor_type="row", id=id)
        self.clock = clock
        self._drawn: dict[str, Cells] = {}

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)

    def rows_now(self) -> dict[str, Cells]:
        raise NotImplementedError

    def redraw(self) -> None:
        rows = self.rows_now()
        if list(rows) != list(self._drawn):
            selected = self.selected_key
            index = self.cursor_row
            self.clear()
            for key, cells in rows.items():
                self.add_row(*cells, key=key)
            if rows:
                keys = list(rows)
                self.move_cursor(row=keys.index(selected) if selected in rows else min(index, len(keys) - 1))
        else:
            for key, cells in rows.items():
                drawn = self._drawn[key]
                for (column, _), cell, old in zip(self.COLUMNS, cells, drawn, strict=True):
                    if cell != old:
                        self.update_cell(key, column, cell, update_width=True)
        self._drawn = rows

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return row_key.value


class WorkersTable(_Table):
    DEFAULT_CSS = """
    WorkersTable {
        height: auto;
        max-height: 8;
    }
    """
    COLUMNS = (
        ("model", "MODEL"),
        ("state", "STATE"),
        ("pid", "PID"),
        ("restarts", "RESTARTS"),
        ("up", "UP"),
        ("memory", "MEMORY"),
        ("trend", "RECENT"),
        ("exit", "LAST EXIT"),
    )
    TREND_WIDTH = 12

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock, id="workers")
        self.border_title = "Workers"
        self.known: dict[str, Worker] = {}

    def load(self, state: dict[str, Any], now: float, stale: bool) -> None:
        if stale:
            for data in state["workers"]:
                if (worker := self.known.get(data["id"])) is not None:
                    worker.in_flight = data["in_flight"]
            return
        workers: dict[str, Worker] = {}
        for data in state["workers"]:
            worker = self.known.get(data["id"])
            if worker is None:
                worker = Worker.from_snapshot(data, now)
            else:
                worker.update(data, now)
            workers[worker.id] = worker
        self.known = workers

    def apply(self, event: Event) -> None:
        name = event.get("worker") or (event.get("model") if event["type"] == "model.evicted" else None)
        if name is None:
            return
        worker = self.known.get(name)
        if worker is None:
            if event["type"] != "worker.spawned":
                return
            worker = self.known[name] = Worker(name, event["model"])
        worker.on_event(event)

    def rows_now(self) -> dict[str, Cells]:
        now = self.clock()
        rows: dict[str, Cells] = {}
        for worker in self.known.values():
            uptime = worker.uptime(now)
            rows[worker.id] = (
                Text(worker.model),
                _state(worker.state),
                Text(str(worker.pid or "-")),
                Text(str(worker.restarts), "bold red" if worker.restarts else ""),
                Text(duration(uptime) if uptime is not None else "-"),
                Text(size(worker.memory) if worker.memory is not None else "-", justify="right"),
                Text(sparkline(worker.readings, self.TREND_WIDTH).ljust(self.TREND_WIDTH), "cyan"),
                Text(worker.exit_text()),
            )
        return rows

    @property
    def selected(self) -> Worker | None:
        key = self.selected_key
        return self.known.get(key) if key is not None else None


class SessionsTable(_Table):
    DEFAULT_CSS = """
    SessionsTable {
        height: 1fr;
        min-height: 4;
    }
    """
    COLUMNS = (
        ("id", "SESSION"),
        ("model", "MODEL"),
        ("state", "STATE"),
        ("tokens", "TOKENS"),
        ("rate", "TOK/S"),
        ("age", "AGE"),
        ("outcome", "OUTCOME"),
    )

    filter_text: reactive[str] = reactive("")

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock, id="sessions")
        self.border_title = "Sessions"
        self.known: dict[str, Session] = {}

    def watch_filter_text(self) -> None:
        if self.is_mounted:
            self.redraw()

    def load(self, state: dict[str, Any], now: float, stale: bool) -> None:
        live = state["sessions"]["live"]
        if stale:
            for data in live:
                session = self.known.get(data["id"])
                if session is not None and not session.closed:
                    session.state = data["state"]
            return
        sessions = {data["id"]: Session.from_snapshot(data, now) for data in live}
        # Sessions that closed a moment ago keep their place a few seconds, with their outcome.
        host_now = state["host"]["started"] + state["host"]["uptime_s"]
        for data in state["sessions"]["recent"]:
            if data["id"] not in self.known:
                session = Session.recent(data, host_now, now)
                if not session.expired(now):
                    sessions[session.id] = session
        for session in self.known.values():
            if session.closed and session.id not in sessions and not session.expired(now):
                sessions[session.id] = session
        self.known = sessions

    def apply(self, event: Event) -> None:
        kind, key = event["type"], event.get("session")
        if key is None:
            return
        if kind == "session.opened":
            self.known[key] = Session(key, event["model"], event["stream"], opened_at=event["at"] / 1000)
        elif (session := self.known.get(key)) is not None:
            session.on_event(event)

    @property
    def live(self) -> int:
        return sum(not s.closed for s in self.known.values())

    def expire(self, now: float) -> None:
        for key in [k for k, s in self.known.items() if s.expired(now)]:
            del self.known[key]

    def rows_now(self) -> dict[str, Cells]:
        now = self.clock()
        rows: dict[str, Cells] = {}
        wanted = self.filter_text.lower()
        for session in sorted(self.known.values(), key=lambda s: s.opened_at, reverse=True):
            if wanted and wanted not in session.text().lower():
                continue
            dim = "dim" if session.fading(now) else ""
            state = session.shown_state()
            rows[session.id] = (
                Text(session.id, dim),
                Text(session.model, dim),
                Text(state, dim or STATE_STYLES.get(state, "")),
                Text(str(session.tokens), dim, justify="right"),
                Text(f"{session.tokens_per_s:.1f}", dim, justify="right"),
                Text(duration(session.age(now)), dim, justify="right"),
                Text(session.outcome_text(), dim),
            )
        return rows

    @property
    def selected(self) -> Session | None:
        key = self.selected_key
        return self.known.get(key) if key is not None else None


class AdmissionPanel(Widget):
    """Per model: requests running and waiting against their limits, and refusals."""

    DEFAULT_CSS = """
    AdmissionPanel {
        height: auto;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """
    BAR_WIDTH = 8

    def __init__(self) -> None:
        super().__init__(id="admission")
        self.border_title = "Admission"
        self.gauges: dict[str, Gauge] = {}

    def load(self, state: dict[str, Any]) -> None:
        gauges = {m["id"]: self.gauges.get(m["id"]) or Gauge(m["id"]) for m in state["models"]}
        for model, data in state["admission"].items():
            gauges.setdefault(model, Gauge(model)).update(data)
        self.gauges = gauges

    def apply(self, event: Event) -> None:
        if event["type"] == "admission.rejected":
            self.gauges.setdefault(event["model"], Gauge(event["model"])).on_event(event)

    def redraw(self) -> None:
        self.refresh(layout=True)

    def render(self) -> Text:
        if not self.gauges:
            return Text("no models", "dim")
        width = max(8, *(len(m) for m in self.gauges))
        lines = []
        for gauge in self.gauges.values():
            line = Text(gauge.model.ljust(width))
            if gauge.max_active is None:
                line.append("  no requests yet", "dim")
            else:
                line.append("  active ")
                line.append(bar(gauge.active, gauge.max_active, self.BAR_WIDTH), "green")
                line.append(f" {gauge.active}/{gauge.max_active}".ljust(7))
                line.append("queued ")
                line.append(bar(gauge.queued, gauge.max_queued, self.BAR_WIDTH), "yellow")
                line.append(f" {gauge.queued}/{gauge.max_queued}".ljust(7))
                line.append(f"rejected {gauge.rejected}", "bold red" if gauge.rejected else "")
                line.append(f"  admitted {gauge.admitted}")
            lines.append(line)
        return Text("\n").join(lines)


class EventLog(RichLog):
    """What happened, newest at the bottom; progress and memory readings only update the tables."""

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
        min-height: 4;
        padding: 0 1;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    """
    KEPT = 1000

    filter_text: reactive[str] = reactive("")

    def __init__(self) -> None:
        super().__init__(max_lines=self.KEPT, wrap=False, id="events")
        self.border_title = "Events"
        self.entries: collections.deque[Text] = collections.deque(maxlen=self.KEPT)

    def add(self, event: Event) -> None:
        if event["type"] in QUIET_EVENTS:
            return
        line = Text(clock_time(event["at"] / 1000) + " ", "dim")
        line.append(event["type"].ljust(19), _event_style(event))
        line.append(describe(event))
        self._keep(line)

    def note(self, message: str) -> None:
        self._keep(Text(f"── {message}", "bold"))

    def _keep(self, line: Text) -> None:
        self.entries.append(line)
        if self._matches(line):
            self.write(line)

    def _matches(self, line: Text) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.plain.lower()

    def watch_filter_text(self) -> None:
        self.clear()
        for line in self.entries:
            if self._matches(line):
                self.write(line)


def _event_style(event: Event) -> str:
    kind = event["type"]
    if kind in ("worker.exited", "worker.exhausted", "admission.rejected", "stream.lagged"):
        return "red"
    if kind in ("worker.restarting", "model.evicted", "host.stopping", "stream.reset"):
        return "yellow"
    if kind == "session.closed":
        return STATE_STYLES.get(event.get("kind", ""), "")
    if kind == "worker.ready":
        return "green"
    return "cyan"


class FilterInput(Input):
    """Narrows the sessions and the event log to lines holding its text; escape clears it."""

    DEFAULT_CSS = """
    FilterInput {
        display: none;
        margin: 0 1;
    }
    FilterInput.-shown {
        display: block;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "clear", "Clear filter")]

    def __init__(self) -> None:
        super().__init__(placeholder="filter sessions and events (esc clears)", compact=True, id="filter")

    def action_clear(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        self.screen.query_one(SessionsTable).focus()
