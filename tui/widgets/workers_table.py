"""The workers: one row per model process, its state, restarts, uptime, memory, drafts (the share of
its speculative drafts the model accepted, and the tokens per verification) and last exit, with a
row under it for each rank of a worker group (host, pid, memory); and one last row for the warm
standby interpreters, with the memory they cost."""

from __future__ import annotations

from rich.text import Text
from textual.widgets.data_table import ColumnKey

from mlxhost.client.human import duration, size
from mlxhost.wire.admin import RankRecord
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.parts import WorkerRow
from mlxhost_tui.text import sparkline
from mlxhost_tui.widgets.base import Cells, Clock, ModelTable, state_text

__all__ = ["RANK_KEY", "STANDBY_KEY", "WorkersTable"]

STANDBY_KEY = "\x00standby"  # no model id has a control character: the host strips them
RANK_KEY = "\x00rank"  # after the worker's id


class WorkersTable(ModelTable):
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
        ("restarts", "RST"),  # restarts: DRAFTS needs the room at 80 columns
        ("up", "UP"),
        ("memory", "MEMORY"),
        ("trend", "RECENT"),
        ("drafts", "DRAFTS"),
        ("exit", "LAST EXIT"),
    )
    TREND_WIDTH = 6  # as wide as its header: at 80 columns, DRAFTS takes the rest

    def __init__(self, model: ConsoleModel, clock: Clock) -> None:
        super().__init__(model, clock, id="workers")
        self.border_title = "Workers"

    def rows_now(self) -> dict[str, Cells]:
        now = self.clock()
        rows: dict[str, Cells] = {}
        for worker in self.model.workers.values():
            uptime = worker.uptime(now)
            rows[worker.id] = (
                Text(worker.model),
                state_text(worker.state),
                Text(str(worker.pid or "-")),
                Text(str(worker.restarts), "bold red" if worker.restarts else ""),
                Text(duration(uptime) if uptime is not None else "-"),
                Text(size(worker.memory) if worker.memory is not None else "-", justify="right"),
                Text(sparkline(worker.readings, self.TREND_WIDTH).ljust(self.TREND_WIDTH), "cyan"),
                Text(worker.drafts_text(), justify="right"),
                Text(worker.exit_text()),
            )
            for rank in worker.ranks:
                rows[f"{worker.id}{RANK_KEY}{rank.rank}"] = self._rank_row(rank)
        if self.model.standby:
            rows[STANDBY_KEY] = self._standby_row()
        return rows

    def _rank_row(self, rank: RankRecord) -> Cells:
        memory = size(rank.rss_bytes) if rank.rss_bytes is not None else "-"
        return (
            Text(f" └ rank {rank.rank} @{rank.host}", "dim"),
            Text(""),
            Text(str(rank.pid)),
            Text(""),
            Text(""),
            Text(memory, justify="right"),
            Text(" " * self.TREND_WIDTH),
            Text(""),
            Text(""),
        )

    def _standby_row(self) -> Cells:
        standby = self.model.standby
        warming = sum(s.state != "ready" for s in standby)
        count = f" ×{len(standby)}" if len(standby) > 1 else ""
        return (
            Text(f"(standby{count})", "dim"),
            state_text("warming" if warming else "ready"),
            Text(str(standby[0].pid) if len(standby) == 1 else "-"),
            Text("-"),
            Text("-"),
            Text(size(sum(s.rss_bytes for s in standby)), justify="right"),
            Text(" " * self.TREND_WIDTH),
            Text(""),
            Text(f"{warming} still importing" if warming else "", "dim"),
        )

    def model_width(self) -> int:
        """The MODEL column's width: the downloads' lines under the table line up with it."""
        column = self.columns.get(ColumnKey("model"))
        return column.content_width if column is not None else 0

    @property
    def selected(self) -> WorkerRow | None:
        key = self.selected_key
        return self.model.workers.get(key) if key is not None else None
