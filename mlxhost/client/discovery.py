"""How local tools find a running host: a small 0600 file that names its addresses and token.

`mlxhost status` and `mlxhost tui` read it, so on the host's machine they need no flags. It lives
in XDG_RUNTIME_DIR (or the temp directory), one per user; the newest host wins it, and a host
removes it on exit if it is still its own.

The temp directory is shared with other users, so neither the record nor the token file it names
is trusted unless it is a regular file of ours that nobody else may read or write, reached
without following a symbolic link at its last step.

The host writes the record (`announce`, `withdraw`) and the clients read it (`find_host`): both
sides live here so that the trust checks are written once.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from mlxhost.wire.layout import discovery_file

__all__ = ["announce", "discovery_file", "find_host", "withdraw"]

logger = logging.getLogger("mlxhost")

RECORD_LIMIT = 64 << 10  # bytes read of a record at most: it is a few hundred
TOKEN_LIMIT = 4 << 10

# What this process announced, to know its own record again (see `withdraw`).
_announced: str | None = None


class UntrustedFile(OSError):
    """Not a regular file of ours, private to us: another user could have written it."""


def _read_private(path: Path, limit: int) -> tuple[str, os.stat_result]:
    # O_NOFOLLOW: a link planted at the path is refused, not followed; O_NONBLOCK: a FIFO
    # planted there cannot hang the open (a regular file ignores it).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise UntrustedFile(f"{path} is not a private file of this user")
        return os.read(fd, limit).decode(), info
    finally:
        os.close(fd)


def announce(url: str | None, unix: str | None, token_file: Path) -> None:
    """Make this host the one local tools find. A failure is logged: the host serves anyway."""
    global _announced
    instance = secrets.token_hex(16)
    record = {"pid": os.getpid(), "instance": instance, "url": url, "unix": unix, "token_file": str(token_file)}
    path = discovery_file()
    # A fresh name, created (never opened) and never through a link: nothing planted is written.
    temporary = path.with_name(f".{path.name}.{instance}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w") as file:
                json.dump(record, file)
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as exc:
        logger.warning("could not announce this host in %s (%s): give status and tui --url", path, exc)
        return
    _announced = instance


def withdraw() -> None:
    """Remove the record if it is still this host's: never one a newer host has put there."""
    global _announced
    instance, _announced = _announced, None
    if instance is None:
        return
    path = discovery_file()
    try:
        text, read = _read_private(path, RECORD_LIMIT)
        if json.loads(text).get("instance") != instance:
            return  # another host's (the pid alone could be a reused one, or another namespace's)
        # Re-checked just before the unlink: the name still holds the file we read, not one a
        # newer host put there meanwhile (`os.replace` gives a new inode). What remains is the
        # moment between this check and the unlink: a host announcing in exactly that moment
        # loses its record (it serves on; status and tui need --url for it). POSIX has no
        # unlink-if-unchanged to close it.
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) == (read.st_dev, read.st_ino):
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def find_host() -> dict[str, Any] | None:
    """The local host's record, with its admin token, if one is running."""
    try:
        text, _ = _read_private(discovery_file(), RECORD_LIMIT)
        record: dict[str, Any] = json.loads(text)
        pid = record["pid"]
        if type(pid) is not int or pid <= 0:  # kill(0 or -1, 0) would ask about many processes
            return None
        os.kill(pid, 0)
        token, _ = _read_private(Path(record["token_file"]), TOKEN_LIMIT)
        record["token"] = token.strip()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return record
