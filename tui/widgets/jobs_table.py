"""The managed jobs: one line each, newest first, with a progress bar and the train loss's trend
(a pull's rate, where a fine-tune's loss would be: a pull has none).

Shown only while the host lists a job: most hosts never run one, and then the dashboard keeps its
rows for the sessions and the events. Enter opens a job's log; c cancels it (the screen asks first).
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive

from mlxhost.client.human import duration, size
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.parts import JobRow
from mlxhost_tui.text import bar, sparkline
from mlxhost_tui.widgets.base import STATE_STYLES, Cells, Clock, ModelTable

__all__ = ["JobsTable"]

JOB_STYLES = {**STATE_STYLES, "succeeded": "green", "interrupted": "red", "waiting": "yellow"}


class JobsTable(ModelTable):
    DEFAULT_CSS = """
    JobsTable {
        display: none;
        height: auto;
        max-height: 6;
    }
    JobsTable.-shown {
        display: block;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Job log"),
        Binding("c", "screen.cancel_job", "Cancel job"),
    ]
    COLUMNS = (
        ("id", "JOB"),
        ("kind", "KIND"),
        ("model", "MODEL"),
        ("state", "STATE"),
        ("progress", "PROGRESS"),
        ("loss", "LOSS"),
        ("age", "AGE"),
    )
    BAR_WIDTH = 8
    TREND_WIDTH = 8
    REPO_WIDTH = 16  # a pull's repo, cut to leave its rate on an 80-column terminal

    filter_text: reactive[str] = reactive("")

    def __init__(self, model: ConsoleModel, clock: Clock) -> None:
        super().__init__(model, clock, id="jobs")
        self.border_title = "Jobs"

    def watch_filter_text(self) -> None:
        if self.is_mounted:
            self.redraw()

    def redraw(self) -> None:
        super().redraw()
        self.set_class(bool(self.model.jobs), "-shown")

    def rows_now(self) -> dict[str, Cells]:
        now = self.clock()
        rows: dict[str, Cells] = {}
        wanted = self.filter_text.lower()
        for job in self.model.jobs.values():
            if wanted and wanted not in job.text().lower():
                continue
            dim = "dim" if job.terminal else ""
            state = job.shown_state()
            rows[job.id] = (
                Text(job.id, dim),
                Text(job.kind, dim),
                Text(_model(job), dim),
                Text(state, JOB_STYLES.get(state, "")),
                _progress(job),
                _loss(job, self.TREND_WIDTH),
                Text(duration(job.age(now)), dim, justify="right"),
            )
        return rows

    @property
    def selected(self) -> JobRow | None:
        key = self.selected_key
        return self.model.jobs.get(key) if key is not None else None


def _model(job: JobRow) -> str:
    """Its model; a pull's repo without its owner, cut short (the filter, the log and the job's
    screen have it whole)."""
    if not job.pulls:
        return job.model
    name = job.model.rpartition("/")[2]
    width = JobsTable.REPO_WIDTH
    return name if len(name) <= width else name[: width - 1] + "…"


def _progress(job: JobRow) -> Text:
    if job.total <= 0:
        return Text("-", "dim")
    text = Text(bar(job.iteration, job.total, JobsTable.BAR_WIDTH), "dim" if job.terminal else "green")
    text.append(f" {job.fraction * 100:3.0f}%")
    return text


def _loss(job: JobRow, width: int) -> Text:
    if job.pulls:
        return _rate(job)
    if job.train_loss is None:
        return Text("-", "dim")
    text = Text(sparkline(job.losses, width).ljust(width), "cyan")
    text.append(f" {job.train_loss:.2f}")
    return text


def _rate(job: JobRow) -> Text:
    """A running pull's rate; once it ended, or before it says, what it fetched."""
    if job.bytes_per_s and not job.terminal:
        return Text(f"{size(job.bytes_per_s)}/s", justify="right")
    return Text(size(job.iteration) if job.iteration else "-", "dim", justify="right")
