"""The top line: where the console is connected, and the host at a glance."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from mlxhost.client.human import duration
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.widgets.base import Clock

__all__ = ["StatusBar"]


class StatusBar(Static):
    """Where the console is connected, and the host at a glance; loud when the link is down."""

    DEFAULT_CSS = """
    StatusBar {
        dock: top;
        height: 1;
        padding: 0 1;
        background: $panel;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    StatusBar.-offline {
        background: $error;
        color: $text;
        text-style: bold;
    }
    """

    connection: reactive[str] = reactive("connecting")
    detail: reactive[str] = reactive("")

    def __init__(self, where: str, model: ConsoleModel, clock: Clock) -> None:
        super().__init__()
        self.where = where
        self.model = model
        self.clock = clock

    def watch_connection(self, connection: str) -> None:
        self.set_class(connection == "disconnected", "-offline")

    def render(self) -> Text:
        text = Text(f"{self.where.removeprefix('http://')} ")
        if self.connection == "connected":
            text.append("● connected", "bold green")
        elif self.connection == "disconnected":
            text.append("✖ disconnected — retrying")
        else:
            text.append("… connecting")
        if self.detail:
            text.append(f" ({self.detail})")
        if (host := self.model.host) is not None:
            uptime = duration(max(0.0, self.clock() - host.started))
            text.append(f" │ host {host.pid} up {uptime}")
            if not host.accepting:
                text.append(", stopping", "bold yellow")
            text.append(f" │ {self.model.live} live of {host.opened} │ #{self.model.seq}")
        return text
