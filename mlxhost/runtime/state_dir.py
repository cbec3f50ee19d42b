"""The state directory made ready before anything writes there: the host's own, and private.

It holds prompts (prompt-cache files are token ids that decode to the prompt text), the job store
and job logs: other users of the machine must not read them. The directory is made (or tightened
to) 0700, and `PRIVATE_UMASK` makes everything the host and its children create there 0600/0700,
whoever creates it: the parent, a worker, a job, SQLite's journal files.

A directory the host cannot write is refused at start, with a message naming the option: better
than a traceback from whichever writer first finds out. A full one is not refused: a host must
start and serve on a full disk; its writers each contain the error.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from mlxhost.errors import StartupError
from mlxhost.wire.layout import state_dir

__all__ = ["PRIVATE_UMASK", "prepare_state_dir"]

logger = logging.getLogger("mlxhost")

PRIVATE_UMASK = 0o077


def prepare_state_dir(settings: Any) -> Path:
    """The state directory, created 0700 or tightened to it; StartupError when it cannot be used."""
    path = state_dir(settings)
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            path.chmod(0o700)
            logger.warning(
                "state directory %s was mode %o: now 0700 (it holds prompts and job logs)", path, mode
            )
    except OSError as exc:
        why = exc.strerror or exc
        raise StartupError(f"cannot use the state directory {path} (--state-dir): {why}") from None
    if os.statvfs(path).f_flag & os.ST_RDONLY or not os.access(path, os.W_OK | os.X_OK):
        raise StartupError(
            f"the state directory {path} (--state-dir) is read-only; name a writable one with --state-dir"
        )
    return path
