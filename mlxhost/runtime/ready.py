"""The host's machine-readable "ready": the `HostReady` record, written where `READY_FILE_ENV` says.

Both ways of serving (`host.serve`, the parent; `worker.in_process`, `--in-process`) call
`report_ready` as they log their ready line, so a harness that started the host (`mlxhost.testing`)
waits for a file instead of parsing a log line meant for people. Without the variable nothing is
written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from mlxhost.errors import StartupError
from mlxhost.wire.layout import READY_FILE_ENV, HostReady

__all__ = ["report_ready", "write_ready"]


def report_ready(models: Sequence[str], addresses: Sequence[str], load_s: float | None = None) -> None:
    """Write this process's ready record, if whoever started it asked for one."""
    path = os.environ.get(READY_FILE_ENV)
    if path:
        write_ready(Path(path), HostReady.from_addresses(os.getpid(), models, addresses, load_s))


def write_ready(path: Path, record: HostReady) -> None:
    """Write `record` to `path` whole: a reader sees no file or all of it, never a part.

    A failure stops the host: whoever set the variable is waiting for this file, and would
    otherwise wait out its timeout on a host that serves.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(record.to_json())
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise StartupError(f"could not write the ready record {path} ({READY_FILE_ENV}): {exc}") from None
