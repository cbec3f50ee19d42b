"""The console's panels, one module each. They draw what the `ConsoleModel` holds and do no I/O;
the screen folds what the host says into the model and asks them to redraw."""

from mlxhost_tui.widgets.admission_panel import AdmissionPanel
from mlxhost_tui.widgets.downloads_panel import DownloadsPanel
from mlxhost_tui.widgets.event_log import EventLog
from mlxhost_tui.widgets.filter_input import FilterInput
from mlxhost_tui.widgets.jobs_table import JobsTable
from mlxhost_tui.widgets.sessions_table import SessionsTable
from mlxhost_tui.widgets.status_bar import StatusBar
from mlxhost_tui.widgets.workers_table import WorkersTable

__all__ = ["AdmissionPanel", "DownloadsPanel", "EventLog", "FilterInput", "JobsTable", "SessionsTable", "StatusBar", "WorkersTable"]
