"""The `mlxhost tui` console against real hosts, headless (`App.run_test`), and once in a real
terminal (tmux). The console drawn from a fixed state (snapshots, keys) is in test_tui_fixed_state.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from textual.pilot import Pilot

import mlxhost_tui.parts
from mlxhost.client.admin import Target
from mlxhost.demo import make_model
from mlxhost.testing import RunningHost, start_host
from mlxhost_tui.app import ConsoleApp, make_app
from mlxhost_tui.screens.confirm import ConfirmScreen
from mlxhost_tui.widgets import EventLog, SessionsTable, StatusBar, WorkersTable
from tests.e2e.tui_helpers import SIZE, anyio_backend  # noqa: F401

CHAT = {"messages": [{"role": "user", "content": "Go on forever"}], "temperature": 0, "stream": True}


@pytest.fixture(scope="module")
def host(tiny_model: Path) -> Iterator[RunningHost]:
    server = start_host("--model", str(tiny_model))
    yield server
    server.stop()


def console(server: RunningHost) -> ConsoleApp:
    return make_app(Target(url=server.url, token=server.admin_token))


class Stream(threading.Thread):
    """A client's streaming chat completion, read to its end in a thread."""

    def __init__(self, server: RunningHost, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.server, self.max_tokens = server, max_tokens
        self.session: str | None = None
        self.data: list[str] = []

    def run(self) -> None:
        body = {**CHAT, "max_tokens": self.max_tokens}
        with (
            self.server.http(timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            self.session = response.headers["x-mlxhost-session"]
            self.data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]


async def until(pilot: Pilot[Any], predicate: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await pilot.pause(0.05)


def cell(table: WorkersTable | SessionsTable, row: str, column: str) -> str:
    return table.get_cell(row, column).plain


def log_text(app: ConsoleApp) -> str:
    return "\n".join(line.plain for line in app.query_one(EventLog).entries)


@pytest.mark.anyio
async def test_a_stream_shows_up_as_a_session_then_its_outcome(
    host: RunningHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mlxhost_tui.parts, "LINGER_S", 1.5)
    app = console(host)
    async with app.run_test(size=SIZE) as pilot:
        sessions = app.query_one(SessionsTable)
        await until(pilot, lambda: app.main.status.connection == "connected", "connected")
        stream = Stream(host, max_tokens=1500)
        stream.start()
        # Listed while it runs, not once it is over (how soon is the bench's to measure).
        await until(pilot, lambda: stream.session in sessions.rows, "the session is listed")
        assert stream.is_alive()
        await until(pilot, lambda: cell(sessions, stream.session, "state") == "running", "it runs")  # type: ignore[arg-type]
        stream.join(30)
        sid = stream.session
        assert sid is not None
        await until(pilot, lambda: cell(sessions, sid, "state") == "completed", "its outcome shows")
        # Its finish reason, then its drafts when the worker speculated (`length 822/908 drafts`).
        assert re.fullmatch(r"length( \d+/\d+ drafts)?", cell(sessions, sid, "outcome"))
        assert cell(sessions, sid, "tokens") == "1500"
        assert f"{sid} completed (length), 1500 tokens" in log_text(app)
        await until(pilot, lambda: sid not in sessions.rows, "it fades out", timeout=3.0)


@pytest.mark.anyio
async def test_c_cancels_the_selected_session_after_confirmation(host: RunningHost) -> None:
    app = console(host)
    async with app.run_test(size=SIZE) as pilot:
        sessions = app.query_one(SessionsTable)
        stream = Stream(host, max_tokens=3000)
        stream.start()
        await until(pilot, lambda: stream.session in sessions.rows, "the session is listed")
        sid = stream.session
        assert sid is not None
        await until(pilot, lambda: app.main.model.sessions[sid].tokens > 0, "it makes tokens")
        sessions.move_cursor(row=sessions.get_row_index(sid))
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # no: nothing happens
        assert not isinstance(app.screen, ConfirmScreen) and stream.is_alive()
        await pilot.press("c", "y")
        await anyio.to_thread.run_sync(stream.join, 10.0)
        assert not stream.is_alive()
        last = json.loads([d for d in stream.data if d != "[DONE]"][-1])
        assert last["error"]["code"] == "cancelled"
        await until(pilot, lambda: cell(sessions, sid, "state") == "cancelled", "the outcome shows")
        assert cell(sessions, sid, "outcome") == "requested"


@pytest.mark.anyio
async def test_r_restarts_the_selected_worker(host: RunningHost) -> None:
    app = console(host)
    async with app.run_test(size=SIZE) as pilot:
        workers = app.query_one(WorkersTable)
        await until(pilot, lambda: workers.row_count >= 1, "the worker is listed")
        worker = workers.selected
        assert worker is not None and worker.state == "ready"
        old_pid = worker.pid
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(
            pilot, lambda: worker.pid != old_pid and worker.state == "ready", "a new process is ready"
        )
        assert cell(workers, worker.id, "pid") == str(worker.pid) == str(host.worker()["pid"])
        assert worker.restarts == 0  # a restart asked for is no crash
        assert f"{worker.id}: pid {old_pid} exited" in log_text(app)


@pytest.mark.anyio
async def test_a_dropped_stream_resumes_after_the_last_event(host: RunningHost) -> None:
    app = console(host)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.main.status.connection == "connected", "connected")
        app.workers.cancel_group(app, "host")  # the event stream drops; the host stays
        await pilot.pause()
        with host.http() as http:
            response = await anyio.to_thread.run_sync(
                lambda: http.post("/v1/chat/completions", json={**CHAT, "stream": False, "max_tokens": 4})
            )
        sid = response.headers["x-mlxhost-session"]
        app.watch_host()
        await until(pilot, lambda: f"{sid} completed" in log_text(app), "the missed events are replayed")
        assert log_text(app).count(f"{sid} opened") == 1
        assert app.main.status.connection == "connected"


@pytest.mark.anyio
async def test_a_wrong_token_says_so(host: RunningHost) -> None:
    app = make_app(Target(url=host.url, token="not-the-token"))
    async with app.run_test(size=SIZE) as pilot:
        status = app.query_one(StatusBar)
        await until(pilot, lambda: status.connection == "disconnected", "it says disconnected")
        assert "HTTP 401" in status.render().plain


@pytest.mark.anyio
async def test_a_killed_worker_shows_its_restart(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model))
    try:
        app = console(server)
        async with app.run_test(size=SIZE) as pilot:
            workers = app.query_one(WorkersTable)
            await until(pilot, lambda: workers.row_count >= 1 and workers.selected.state == "ready", "ready")  # type: ignore[union-attr]
            worker = workers.selected
            assert worker is not None
            old_pid = worker.pid
            assert old_pid is not None
            seen: set[str] = set()

            def ready_again() -> bool:
                seen.add(cell(workers, worker.id, "state"))
                return worker.state == "ready" and worker.pid != old_pid

            os.kill(old_pid, signal.SIGKILL)
            await until(pilot, ready_again, "the worker is ready again")
            assert "restarting" in seen or "worker.restarting" in log_text(app)
            assert cell(workers, worker.id, "restarts") == "1"
            assert cell(workers, worker.id, "exit") == "SIGKILL"
            assert f"pid {old_pid} exited, signal SIGKILL" in log_text(app)
    finally:
        server.stop()


@pytest.mark.anyio
async def test_an_embed_session_shows_its_kind_inputs_and_tokens(tmp_path: Path) -> None:
    embedder = make_model(tmp_path / "embedder", task="embed")
    with start_host("--model", str(embedder)) as server:
        app = console(server)
        async with app.run_test(size=SIZE) as pilot:
            sessions = app.query_one(SessionsTable)
            await until(pilot, lambda: app.main.status.connection == "connected", "connected")
            texts = ["the cat sat on the mat", "x", "naïve café", "def add(a, b): return a + b", "hi"]
            with server.http() as http:
                response = await anyio.to_thread.run_sync(
                    lambda: http.post("/v1/embeddings", json={"input": texts})
                )
            assert response.status_code == 200
            sid = response.headers["x-mlxhost-session"]
            prompt_tokens = response.json()["usage"]["prompt_tokens"]
            await until(
                pilot,
                lambda: sid in sessions.rows and cell(sessions, sid, "state") == "completed",
                "it shows",
            )
            assert cell(sessions, sid, "outcome") == "embed" and cell(sessions, sid, "rate") == "5 in"
            # Its prompt tokens come with the next poll of the state: no event carries them.
            await until(pilot, lambda: cell(sessions, sid, "tokens") == str(prompt_tokens), "its tokens show")
            assert f"{sid} opened on " in log_text(app) and "5 inputs in " in log_text(app)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.anyio
async def test_a_lost_host_shows_disconnected_then_reconnects(tiny_model: Path) -> None:
    port = free_port()
    first = start_host("--model", str(tiny_model), "--port", str(port), tcp=False)
    second: RunningHost | None = None
    try:
        app = console(first)
        async with app.run_test(size=SIZE) as pilot:
            status = app.query_one(StatusBar)
            await until(pilot, lambda: status.connection == "connected", "connected")
            await anyio.to_thread.run_sync(first.stop)
            await until(pilot, lambda: status.connection == "disconnected", "it says disconnected")
            assert "disconnected — retrying" in status.render().plain
            assert status.has_class("-offline")
            second = await anyio.to_thread.run_sync(
                lambda: start_host("--model", str(tiny_model), "--port", str(port), tcp=False)
            )
            await until(pilot, lambda: status.connection == "connected", "it reconnects")
            assert app.main.model.host is not None and app.main.model.host.pid == second.process.pid
            workers = app.query_one(WorkersTable)
            await until(
                pilot,
                lambda: workers.selected and workers.selected.pid == second.worker()["pid"],
                "new worker",
            )
            assert f"a new host, pid {second.process.pid}" in log_text(app)
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_mlxhost_tui_in_a_terminal(host: RunningHost) -> None:
    server = f"mlxhost-test-{os.getpid()}"
    tmux = ["tmux", "-L", server]
    command = f"{sys.executable} -m mlxhost tui --url {host.url} --token {host.admin_token}; echo TUI-EXITED $?; sleep 30"
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "tui", "-x", "100", "-y", "30", command], check=True, env=env
    )

    def screen() -> str:
        return subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "tui"], capture_output=True, text=True, check=True
        ).stdout

    def wait_for(text: str) -> str:
        deadline = time.monotonic() + 20
        while text not in (shown := screen()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed:\n{shown}")
            time.sleep(0.1)
        return shown

    try:
        worker = host.worker()
        shown = wait_for(f"{worker['pid']}")
        assert "connected" in shown and worker["model"] in shown and "ready" in shown
        subprocess.run([*tmux, "send-keys", "-t", "tui", "q"], check=True)
        assert "TUI-EXITED 0" in wait_for("TUI-EXITED")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)


@pytest.mark.anyio
async def test_a_host_that_stops_ends_the_stream_cleanly(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model))
    try:
        app = console(server)
        async with app.run_test(size=SIZE) as pilot:
            status = app.query_one(StatusBar)
            await until(pilot, lambda: status.connection == "connected", "connected")
            await anyio.to_thread.run_sync(server.stop)
            await until(pilot, lambda: status.connection == "disconnected", "it says disconnected")
            # The host said it was stopping (`event: end`): no "connection lost".
            assert "lost the host: the host is stopping" in log_text(app)
            assert "host.stopping" in log_text(app)
    finally:
        server.stop()


@pytest.mark.anyio
async def test_the_console_ignores_proxies_for_a_local_host(
    host: RunningHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    app = console(host)
    async with app.run_test(size=SIZE) as pilot:
        workers = app.query_one(WorkersTable)
        await until(pilot, lambda: workers.row_count >= 1, "the worker is listed")
        assert app.main.status.connection == "connected"
