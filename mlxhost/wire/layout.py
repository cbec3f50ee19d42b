"""Names a running host leaves for others to find: its ready log line and its runtime files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["ADMIN_TOKEN_FILE", "HOST_READY", "discovery_file"]

# The log line `mlxhost serve` writes once it serves: "mlxhost ready: model M ... on ADDRESSES".
# Not to be confused with the worker's `launch.WORKER_READY`, which only the parent reads.
HOST_READY = "mlxhost ready:"

# The parent's admin token, beside the worker sockets in its runtime directory.
ADMIN_TOKEN_FILE = "admin-token"


def discovery_file() -> Path:
    """Where the local host's discovery record is: one per user (see `client.discovery`)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"mlxhost-{os.getuid()}.json"
