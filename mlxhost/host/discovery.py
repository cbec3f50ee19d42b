"""How local tools find a running host: a small 0600 file that names its addresses and token.

`mlxhost status` and `mlxhost tui` read it, so on the host's machine they need no flags. It lives
in XDG_RUNTIME_DIR (or the temp directory), one per user; the newest host wins it, and a host
removes it on exit if it is still its own.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["announce", "find_host", "withdraw"]


def discovery_file() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"mlxhost-{os.getuid()}.json"


def announce(url: str | None, unix: str | None, token_file: Path) -> None:
    record = {"pid": os.getpid(), "url": url, "unix": unix, "token_file": str(token_file)}
    path = discovery_file()
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(record, file)
    os.replace(temporary, path)


def withdraw() -> None:
    path = discovery_file()
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def find_host() -> dict[str, Any] | None:
    """The local host's record, with its admin token, if one is running."""
    try:
        record: dict[str, Any] = json.loads(discovery_file().read_text())
        os.kill(record["pid"], 0)
        record["token"] = Path(record["token_file"]).read_text().strip()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record
