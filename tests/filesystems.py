"""Real filesystems a test can fill or freeze: a small tmpfs, mounted for the test and gone after.

Mounting needs root (CI runs as root) or an unprivileged user namespace; where neither is there,
the test is skipped and says why, rather than faking a full disk with a stub.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["fill", "remount", "small_tmpfs"]


@contextmanager
def small_tmpfs(path: Path, size_kib: int, *, read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size_kib` KiB mounted on `path` (created) for the duration; skip where we cannot mount."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kib}k,mode=0700" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        # Lazy: a process of the test that still holds a file there must not fail the teardown.
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, options: str) -> None:
    """Change a mount's options in place (`ro`, `rw`, `size=…k`)."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True, capture_output=True)


def fill(path: Path, *, leave_bytes: int = 0) -> Path:
    """Write a file under `path` until its filesystem has at most `leave_bytes` free; the file's path."""
    filler = path / "filler.bin"
    block = b"\0" * 65536
    with filler.open("ab") as out:
        while True:
            free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
            if free <= leave_bytes:
                break
            try:
                out.write(block[: max(1, min(len(block), free - leave_bytes))])
                out.flush()
            except OSError:
                break
    return filler
