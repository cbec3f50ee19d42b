"""The console's screens: the dashboard, a job's log, a yes/no question, and the keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

import httpx
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, RichLog, Static

from mlxhost.client.admin import AdminClient, AdminRefused
from mlxhost.client.jobs import event_line, outcome_line, progress_line
from mlxhost.wire.admin import AdminEvent, HostState
from mlxhost.wire.admin.jobs import JobLogEvent, JobState
from mlxhost_tui.model import ConsoleModel, Note, strip_controls
from mlxhost_tui.parts import JobRow
from mlxhost_tui.text import clock_time
from mlxhost_tui.widgets import AdmissionPanel, EventLog, FilterInput, SessionsTable, StatusBar, WorkersTable
from mlxhost_tui.widgets.jobs_table import JOB_STYLES, JobsTable

if TYPE_CHECKING:
    from mlxhost_tui.app import ConsoleApp

__all__ = ["ConfirmScreen", "HelpScreen", "JobLogScreen", "MainScreen"]

TICK_S = 1.0
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 2.0


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

  [b]c[/b]      cancel the selected session, or job (asks first)
  [b]r[/b]      restart the selected worker once its sessions end (asks first)
  [b]enter[/b]  on a job: follow its log; [b]esc[/b] comes back
  [b]/[/b]      filter jobs, sessions and events by text; [b]esc[/b] clears the filter
  [b]tab[/b]    move between the workers, the jobs, the sessions and the events
  [b]↑ ↓[/b]    select a row
  [b]?[/b]      this help; [b]esc[/b] closes it
  [b]q[/b]      quit

Closed sessions stay a few seconds with their outcome, then fade out.
The jobs pane shows while the host lists a job; a job runs alone, pausing the workers.
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
    MainScreen.-offline > WorkersTable, MainScreen.-offline > SessionsTable,
    MainScreen.-offline > AdmissionPanel, MainScreen.-offline > JobsTable {
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
        self.job_table = JobsTable(self.model, clock)
        self.session_table = SessionsTable(self.model, clock)
        self.event_log = EventLog()
        self.filter = FilterInput()
        self._redraw_pending = False

    def compose(self) -> ComposeResult:
        yield self.status
        yield self.worker_table
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

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table is self.job_table and event.row_key.value is not None:
            self.app.push_screen(JobLogScreen(event.row_key.value, self.model))

    def action_cancel_job(self) -> None:
        job = self.job_table.selected
        if job is None:
            self.notify("No job is selected.", severity="warning")
            return
        confirm_cancel_job(self, job)


def confirm_cancel_job(screen: Screen[None], job: JobRow) -> None:
    """Ask, then ask the host to cancel `job`; a finished job cannot be."""
    if job.terminal:
        screen.notify(f"{job.id} is already over.", severity="warning")
        return
    where = f"It is at {job.iteration}/{job.total}" if job.total else f"It is {job.shown_state()}"
    question = Text.assemble(
        "Cancel job ", (job.id, "bold"), f" ({job.kind} of {job.model})?\n",
        f"{where}; its process is stopped and what it made is not kept.",
    )
    console: ConsoleApp = screen.app  # type: ignore[assignment]

    def answer(yes: bool | None) -> None:
        if yes:
            console.cancel_job(job.id)

    screen.app.push_screen(ConfirmScreen(question), answer)


class JobLogScreen(Screen[None]):
    """A job's log, as the job writes it: every line since it started, then each as it comes.

    The log is read from the host in a worker that resumes after the last line it has when the
    connection drops; the host ends the stream after the job's outcome. `add` is the one way in,
    so that tests feed it lines as the worker does.
    """

    DEFAULT_CSS = """
    JobLogScreen > #job-title {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $panel;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    JobLogScreen > #job-progress {
        height: 1;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    JobLogScreen > RichLog {
        height: 1fr;
        padding: 0 1;
        border: none;
        border-top: solid $primary-muted;
        background: $surface;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("c", "cancel_job", "Cancel job"),
    ]

    def __init__(self, job_id: str, model: ConsoleModel) -> None:
        super().__init__()
        self.job_id = job_id
        self.model = model
        self.title_bar = Static(id="job-title")
        self.progress = Static(id="job-progress")
        self.log_view = RichLog(max_lines=5000, wrap=False, id="job-log")
        self.train: float | None = None
        self.val: float | None = None
        self.started_at: int | None = None
        self.outcome: JobLogEvent | None = None
        self.last_line: int | None = None  # the id of the last line read: where the worker resumes

    def compose(self) -> ComposeResult:
        yield self.title_bar
        yield self.progress
        yield self.log_view
        yield Footer()

    @property
    def job(self) -> JobRow | None:
        return self.model.jobs.get(self.job_id)

    @property
    def console(self) -> ConsoleApp:
        return self.app  # type: ignore[return-value]

    def on_mount(self) -> None:
        self.log_view.border_title = "Log"
        self.redraw()
        self.set_interval(TICK_S, self.redraw)
        if self.console.live:
            self.follow()

    def add(self, events: Iterable[JobLogEvent]) -> None:
        """Lines of the job's log, in order, as the host sent them."""
        for event in events:
            event = strip_controls(event)
            at = Text(clock_time(event.ts / 1000) + " ", "dim") if event.ts else Text("")
            progress = event.progress()
            if progress is not None:
                if progress.train_loss is not None:
                    self.train = progress.train_loss
                if progress.val_loss is not None:
                    self.val = progress.val_loss
                line = progress_line(progress, progress.train_loss, progress.val_loss, bar=False)
                self.log_view.write(at + Text(line))
                self.progress.update(progress_line(progress, self.train, self.val, bar=True))
                continue
            if event.type == "started":
                self.started_at = event.ts
            if event.terminal:
                self.outcome = event
                outcome = outcome_line(event, None, self.started_at)
                self.log_view.write(at + Text(outcome, JOB_STYLES.get(event.type, "")))
            elif (other := event_line(event)) is not None:
                self.log_view.write(at + Text(other))
        self.redraw()

    def note(self, message: str) -> None:
        self.log_view.write(Text(f"── {message}", "bold"))

    def redraw(self) -> None:
        job = self.job
        title = Text(f"job {self.job_id}", "bold")
        state: str | None = None
        if self.outcome is not None:
            state = self.outcome.type
        elif job is not None:
            state = job.shown_state()
        if job is not None:
            title.append(f": {job.kind} of {job.model}")
        if state is not None:
            title.append(" │ ")
            title.append(state, JOB_STYLES.get(state, ""))
        if job is not None and job.result and state == JobState.SUCCEEDED:
            title.append(f" │ serves as {job.result}")
        self.title_bar.update(title)

    @work(exclusive=True, group="job-log")
    async def follow(self) -> None:
        delay, failing = RETRY_FIRST_S, False
        while True:
            try:
                async with AdminClient(self.console.target) as client:
                    # The generator holds the response open: close it as soon as we stop reading.
                    lines = client.job_events(self.job_id, after=self.last_line)
                    async with contextlib.aclosing(lines) as log:
                        async for event in log:
                            self.last_line = client.last_log_line
                            self.add([event])
                            delay, failing = RETRY_FIRST_S, False
                if self.outcome is None:
                    self.note("the host ended the log before the job's outcome")
                return
            except AdminRefused as exc:
                self.note(f"the host refused: {strip_controls(exc.message)}")
                return
            except (httpx.HTTPError, OSError, ValueError) as exc:  # a JSON error is a ValueError
                if not failing:  # once per outage, not once per try
                    self.note(f"reading the log: {_why(exc)}; retrying")
                failing = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    def action_cancel_job(self) -> None:
        job = self.job
        if job is None:
            self.notify(f"{self.job_id} is not in the host's list.", severity="warning")
            return
        if self.outcome is not None:
            self.notify(f"{self.job_id} is already over.", severity="warning")
            return
        confirm_cancel_job(self, job)


def _why(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}"
    if isinstance(exc, json.JSONDecodeError):
        return "an unreadable line"
    return str(exc) or type(exc).__name__
