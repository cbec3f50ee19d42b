"""A job's screen: its log as the job writes it, followed from the host, and cancelling the job
(asked from here or from the dashboard's jobs pane)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

import httpx
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, RichLog, Static

from mlxhost.client.admin import AdminClient, AdminRefused
from mlxhost.client.jobs import event_line, outcome_line, progress_line
from mlxhost.wire.admin.jobs import JobLogEvent, JobState
from mlxhost_tui.model import ConsoleModel, strip_controls
from mlxhost_tui.parts import JobRow
from mlxhost_tui.screens import TICK_S
from mlxhost_tui.screens.confirm import ConfirmScreen
from mlxhost_tui.text import clock_time, pulled
from mlxhost_tui.widgets.jobs_table import JOB_STYLES

if TYPE_CHECKING:
    from mlxhost_tui.app import ConsoleApp

__all__ = ["JobLogScreen", "confirm_cancel_job"]

RETRY_FIRST_S = 0.25
RETRY_MAX_S = 2.0


def confirm_cancel_job(screen: Screen[None], job: JobRow) -> None:
    """Ask, then ask the host to cancel `job`; a finished job cannot be."""
    if job.terminal:
        screen.notify(f"{job.id} is already over.", severity="warning")
        return
    where = f"It is at {job.iteration}/{job.total}" if job.total else f"It is {job.shown_state()}"
    if job.pulls and job.total:
        where = f"It has {pulled(job)}"  # bytes, not iterations
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
