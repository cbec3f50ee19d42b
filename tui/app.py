"""The console app: the network side. It reads the host's state, follows its events, and asks it
to cancel sessions and jobs and restart workers, each in a Textual worker so that the screen never
waits. (A job's log is read by its own screen, `JobLogScreen`, while it is shown.)

One loop (`watch_host`) owns the event stream: it reads the state, subscribes after the state's
`seq`, and on any failure says so and tries again, resuming after the last event it has. A second
loop (`poll_state`) re-reads the state each second for what no event reports (admission counts,
session states) and notices a connection that went quiet without closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

import httpx
from textual import work
from textual.app import App
from textual.screen import Screen

from mlxhost.client.admin import AdminClient, AdminRefused, Target
from mlxhost.wire.admin import END_HOST_STOPPING, END_LAGGED, BadRecord, StreamLagged, StreamReset
from mlxhost_tui.model import host_identity, strip_controls
from mlxhost_tui.screens.main import MainScreen

__all__ = ["ConsoleApp", "make_app"]

RETRY_FIRST_S = 0.25
RETRY_MAX_S = 2.0
POLL_S = 1.0
BACKLOG = 200  # events before the snapshot that a first connection asks for, for the log only
POLL_FAILURES = 2  # polls that fail in a row before the event stream is started again
# What the console says when the host ends its event stream, by the reason the host gives.
ENDINGS = {END_HOST_STOPPING: "the host is stopping"}


class StreamEnded(Exception):
    pass


def _why(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        if code == 401:
            return "HTTP 401: the admin token is missing or wrong (--token)"
        return f"HTTP {code}"
    if isinstance(exc, httpx.ConnectError):
        return "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, (httpx.ReadError, httpx.RemoteProtocolError)):
        return "connection lost"
    return str(exc) or type(exc).__name__


class ConsoleApp(App[None]):
    TITLE = "mlxhost"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen {
        background: $surface;
    }
    """

    def __init__(self, target: Target, *, clock: Callable[[], float] = time.time, live: bool = True) -> None:
        super().__init__()
        self.target = target
        self.clock = clock
        self.live = live
        self.main = MainScreen(target.describe(), clock)

    def get_default_screen(self) -> Screen[None]:
        return self.main

    def on_mount(self) -> None:
        if self.live:
            self.watch_host()
            self.poll_state()

    @work(exclusive=True, group="host")
    async def watch_host(self) -> None:
        delay = RETRY_FIRST_S
        resync = False  # after stream.reset: our resume point is gone, start at the snapshot's
        while True:
            try:
                async with AdminClient(self.target) as client:
                    state = await client.snapshot()
                    if host_identity(state) != self.main.model.identity:
                        after = max(0, state.seq - BACKLOG)  # some history for the log
                    elif resync:
                        after = state.seq
                    else:
                        after = self.main.model.logged  # resume: the host replays what we missed
                    self.main.ingest(state=state)
                    self.main.set_connection("connected")
                    delay, resync = RETRY_FIRST_S, False
                    # The generator holds the response open: close it as soon as we stop reading.
                    async with contextlib.aclosing(client.watch(after=after)) as events:
                        async for event in events:
                            self.main.ingest(events=[event])
                            if isinstance(event, StreamReset):
                                resync = True
                                break
                            if isinstance(event, StreamLagged):
                                break  # reconnect at once, resuming after the last event we have
                        else:
                            # The host ended the stream on purpose (`event: end`); a cut one
                            # raises instead. After a lag, read on at once from where we are.
                            if client.end_reason == END_LAGGED:
                                continue
                            why = ENDINGS.get(client.end_reason or "", "the host ended the event stream")
                            raise StreamEnded(why)
            except (httpx.HTTPError, OSError, json.JSONDecodeError, BadRecord, StreamEnded) as exc:
                self.main.set_connection("disconnected", _why(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    @work(exclusive=True, group="poll")
    async def poll_state(self) -> None:
        failures = 0
        async with AdminClient(self.target, timeout=POLL_S * 2) as client:
            while True:
                await asyncio.sleep(POLL_S)
                if self.main.status.connection != "connected":
                    failures = 0
                    continue
                try:
                    state = await client.snapshot()
                except (httpx.HTTPError, OSError, json.JSONDecodeError, BadRecord):
                    failures += 1
                    if failures >= POLL_FAILURES:
                        failures = 0
                        self.watch_host()  # the stream may hang on a dead connection: start again
                    continue
                failures = 0
                if host_identity(state) != self.main.model.identity:
                    self.watch_host()  # another host now answers here: the stream starts over
                    continue
                self.main.ingest(state=state)

    @work(group="actions")
    async def cancel_session(self, session_id: str) -> None:
        try:
            async with AdminClient(self.target) as client:
                code = await client.cancel_session(session_id)
        except httpx.HTTPError as exc:
            self.notify(f"Could not cancel {session_id}: {_why(exc)}", severity="error")
            return
        if code == 202:
            self.notify(f"Cancelling {session_id}.")
        elif code == 404:
            self.notify(f"{session_id} is already over.", severity="warning")
        else:
            self.notify(f"Cancelling {session_id}: HTTP {code}.", severity="error")

    @work(group="actions")
    async def cancel_job(self, job_id: str) -> None:
        try:
            async with AdminClient(self.target) as client:
                record = await client.cancel_job(job_id)
        except AdminRefused as exc:
            if exc.status_code == 409:
                self.notify(f"{job_id} is already over.", severity="warning")
            else:
                self.notify(f"Cancelling {job_id}: {strip_controls(exc.message)}", severity="error")
            return
        except (httpx.HTTPError, OSError, BadRecord) as exc:
            self.notify(f"Could not cancel {job_id}: {_why(exc)}", severity="error")
            return
        self.notify(f"{job_id} cancelled." if record.job_state.terminal else f"Cancelling {job_id}.")

    @work(group="actions")
    async def restart_worker(self, worker_id: str) -> None:
        self.notify(f"Restarting {worker_id}…")
        try:
            async with AdminClient(self.target) as client:
                code = await client.restart_worker(worker_id)
        except httpx.HTTPError as exc:
            self.notify(f"Could not restart {worker_id}: {_why(exc)}", severity="error")
            return
        if code == 200:
            self.notify(f"{worker_id} restarted.")
        else:
            self.notify(f"Restarting {worker_id}: HTTP {code}.", severity="error")


def make_app(target: Target, *, clock: Callable[[], float] = time.time, live: bool = True) -> ConsoleApp:
    """The console for `target`. Tests pass a fixed `clock`, and `live=False` to feed it themselves
    through `app.main.ingest(state, events)` — the path the network loop uses."""
    return ConsoleApp(target, clock=clock, live=live)
