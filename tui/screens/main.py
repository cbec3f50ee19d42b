"""The dashboard: the host's workers (and the models' downloads), admission, jobs, sessions and
events, live, and the operator's actions on them (each asked first)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input

from mlxhost.wire.admin import AdminEvent, HostState
from mlxhost_tui.model import ConsoleModel, Note, strip_controls
from mlxhost_tui.screens import TICK_S
from mlxhost_tui.screens.confirm import ConfirmScreen
from mlxhost_tui.screens.help import HelpScreen
from mlxhost_tui.screens.job_log import JobLogScreen, confirm_cancel_job
from mlxhost_tui.widgets import (
    AdmissionPanel,
    DownloadsPanel,
    EventLog,
    FilterInput,
    SessionsTable,
    StatusBar,
    WorkersTable,
)
from mlxhost_tui.widgets.jobs_table import JobsTable

if TYPE_CHECKING:
    from mlxhost_tui.app import ConsoleApp

__all__ = ["MainScreen"]


class MainScreen(Screen[None]):
    """The dashboard. `ingest` is the one way in for what the host says, live or injected."""

    DEFAULT_CSS = """
    MainScreen > WorkersTable, MainScreen > SessionsTable, MainScreen > AdmissionPanel,
    MainScreen > JobsTable, MainScreen > EventLog {
        border: none;
        border-top: solid $primary-muted;
        border-title-color: $text;
        border-title-style: bold;
        background: $surface;
    }
    MainScreen > *:focus {
        border-top: solid $accent;
    }
    MainScreen > DownloadsPanel {
        background: $surface;  /* no border: its lines are rows of the workers pane */
    }
    MainScreen.-offline > WorkersTable, MainScreen.-offline > SessionsTable,
    MainScreen.-offline > AdmissionPanel, MainScreen.-offline > JobsTable,
    MainScreen.-offline > DownloadsPanel {
        opacity: 70%;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "cancel_session", "Cancel session"),
        Binding("r", "restart_worker", "Restart worker"),
        Binding("slash", "filter", "Filter"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    filter_text: reactive[str] = reactive("")

    def __init__(self, where: str, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock
        self.model = ConsoleModel()
        self.status = StatusBar(where, self.model, clock)
        self.worker_table = WorkersTable(self.model, clock)
        self.downloads = DownloadsPanel(self.model, self.worker_table)
        self.admission = AdmissionPanel(self.model)
        self.job_table = JobsTable(self.model, clock)
        self.session_table = SessionsTable(self.model, clock)
        self.event_log = EventLog()
        self.filter = FilterInput()
        self._redraw_pending = False

    def compose(self) -> ComposeResult:
        yield self.status
        yield self.worker_table
        yield self.downloads
        yield self.admission
        yield self.job_table.data_bind(MainScreen.filter_text)
        yield self.session_table.data_bind(MainScreen.filter_text)
        yield self.event_log.data_bind(MainScreen.filter_text)
        yield self.filter
        yield Footer()

    def on_mount(self) -> None:
        self.session_table.focus()
        self.redraw()
        self.set_interval(TICK_S, self.redraw)

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[return-value]

    # -- what the host says ----------------------------------------------------------------

    def ingest(self, state: HostState | None = None, events: Iterable[AdminEvent] = ()) -> None:
        """Fold a state snapshot, then events, into the model (see `ConsoleModel.ingest`), log
        what the log gains, and draw once."""
        for entry in self.model.ingest(self.clock(), state, events):
            if isinstance(entry, Note):
                self.event_log.note(entry.message)
            else:
                self.event_log.add(entry, self.model.session_of(entry))
        # Events come in bursts (progress, four a second per session): draw once per burst.
        if not self._redraw_pending:
            self._redraw_pending = True
            self.call_later(self.redraw)

    def set_connection(self, connection: str, detail: str = "") -> None:
        detail = strip_controls(detail)  # an error's text may quote what the host answered
        if connection == "disconnected" and self.status.connection == "connected":
            self.event_log.note(f"lost the host: {detail}" if detail else "lost the host")
        self.status.connection = connection
        self.status.detail = detail
        self.set_class(connection == "disconnected", "-offline")
        panels = (
            (self.worker_table, "Workers"), (self.session_table, "Sessions"), (self.admission, "Admission"),
            (self.job_table, "Jobs"),
        )  # fmt: skip
        for panel, title in panels:
            panel.border_title = f"{title} (last known)" if connection == "disconnected" else title

    def note(self, message: str) -> None:
        self.event_log.note(message)

    def redraw(self) -> None:
        self._redraw_pending = False
        if not self.is_mounted:
            return
        self.model.expire(self.clock())
        self.worker_table.redraw()
        self.downloads.redraw()  # after the table: its lines line up with the table's columns
        self.job_table.redraw()
        self.session_table.redraw()
        self.admission.redraw()
        self.status.refresh()

    # -- filter ----------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.filter.add_class("-shown")
        self.filter.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self.filter:
            self.filter_text = event.value.strip()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input is self.filter:
            if not event.value.strip():
                self.filter.remove_class("-shown")
            self.session_table.focus()

    # -- actions ---------------------------------------------------------------------------

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_cancel_session(self) -> None:
        session = self.session_table.selected
        if session is None:
            self.notify("No session is selected.", severity="warning")
            return
        if session.closed:
            self.notify(f"{session.id} is already over.", severity="warning")
            return
        made = f"{session.inputs} inputs" if session.pooled else f"{session.tokens} tokens"
        question = Text.assemble(
            "Cancel session ", (session.id, "bold"), f" on {session.model}?\n",
            f"It has made {made}; its client gets a 'cancelled' error.",
        )  # fmt: skip

        def answer(yes: bool | None) -> None:
            if yes:
                self.console.cancel_session(session.id)

        self.app.push_screen(ConfirmScreen(question), answer)

    def action_restart_worker(self) -> None:
        worker = self.worker_table.selected
        if worker is None:
            self.notify("No worker is selected.", severity="warning")
            return
        busy = f" after its {worker.in_flight} running request(s) finish" if worker.in_flight else ""
        question = Text.assemble(
            "Restart worker ", (worker.id, "bold"), f" (pid {worker.pid or '-'})?\n",
            f"A new process loads {worker.model}{busy}; new requests wait meanwhile.",
        )  # fmt: skip

        def answer(yes: bool | None) -> None:
            if yes:
                self.console.restart_worker(worker.id)

        self.app.push_screen(ConfirmScreen(question), answer)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table is self.job_table and event.row_key.value is not None:
            self.app.push_screen(JobLogScreen(event.row_key.value, self.model))

    def action_cancel_job(self) -> None:
        job = self.job_table.selected
        if job is None:
            self.notify("No job is selected.", severity="warning")
            return
        confirm_cancel_job(self, job)
