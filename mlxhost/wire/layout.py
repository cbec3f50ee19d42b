"""Names a running host leaves for others to find: its ready log line, its ready record, its runtime files."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ADMIN_TOKEN_FILE", "HOST_READY", "JOBS_DB", "JOBS_DIR", "READY_FILE_ENV", "PROMPT_CACHE_DIR", "STATE_LOCK", "HostReady", "default_state_dir", "state_dir", "discovery_file"]

# The log line `mlxhost serve` writes once it serves: "mlxhost ready: model M ... on ADDRESSES".
# Not to be confused with the worker's `launch.WORKER_READY`, which only the parent reads.
HOST_READY = "mlxhost ready:"

# When this environment variable names a path, `mlxhost serve` writes a `HostReady` record there
# (JSON, replaced whole) as it logs its ready line: how the test harness, the bench and the soak
# learn where a host they started listens without reading its log. Internal: no CLI option.
READY_FILE_ENV = "MLXHOST_READY_FILE"

# The parent's admin token, beside the worker sockets in its runtime directory.
ADMIN_TOKEN_FILE = "admin-token"


@dataclass(frozen=True)
class HostReady:
    """A host that serves: its pid, its TCP URL and Unix socket (each or None), its models, and
    the seconds it spent loading its model (`--in-process` only: the parent loads none)."""

    pid: int
    url: str | None
    unix: str | None
    models: tuple[str, ...]
    load_s: float | None = None

    @classmethod
    def from_addresses(
        cls, pid: int, models: Sequence[str], addresses: Sequence[str], load_s: float | None = None
    ) -> HostReady:
        """From the listener's addresses ("http://127.0.0.1:8000", "unix:/path"): the first of each kind."""
        url = next((a for a in addresses if a.startswith("http")), None)
        unix = next((a.removeprefix("unix:") for a in addresses if a.startswith("unix:")), None)
        return cls(pid, url, unix, tuple(models), load_s)

    def to_json(self) -> str:
        return json.dumps(
            {"pid": self.pid, "url": self.url, "unix": self.unix, "models": list(self.models), "load_s": self.load_s}
        )

    @classmethod
    def from_json(cls, text: str) -> HostReady:
        """The record `to_json` wrote; ValueError for anything else."""
        data = json.loads(text)
        if not _is_ready_record(data):
            raise ValueError(f"not a host ready record: {text[:200]!r}")
        return cls(data["pid"], data["url"], data["unix"], tuple(data["models"]), data["load_s"])


def _is_ready_record(data: object) -> bool:
    if not isinstance(data, dict) or set(data) != {"pid", "url", "unix", "models", "load_s"}:
        return False
    pid, url, unix, models, load_s = data["pid"], data["url"], data["unix"], data["models"], data["load_s"]
    return (
        (load_s is None or (isinstance(load_s, int | float) and not isinstance(load_s, bool)))
        and
        isinstance(pid, int)
        and not isinstance(pid, bool)
        and all(value is None or isinstance(value, str) for value in (url, unix))
        and isinstance(models, list)
        and all(isinstance(model, str) for model in models)
    )


def discovery_file() -> Path:
    """Where the local host's discovery record is: one per user (see `client.discovery`)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"mlxhost-{os.getuid()}.json"


# The state directory (`state_dir`): what outlives a host. One host owns it at a time (STATE_LOCK).
JOBS_DB = "jobs.db"  # SQLite: the job store
JOBS_DIR = "jobs"  # one folder per job: spec.json, log.jsonl, stderr.log, output/
MODELS_DIR = "models"  # models converted on this machine (`mlxhost pull --quantize`), one folder each
STATE_LOCK = "lock"
PROMPT_CACHE_DIR = "prompt-cache"  # one folder per model fingerprint: mlx-lm prompt-cache files


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/mlxhost, or ~/.local/state/mlxhost as the XDG base directory spec says."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mlxhost"


def state_dir(settings: Any) -> Path:
    """The state directory `settings.state_dir` names, or the default one; absolute."""
    named = getattr(settings, "state_dir", None)
    return (Path(named).expanduser() if named else default_state_dir()).absolute()
