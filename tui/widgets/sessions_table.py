"""The sessions: live ones newest first, and closed ones for a few seconds with their outcome."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive

from mlxhost.client.human import duration
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.parts import SessionRow
from mlxhost_tui.widgets.base import STATE_STYLES, Cells, Clock, ModelTable

__all__ = ["SessionsTable"]


class SessionsTable(ModelTable):
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

    def __init__(self, model: ConsoleModel, clock: Clock) -> None:
        super().__init__(model, clock, id="sessions")
        self.border_title = "Sessions"

    def watch_filter_text(self) -> None:
        if self.is_mounted:
            self.redraw()

    def rows_now(self) -> dict[str, Cells]:
        now = self.clock()
        rows: dict[str, Cells] = {}
        wanted = self.filter_text.lower()
        for session in sorted(self.model.sessions.values(), key=lambda s: s.opened_at, reverse=True):
            if wanted and wanted not in session.text().lower():
                continue
            dim = "dim" if session.fading(now) else ""
            state = session.shown_state()
            tokens, rate = session.work_text()
            rows[session.id] = (
                Text(session.id, dim),
                Text(session.model, dim),
                Text(state, dim or STATE_STYLES.get(state, "")),
                Text(tokens, dim, justify="right"),
                Text(rate, dim, justify="right"),
                Text(duration(session.age(now)), dim, justify="right"),
                _outcome(session, dim),
            )
        return rows

    @property
    def selected(self) -> SessionRow | None:
        key = self.selected_key
        return self.model.sessions.get(key) if key is not None else None


def _outcome(session: SessionRow, dim: str) -> Text:
    """The OUTCOME cell, an embed or rerank session's kind in colour."""
    text = Text(session.outcome_cell(), dim)
    if session.pooled and not dim:
        text.stylize("cyan", 0, len(session.kind))
    return text
