"""A running host for the tests, the bench and the soak: start `mlxhost serve`, know it is ready, stop it.

`start_host` runs the real command in a subprocess with `READY_FILE_ENV` set, and waits for the
`HostReady` record the host writes as it logs its ready line: the addresses come from that record,
never from parsing the log. It fails fast, with the host's log, if the process exits first or the
timeout passes. The host's output is read the whole time by a daemon thread into `log`, so the
pipe never fills and blocks it.

Imports neither `mlxhost.worker` nor MLX (the host loads the model, not the harness), and OpenAI's
client only when asked for one: `openai` is a test extra, not a dependency of the package.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

import httpx

from mlxhost.wire.layout import HOST_READY, READY_FILE_ENV, HostReady

if TYPE_CHECKING:
    import openai

__all__ = ["ADMIN_TOKEN", "RunningHost", "outcome_without_drafts", "start_host", "wait_until"]

# The admin token a host gets unless its arguments name one.
ADMIN_TOKEN = "test-admin-token"
READY_POLL_S = 0.02
LOG_CATCH_UP_S = 5.0  # at most this long for the reader to pass the ready line (it is written first)

T = TypeVar("T")


def outcome_without_drafts(outcome: dict[str, Any]) -> dict[str, Any]:
    """A session's outcome (as /admin/sessions gives it) without speculative decoding's counts,
    which are there when the session drafted: whether it did depends on the machine's timing
    (the worker drafts where that pays), so a test compares the rest. The counts must agree."""
    rest = dict(outcome)
    drafted, accepted = rest.pop("drafted_tokens", 0), rest.pop("accepted_tokens", 0)
    assert 0 <= accepted <= drafted, outcome
    return rest


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll `predicate` until it returns something true, and return that; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        time.sleep(interval)


@dataclass(eq=False)
class RunningHost:
    """A `mlxhost serve` process that has said it serves; a context manager that stops it on exit.

    Built by `start_host`; `RunningHost(host.process, None, host.unix)` is the same host seen
    through its Unix socket only.
    """

    process: subprocess.Popen[str] = field(repr=False)
    url: str | None
    unix: Path | None
    log: list[str] = field(default_factory=list, repr=False)
    admin_token: str = ADMIN_TOKEN
    models: tuple[str, ...] = ()
    load_s: float | None = None  # the model's load time, from an --in-process host's ready record
    _reader: threading.Thread | None = field(default=None, repr=False)
    _state_dir: str | None = field(default=None, repr=False)  # made for it; removed once it stopped

    @property
    def pid(self) -> int:
        return self.process.pid

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the host (unless it has exited) and return its exit status; kill it past `timeout`."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            status = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        if self._reader is not None:
            self._reader.join(1.0)  # its last lines, for whoever reads the log next
        if self._state_dir is not None:
            shutil.rmtree(self._state_dir, ignore_errors=True)
        return status

    # -- clients ---------------------------------------------------------------------------------

    def http(self, timeout: float = 30.0, admin: bool = True) -> httpx.Client:
        """A client for the host; over TCP it carries the admin token unless `admin` is false."""
        if self.url is None:
            transport = httpx.HTTPTransport(uds=str(self.unix))
            return httpx.Client(base_url="http://mlxhost", transport=transport, timeout=timeout)
        headers = {"authorization": f"Bearer {self.admin_token}"} if admin else {}
        return httpx.Client(base_url=self.url, timeout=timeout, headers=headers)

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        import openai

        if self.url is None:
            assert self.unix is not None
            http = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.unix)))
            # openai types `http_client` as its httpx2's Client; it takes an httpx one as well.
            return openai.OpenAI(base_url="http://mlxhost/v1", api_key=api_key, http_client=http)  # type: ignore[arg-type]
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key)

    def async_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        import openai

        assert self.url is not None
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="unused", **kwargs)

    # -- what it reports -------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        with self.http() as http:
            return http.get("/health").json()  # type: ignore[no-any-return]

    def worker_health(self, model: str | None = None) -> dict[str, Any]:
        """The /health of a model's worker, read straight from its private socket."""
        health = self.health()
        if "engine" in health:  # --in-process: the host is the worker
            return health
        worker = next(w for w in health["workers"] if model is None or w["model"] == model)
        transport = httpx.HTTPTransport(uds=worker["socket"])
        with httpx.Client(base_url="http://worker", transport=transport, timeout=30) as http:
            return http.get("/health").json()  # type: ignore[no-any-return]

    def engine(self, model: str | None = None) -> dict[str, Any]:
        return self.worker_health(model)["engine"]  # type: ignore[no-any-return]

    def worker(self, model: str | None = None) -> dict[str, Any]:
        workers = self.health()["workers"]
        return next(w for w in workers if model is None or w["model"] == model)  # type: ignore[no-any-return]

    def wait_for(self, predicate: Callable[[dict[str, Any]], object], timeout: float = 10.0) -> dict[str, Any]:
        """Poll the engine's counters until `predicate(counters)` holds."""
        deadline = time.monotonic() + timeout
        while True:
            counters = self.engine()
            if predicate(counters):
                return counters
            if time.monotonic() > deadline:
                raise AssertionError(f"engine never reached the expected state: {counters}")
            time.sleep(0.02)


