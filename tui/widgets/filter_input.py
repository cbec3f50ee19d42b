"""The filter line: narrows the sessions and the event log to what holds its text."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import Input

from mlxhost_tui.widgets.sessions_table import SessionsTable

__all__ = ["FilterInput"]


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
