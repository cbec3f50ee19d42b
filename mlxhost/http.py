"""Hypercorn under anyio: bind first, then serve until told to stop.

Hypercorn has no anyio backend, so this runs its asyncio server under anyio on asyncio. Binding
ourselves (instead of `hypercorn.asyncio.serve`) lets the caller learn the real port of `:0`,
fail fast on a used address, and announce readiness only once the sockets exist.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
from pathlib import Path

import anyio
import anyio.abc
from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp

__all__ = ["BindError", "Listener", "describe", "remove_socket_file", "serve_in"]


class BindError(Exception):
    pass


class Listener:
    def __init__(self, binds: list[str], graceful_timeout: float = 3.0) -> None:
        self.config = Config()
        self.config.bind = binds
        # Unix sockets are created 0600 in one step: no moment where others could connect.
        self.config.umask = 0o177
        self.config.accesslog = None
        self.config.errorlog = logging.getLogger("hypercorn.error")
        self.config.graceful_timeout = graceful_timeout
        try:
            self._sockets: Sockets = self.config.create_sockets()
        except OSError as exc:
            raise BindError(f"cannot listen on {', '.join(binds)}: {exc.strerror}") from None
        # Listen now, not when Hypercorn gets to it: a client that connects as soon as we say
        # "ready" waits in the backlog instead of being refused.
        for sock in self._sockets.insecure_sockets:
            sock.listen(self.config.backlog)
        self.addresses = [describe(s) for s in self._sockets.insecure_sockets]

    async def serve(self, app: ASGIApp, stop: anyio.Event) -> None:
        """Serve until `stop` is set. Run it in a task of its own (see `serve_in`)."""
        try:
            await worker_serve(
                wrap_app(app, self.config.wsgi_max_body_size, "asgi"),  # type: ignore[arg-type]  # Starlette and Hypercorn type ASGI apart
                self.config,
                sockets=self._sockets,
                shutdown_trigger=stop.wait,
            )
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise
            # Hypercorn cancels connections still open after graceful_timeout (idle keep-alive
            # ones too) and then re-raises their CancelledError from worker_serve, although
            # nobody cancelled this task: that is a normal end of serving here.
            logging.getLogger("mlxhost").debug("closed connections left open past the graceful timeout")
        finally:
            for bind in self.config.bind:
                if bind.startswith("unix:"):
                    remove_socket_file(Path(bind[5:]))


def serve_in(
    tg: anyio.abc.TaskGroup, listener: Listener, app: ASGIApp, stop: anyio.Event
) -> None:
    """Serve in a new task of `tg`, and cancel the rest of `tg` once serving has ended.

    Hypercorn's asyncio TaskGroup cancels and uncancels the task it runs in; an anyio cancel
    scope that later cancels that same task can then mistake its own cancellation for an outside
    one. Serving in a task that ends right after keeps the two apart.
    """

    async def serve_then_cancel() -> None:
        await listener.serve(app, stop)
        tg.cancel_scope.cancel()

    tg.start_soon(serve_then_cancel)


def describe(sock: socket.socket) -> str:
    name = sock.getsockname()
    if isinstance(name, str):
        return f"unix:{name}"
    host, port = name[0], name[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def remove_socket_file(path: Path) -> None:
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
