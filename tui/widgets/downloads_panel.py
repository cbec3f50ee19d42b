"""The models' downloads: under the workers' rows, a line for each model whose files are coming
from the Hugging Face Hub (its state, a bar, how far and how fast, the file being fetched), or
that failed to come (and why). Shown only while there is one: most hosts never pull."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.parts import DownloadRow
from mlxhost_tui.text import bar, download_progress
from mlxhost_tui.widgets.base import state_text
from mlxhost_tui.widgets.workers_table import WorkersTable

__all__ = ["DownloadsPanel"]

STATE_WIDTH = len("downloading")  # the widest state: the bars line up under each other


class DownloadsPanel(Widget):
    """A line per download, as a row of the workers pane: it lines up with the table above it,
    and is no row of it so that it may take the full width (a table's columns would push the file
    off an 80-column terminal) and never be selected as a worker to restart."""

    DEFAULT_CSS = """
    DownloadsPanel {
        display: none;
        height: auto;
        max-height: 4;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    DownloadsPanel.-shown {
        display: block;
    }
    """
    BAR_WIDTH = 8

    def __init__(self, model: ConsoleModel, workers: WorkersTable) -> None:
        super().__init__(id="downloads")
        self.model = model
        self.table = workers

    def redraw(self) -> None:
        self.set_class(bool(self.model.downloads), "-shown")
        self.refresh(layout=True)

    def render(self) -> Text:
        downloads = list(self.model.downloads.values())
        width = max(self.table.model_width(), *(len(d.model) for d in downloads), 0)
        return Text("\n").join(self._line(download, width) for download in downloads)

    def _line(self, download: DownloadRow, width: int) -> Text:
        line = Text(download.model.ljust(width) + "  ")
        line.append_text(state_text(download.state))
        line.append(" " * (STATE_WIDTH - len(download.state) + 2))
        if download.state in ("failed", "cancelled"):
            line.append(download.error or download.repo, "red" if download.state == "failed" else "yellow")
            return line
        if download.state == "done":
            line.append(bar(1, 1, self.BAR_WIDTH), "dim")
        else:
            line.append(bar(download.done_bytes, download.total_bytes, self.BAR_WIDTH), "green")
        line.append(f" {download_progress(download)}")
        if download.file:
            line.append(f"  {download.file}", "dim")
        return line
