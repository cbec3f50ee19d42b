"""The console's keys, and what the panes show: `?` opens it."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Static

__all__ = ["HelpScreen"]


HELP = """\
[b]mlxhost tui[/b]: the host's workers, sessions, admission and events, live.

  [b]c[/b]      cancel the selected session, or job (asks first)
  [b]r[/b]      restart the selected worker once its sessions end (asks first)
  [b]enter[/b]  on a job: follow its log; [b]esc[/b] comes back
  [b]/[/b]      filter jobs, sessions and events by text; [b]esc[/b] clears the filter
  [b]tab[/b]    move between the workers, the jobs, the sessions and the events
  [b]↑ ↓[/b]    select a row
  [b]?[/b]      this help; [b]esc[/b] closes it
  [b]q[/b]      quit

Closed sessions stay a few seconds with their outcome, then fade out; a generation's ends
with its drafts the model accepted, of those verified ([b]11/18 drafts[/b]).
A worker's DRAFTS: the share of its drafts accepted, and tokens per verification
([b]75% ×3.5[/b]); RST counts its restarts.
The jobs pane shows while the host lists a job; a job runs alone, pausing the workers.
Progress and memory readings update the tables, not the event log.
If the host goes away the top bar says so, and the console reconnects.
"""


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen > Static {
        width: 78;
        max-width: 100%;
        height: auto;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "app.pop_screen", "Close")]

    def compose(self) -> ComposeResult:
        yield Static(HELP)
