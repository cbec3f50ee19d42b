"""What the panels share: the colour of each state, and a table redrawn from the model."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.text import Text
from textual.widgets import DataTable

from mlxhost_tui.model import ConsoleModel

__all__ = ["STATE_STYLES", "Cells", "Clock", "ModelTable", "state_text"]

Clock = Callable[[], float]
Cells = tuple[Text, ...]

STATE_STYLES = {
    "ready": "green",
    "running": "green",
    "completed": "green",
    "starting": "yellow",
    "downloading": "yellow",
    "restarting": "yellow",
    "warming": "yellow",
    "unloading": "yellow",
    "queued": "yellow",
    "preparing": "yellow",
    "settling": "yellow",
    "cancelled": "yellow",
    "exited": "red",
    "exhausted": "bold red",
    "failed": "red",
    "done": "green",
    "closed": "dim",
}


def state_text(value: str) -> Text:
    return Text(value, STATE_STYLES.get(value, ""))


class ModelTable(DataTable[Text]):
    """A table redrawn from the model: in place while the rows stay, rebuilt when they change."""

    COLUMNS: Sequence[tuple[str, str]] = ()

    def __init__(self, model: ConsoleModel, clock: Clock, id: str) -> None:
        super().__init__(cursor_type="row", id=id)
        self.model = model
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
