"""The console's screens: the dashboard, a yes/no question, and the keys."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Static

from mlxhost.wire.admin import AdminEvent, HostState
from mlxhost_tui.model import ConsoleModel, Note, strip_controls
from mlxhost_tui.widgets import AdmissionPanel, EventLog, FilterInput, SessionsTable, StatusBar, WorkersTable

if TYPE_CHECKING:
    from mlxhost_tui.app import ConsoleApp

__all__ = ["ConfirmScreen", "HelpScreen", "MainScreen"]

TICK_S = 1.0


class ConfirmScreen(ModalScreen[bool]):
    """Asks before something the operator cannot take back: y does it, n or escape does not."""

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
    }
    ConfirmScreen > Vertical {
        width: 60;
        max-width: 90%;
        height: auto;
        border: thick $warning;
        background: $surface;
        padding: 1 2;
    }
    ConfirmScreen .hint {
        margin-top: 1;
        color: $text-muted;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str | Text) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, id="question")
            yield Static("y  yes      n / esc  no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


HELP = """\
[b]mlxhost tui[/b]: the host's workers, sessions, admission and events, live.

  [b]c[/b]      cancel the selected session (asks first)
  [b]r[/b]      restart the selected worker once its sessions end (asks first)
  [b]/[/b]      filter sessions and events by text; [b]esc[/b] clears the filter
  [b]tab[/b]    move between the workers, the sessions and the events
  [b]↑ ↓[/b]    select a row
  [b]?[/b]      this help; [b]esc[/b] closes it
  [b]q[/b]      quit

Closed sessions stay a few seconds with their outcome, then fade out.
Progress and memory readings update the tables, not the event log.
If the host goes away the top bar says so, and the console reconnects.
"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Static {
        width: 78;
        max-width: 100%;
        height: auto;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        yield Static(HELP)


class MainScreen(Screen[None]):
    """The dashboard. `ingest` is the one way in for what the host says, live or injected."""

    DEFAULT_CSS = """
    MainScreen > WorkersTable, MainScreen > SessionsTable, MainScreen > AdmissionPanel,
    MainScreen > EventLog {
        border: none;
        border-top: solid $primary-muted;
        border-title-color: $text;
        border-title-style: bold;
        background: $surface;
    }
    MainScreen > *:focus {
        border-top: solid $accent;
    }
    MainScreen.-offline > WorkersTable, MainScreen.-offline > SessionsTable,
    MainScreen.-offline > AdmissionPanel {
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
        self.admission = AdmissionPanel(self.model)
        self.session_table = SessionsTable(self.model, clock)
        self.event_log = EventLog()
        self.filter = FilterInput()
        self._redraw_pending = False

    def compose(self) -> ComposeResult:
        yield self.status
        yield self.worker_table
        yield self.admission
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
                self.event_log.add(entry)
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
        for panel, title in ((self.worker_table, "Workers"), (self.session_table, "Sessions"), (self.admission, "Admission")):
            panel.border_title = f"{title} (last known)" if connection == "disconnected" else title

    def note(self, message: str) -> None:
        self.event_log.note(message)

    def redraw(self) -> None:
        self._redraw_pending = False
        if not self.is_mounted:
            return
        self.model.expire(self.clock())
        self.worker_table.redraw()
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
        question = Text.assemble(
            "Cancel session ", (session.id, "bold"), f" on {session.model}?\n",
            f"It has made {session.tokens} tokens; its client gets a 'cancelled' error.",
        )

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
        )

        def answer(yes: bool | None) -> None:
            if yes:
                self.console.restart_worker(worker.id)

        self.app.push_screen(ConfirmScreen(question), answer)
