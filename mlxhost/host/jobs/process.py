"""One job's process: `python -m mlxhost.job SPEC`, in a process group of its own, and how it ends.

The job runs in a session (and so a process group) of its own: a terminal's Ctrl-C reaches the
host only, and stopping the job reaches everything it started. Its stdin is a pipe from the host
that is never written: when the host dies, the pipe closes and the job ends itself (the job
process watches for that), so no orphan trains on after its host.

Two ways to end it, each followed by SIGKILL to the group after `stop_timeout`:
- `cancel`: SIGTERM; the job stops at its next safe point and logs `cancelled`.
- `abandon` (the host is stopping): close its stdin; the job logs `interrupted` and exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from pathlib import Path
from typing import IO

import anyio
import anyio.abc
import psutil

from mlxhost.runtime.children import python_module

__all__ = ["JobProcess", "process_alive"]

logger = logging.getLogger("mlxhost.jobs")


class JobProcess:
    def __init__(self, process: anyio.abc.Process, output: IO[bytes]) -> None:
        self._process = process
        self._output = output
        self.pid = process.pid
        try:
            self.started = psutil.Process(self.pid).create_time()
        except psutil.Error:
            self.started = 0.0

    @classmethod
    async def spawn(cls, spec_path: Path, output_path: Path) -> JobProcess:
        output = output_path.open("ab")
        try:
            process = await anyio.open_process(
                python_module("mlxhost.job", str(spec_path)),
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Its output goes to a file an operator reads, and into error messages: no colour codes.
                env={**os.environ, "NO_COLOR": "1", "TERM": "dumb"},
            )
        except BaseException:
            output.close()
            raise
        return cls(process, output)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    async def cancel(self, stop_timeout: float) -> None:
        self._signal(signal.SIGTERM)
        await self._ladder(stop_timeout)

    async def abandon(self, stop_timeout: float) -> None:
        if self._process.stdin is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self._process.stdin.aclose()
        await self._ladder(stop_timeout)

    async def aclose(self) -> None:
        """Make sure nothing of it is left, and close what the host holds of it."""
        with anyio.CancelScope(shield=True):
            # Only while it is unreaped: once reaped, its pid (and group id) may be another's.
            if self._process.returncode is None:
                self._signal(signal.SIGKILL)
                await self._process.wait()
            await self._process.aclose()
            self._output.close()

    async def _ladder(self, stop_timeout: float) -> None:
        with anyio.move_on_after(stop_timeout):
            await self._process.wait()
            return
        logger.warning("job process %d did not stop within %gs; killing it", self.pid, stop_timeout)
        self._signal(signal.SIGKILL)
        await self._process.wait()

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)  # its own group (start_new_session): pgid == pid


def process_alive(pid: int, started: float) -> bool:
    """Whether `pid` is still the process that started at `started` (not a later one given its pid)."""
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.Error:
        return False
