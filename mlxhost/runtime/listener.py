"""Hypercorn under anyio: bind first, then serve until told to stop.

Hypercorn has no anyio backend, so this runs its asyncio connection handler (`TCPServer`) under
anyio on asyncio. Binding ourselves (instead of `hypercorn.asyncio.serve`) lets the caller learn
the real port of `:0`, fail fast on a used address, and announce readiness only once the sockets
exist. Accepting ourselves (instead of Hypercorn's `worker_serve`, which has no such option) lets
us cap open connections: past `max_connections` a new one gets a 503 and is closed, so idle or
trickling clients cannot hold every file descriptor and task of the host.
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
from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config, Sockets
from hypercorn.utils import wrap_app
from starlette.types import ASGIApp

__all__ = ["BindError", "Listener", "SocketInUse", "describe", "remove_socket_file", "serve_in"]


class BindError(Exception):
    pass


_BUSY_BODY = (
    b'{"error":{"message":"too many open connections; try again","type":"service_unavailable",'
    b'"param":null,"code":"busy"}}'
)
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
REFUSE_TIMEOUT = 1.0  # writing the 503 to a connection we will not serve must not take long


class Listener:
    def __init__(
        self, binds: list[str], graceful_timeout: float = 3.0, max_connections: int | None = None
    ) -> None:
        self.max_connections = max_connections
        self.config = Config()
        self.config.bind = binds
        # Unix sockets are created 0600 in one step: no moment where others could connect.
        self.config.umask = 0o177
        self.config.accesslog = None
        self.config.errorlog = logging.getLogger("hypercorn.error")
        self.config.graceful_timeout = graceful_timeout
        for bind in binds:
            if bind.startswith("unix:"):
                _check_unix_path(Path(bind[5:]))
        try:
            self._sockets: Sockets = self.config.create_sockets()
        except OSError as exc:
            # "AF_UNIX path too long" and its like come without an errno, and so without strerror.
            raise BindError(f"cannot listen on {', '.join(binds)}: {exc.strerror or exc}") from None
        # What we bound, by inode: on the way out we remove our own socket file, never one that
        # another process has put at the same path since.
        self._own_files = {Path(b[5:]): _identity(Path(b[5:])) for b in binds if b.startswith("unix:")}
        # Listen now, not when Hypercorn gets to it: a client that connects as soon as we say
        # "ready" waits in the backlog instead of being refused.
        for sock in self._sockets.insecure_sockets:
            # Hypercorn makes its sockets inheritable (for its own worker processes), and uvloop's
            # spawn does not close them: every worker and job would hold our port open after we die,
            # where nobody accepts, and a restart would find it in use.
            sock.set_inheritable(False)
            sock.listen(self.config.backlog)
        self.addresses = [describe(s) for s in self._sockets.insecure_sockets]

    async def serve(self, app: ASGIApp, stop: anyio.Event) -> None:
        """Serve until `stop` is set. Run it in a task of its own (see `serve_in`)."""
        loop = asyncio.get_running_loop()
        wrapped = wrap_app(app, self.config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]  # Starlette and Hypercorn type ASGI apart
        context = WorkerContext(None)
        connections: set[asyncio.Task[None]] = set()

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self.max_connections is not None and len(connections) >= self.max_connections:
                await _refuse(writer)
                return
            task = asyncio.current_task()
            assert task is not None
            connections.add(task)  # type: ignore[arg-type]
            try:
                await TCPServer(wrapped, loop, self.config, context, {}, reader, writer)
            finally:
                connections.discard(task)  # type: ignore[arg-type]

        servers = []
        try:
            for sock in self._sockets.insecure_sockets:
                servers.append(await asyncio.start_server(on_connection, backlog=self.config.backlog, sock=sock))
            await stop.wait()
        finally:
            with anyio.CancelScope(shield=True):
                # As Hypercorn's own shutdown: no new connections, idle keep-alive ones close,
                # busy ones get graceful_timeout to finish, then they are cancelled.
                await context.terminated.set()
                for server in servers:
                    server.close()
                if connections:
                    _, left = await asyncio.wait(set(connections), timeout=self.config.graceful_timeout)
                    for task in left:
                        task.cancel()
                    if left:
                        logging.getLogger("mlxhost").debug("closed %d connection(s) left open past the graceful timeout", len(left))
                    await asyncio.gather(*left, return_exceptions=True)
                for path, identity in self._own_files.items():
                    remove_socket_file(path, identity)


async def _refuse(writer: asyncio.StreamWriter) -> None:
    try:
        writer.write(BUSY)
        await asyncio.wait_for(writer.drain(), REFUSE_TIMEOUT)
    except (OSError, asyncio.TimeoutError):
        pass
    finally:
        writer.close()


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


# sun_path holds 108 bytes on Linux (104 on macOS), its terminating NUL included.
MAX_UNIX_PATH = 107 if os.uname().sysname == "Linux" else 103


class SocketInUse(BindError):
    pass


def _check_unix_path(path: Path) -> None:
    """BindError for a path no socket can have, or one a live process is listening on.

    Hypercorn removes a socket file before binding its own: without this check a second host
    would silently take the first one's address, and the first one's exit would remove it.
    """
    size = len(os.fsencode(path))
    if size > MAX_UNIX_PATH:
        raise BindError(
            f"cannot listen on unix:{path}: the path is {size} bytes, and a Unix socket's may be at "
            f"most {MAX_UNIX_PATH}; choose a shorter --unix path"
        )
    try:
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return
    except OSError:
        return  # nothing there (or nothing we may look at): binding will say
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        return  # stale: its listener is gone, and Hypercorn will replace the file
    finally:
        probe.close()
    raise SocketInUse(f"cannot listen on unix:{path}: another process is listening there (another host?)")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def remove_socket_file(path: Path, identity: tuple[int, int] | None = None) -> None:
    """Remove the socket file at `path`; when `identity` is given, only while it is still that file."""
    try:
        st = os.stat(path)
        if stat.S_ISSOCK(st.st_mode) and (identity is None or identity == (st.st_dev, st.st_ino)):
            path.unlink()
    except FileNotFoundError:
        pass
