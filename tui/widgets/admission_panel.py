"""Admission at a glance: per model, requests running and waiting against their limits."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.text import bar

__all__ = ["AdmissionPanel"]


class AdmissionPanel(Widget):
    """Per model: requests running and waiting against their limits, and refusals."""

    DEFAULT_CSS = """
    AdmissionPanel {
        height: auto;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """
    BAR_WIDTH = 8

    def __init__(self, model: ConsoleModel) -> None:
        super().__init__(id="admission")
        self.border_title = "Admission"
        self.model = model

    def redraw(self) -> None:
        self.refresh(layout=True)

    def render(self) -> Text:
        gauges = self.model.gauges
        if not gauges:
            return Text("no models", "dim")
        width = max(8, *(len(m) for m in gauges))
        lines = []
        for gauge in gauges.values():
            line = Text(gauge.model.ljust(width))
            if gauge.max_active is None:
                line.append("  no requests yet", "dim")
            else:
                line.append("  active ")
                line.append(bar(gauge.active, gauge.max_active, self.BAR_WIDTH), "green")
                line.append(f" {gauge.active}/{gauge.max_active}".ljust(7))
                line.append("queued ")
                line.append(bar(gauge.queued, gauge.max_queued, self.BAR_WIDTH), "yellow")
                line.append(f" {gauge.queued}/{gauge.max_queued}".ljust(7))
                line.append(f"rejected {gauge.rejected}", "bold red" if gauge.rejected else "")
                line.append(f"  admitted {gauge.admitted}")
            lines.append(line)
        return Text("\n").join(lines)