def start_host(
    *args: str,
    env: dict[str, str] | None = None,
    tcp: bool = True,
    timeout: float = 60.0,
    new_session: bool = False,  # its own session and process group, as a terminal's foreground job
    cwd: Path | None = None,  # the operator's working directory
) -> RunningHost:
    """Run `mlxhost serve ARGS` and return it once it serves.

    Adds `--admin-token=ADMIN_TOKEN` unless ARGS name a token, `--port 0` (a free port) when
    `tcp`, a temporary `--state-dir` unless ARGS name one, and `--standby-workers 0` unless ARGS
    name a count. Raises RuntimeError, with the host's log, if it exits or `timeout` passes first.
    """
    # `-P`: as the `mlxhost` console script, whose `sys.path` starts at its own folder, not the cwd.
    command = [sys.executable, "-P", "-m", "mlxhost", "serve", *args]
    admin_token = _admin_token(args)
    if admin_token is None:
        admin_token = ADMIN_TOKEN
        command += [f"--admin-token={ADMIN_TOKEN}"]  # one argv word: a token may start with '-'
    if tcp:
        command += ["--port", "0"]
    if not any(a.startswith("--standby-workers") for a in args):
        # A standby spends seconds of CPU importing MLX, a cost a test host that lives for a few
        # requests never earns back, and that the suite's other hosts pay on 2 cores. Tests of
        # the standby (and of recovery) ask for it by name.
        command += ["--standby-workers", "0"]
    state_dir: str | None = None
    if not any(a == "--state-dir" or a.startswith("--state-dir=") for a in args) and "MLXHOST_STATE_DIR" not in (
        env or {}
    ):
        # A host of its own state: never the user's jobs, nor another test host's.
        state_dir = tempfile.mkdtemp(prefix="mlxhost-state-")
        command += ["--state-dir", state_dir]
    ready_dir = Path(tempfile.mkdtemp(prefix="mlxhost-ready-"))
    ready_file = ready_dir / "ready.json"
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {}), READY_FILE_ENV: str(ready_file)},
            start_new_session=new_session,
            cwd=cwd,
        )
        log: list[str] = []
        reader = threading.Thread(target=_read_into, args=(process, log), daemon=True)
        reader.start()
        ready = _wait_ready(process, ready_file, log, reader, timeout)
    finally:
        shutil.rmtree(ready_dir, ignore_errors=True)
    # The ready line is logged before the record is written: let the reader pass it, so that
    # `log` holds all the host said while starting (its warnings, say) when this returns.
    deadline = time.monotonic() + LOG_CATCH_UP_S
    while not any(HOST_READY in line for line in log) and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(READY_POLL_S)
    unix = Path(ready.unix) if ready.unix is not None else None
    return RunningHost(
        process, ready.url, unix, log, admin_token, ready.models, ready.load_s, reader, _state_dir=state_dir
    )


def _admin_token(args: Sequence[str]) -> str | None:
    """The token ARGS give the host (`--admin-token=T` or `--admin-token T`), if any."""
    for i, arg in enumerate(args):
        if arg.startswith("--admin-token="):
            return arg.split("=", 1)[1]
        if arg == "--admin-token" and i + 1 < len(args):
            return args[i + 1]
    return None


def _read_into(process: subprocess.Popen[str], log: list[str]) -> None:
    assert process.stdout is not None
    log.extend(process.stdout)  # line by line, as the host writes them


def _wait_ready(
    process: subprocess.Popen[str], ready_file: Path, log: list[str], reader: threading.Thread, timeout: float
) -> HostReady:
    deadline = time.monotonic() + timeout
    while True:
        # The host replaces the file whole: once it exists, it is the whole record.
        if ready_file.exists():
            return HostReady.from_json(ready_file.read_text())
        if process.poll() is not None:
            reader.join(5.0)
            raise RuntimeError(
                f"mlxhost serve exited ({process.returncode}) before it was ready:\n" + "".join(log)
            )
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            reader.join(5.0)
            raise RuntimeError(f"mlxhost serve was not ready within {timeout:g}s:\n" + "".join(log))
        time.sleep(READY_POLL_S)
