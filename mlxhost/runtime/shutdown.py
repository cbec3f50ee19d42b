"""Graceful shutdown, shared by the parent, the in-process server and the worker.

The first request (a signal, or a worker's stdin closing) stops new work and gives running
requests `grace` seconds; a second request ends the wait at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import anyio

__all__ = ["Shutdown", "exit_now"]

logger = logging.getLogger("mlxhost")


def exit_now(code: int = 0) -> None:
    """End a process that has loaded MLX, once it has shut down cleanly.

    Interpreter teardown can race MLX's native destructors (a joinable C++ thread destroyed:
    "terminate called without an active exception", SIGABRT) after all our work is done. Flush
    what we wrote and leave without that teardown.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Shutdown:
    def __init__(self) -> None:
        self.requested = anyio.Event()
        self.forced = anyio.Event()
        self.reason = ""

    def request(self, reason: str) -> None:
        if not self.requested.is_set():
            self.reason = reason
            self.requested.set()
        else:
            logger.warning("%s again: stopping now", reason)
            self.forced.set()

    async def watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.request(signal.Signals(signum).name)

    async def wait_grace(self, grace: float, idle: Callable[[], Awaitable[object]]) -> None:
        """Wait until `idle()` returns, the grace period ends, or a second request forces."""
        with anyio.move_on_after(grace):
            async with anyio.create_task_group() as tg:

                async def finish_after(wait: Callable[[], Awaitable[object]]) -> None:
                    await wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(finish_after, self.forced.wait)
                tg.start_soon(finish_after, idle)
