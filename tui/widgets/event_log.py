"""The event log: what happened, newest at the bottom, narrowed by the filter."""

from __future__ import annotations

import collections

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import RichLog

from mlxhost.wire.admin import AdminEvent, ModelDownload, SessionClosed
from mlxhost_tui.parts import SessionRow, event_time
from mlxhost_tui.text import clock_time, describe
from mlxhost_tui.widgets.base import STATE_STYLES

__all__ = ["EventLog"]


class EventLog(RichLog):
    """What happened, newest at the bottom; the model leaves out what only updates the tables."""

    DEFAULT_CSS = """
    EventLog {
        height: 1fr;
        min-height: 4;
        padding: 0 1;
        overflow-x: hidden;
        scrollbar-size-vertical: 1;
    }
    """
    KEPT = 1000

    filter_text: reactive[str] = reactive("")

    def __init__(self) -> None:
        super().__init__(max_lines=self.KEPT, wrap=False, id="events")
        self.border_title = "Events"
        self.entries: collections.deque[Text] = collections.deque(maxlen=self.KEPT)

    def add(self, event: AdminEvent, session: SessionRow | None = None) -> None:
        line = Text(clock_time(event_time(event)) + " ", "dim")
        line.append(event.type.ljust(19), _event_style(event))
        line.append(describe(event, session))
        self._keep(line)

    def note(self, message: str) -> None:
        self._keep(Text(f"── {message}", "bold"))

    def _keep(self, line: Text) -> None:
        self.entries.append(line)
        if self._matches(line):
            self.write(line)

    def _matches(self, line: Text) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.plain.lower()

    def watch_filter_text(self) -> None:
        self.clear()
        for line in self.entries:
            if self._matches(line):
                self.write(line)


def _event_style(event: AdminEvent) -> str:
    kind = event.type
    if kind in ("worker.exited", "worker.exhausted", "admission.rejected", "stream.lagged"):
        return "red"
    if kind in ("worker.restarting", "model.evicted", "host.stopping", "stream.reset"):
        return "yellow"
    if isinstance(event, SessionClosed):
        return STATE_STYLES.get(event.outcome.kind, "")
    if isinstance(event, ModelDownload) and event.state != "downloading":
        return STATE_STYLES.get(event.state, "")  # done, failed or cancelled
    if kind == "worker.ready":
        return "green"
    return "cyan"
