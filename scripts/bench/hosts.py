"""The mlxhost hosts the bench runs, started through `mlxhost.testing.start_host` (the harness the
tests and the soak use: it knows the host is ready from its machine-readable ready record).

What the bench adds on top: the serving options every mlxhost path gets, the shipped number of
warm standby interpreters (the harness's default is none), an admin token of its
own for each run, the worker pids and the model load time read from the host's log, the arrival
time of each log line while a recovery is timed (`LogClock`), and a stop that leaves no worker
behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Self

import psutil

from bench.figures import progress
from bench.plan import Plan
from bench.settings import REPO_ROOT, SERVER_START_TIMEOUT_S
from mlxhost.config import Settings
from mlxhost.testing import RunningHost, start_host

SPAWNED = re.compile(r"spawned pid (\d+)")  # the isolated parent's log
STOP_TIMEOUT_S = 30.0
WORKER_EXIT_WAIT_S = 10.0  # for a worker to follow its stopped parent before it is killed
LOG_POLL_S = 0.001  # LogClock's resolution
# The mlxhost servers admit at least this many sessions at once (the parent's default is 8), and
# always at least the highest concurrency, so that no stream of a cN run is queued.
MIN_MAX_ACTIVE = 16
# The harness starts its hosts with no warm standby interpreter (a test host never earns its import
# back); the bench measures the host as shipped, so it asks for the default count by name.
STANDBY_WORKERS = next(f.default for f in dataclasses.fields(Settings) if f.name == "standby_workers")


def new_admin_token() -> str:
    """Hex, so that it never starts with '-' (an argv word that did would read as an option)."""
    return secrets.token_hex(24)


# Every host the bench starts gets this token (the admin API needs one on TCP), not the harness's
# well-known test token: a benchmark's host listens on the machine for as long as it runs.
ADMIN_TOKEN = new_admin_token()
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN_TOKEN}"}


def admin_token_option(token: str = ADMIN_TOKEN) -> str:
    """The admin token as one argv word (kept out of the server options, which the report shows)."""
    return f"--admin-token={token}"


def server_options(name: str, plan: Plan) -> list[str]:
    """The options of the in-process and the isolated server, as the report shows them."""
    # Every stream of the highest concurrency admitted at once (the parent's default is 8).
    admit = [f"--max-active={max(MIN_MAX_ACTIVE, *plan.concurrency)}"]
    if name == "in_process":
        return ["--in-process", *admit]
    # No crash-loop backoff and enough respawns for back-to-back kills (see bench.recovery).
    return [*admit, "--early-exit=0", f"--restart-limit={plan.repeats + 3}"]


class LogClock:
    """When each line of a host's log arrived, while it runs (a context manager).

    The harness's reader thread appends the host's lines to `RunningHost.log` as they come; this
    thread notes the time each new one appeared, within LOG_POLL_S. It runs only while a kill is
    timed, so that it costs the throughput runs nothing."""

    def __init__(self, log: list[str]) -> None:
        self._log = log
        self._seen = len(log)
        self.lines: list[tuple[float, str]] = []  # (perf_counter, line) from the start on
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-log-clock", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(LOG_POLL_S):
            count = len(self._log)
            if count > self._seen:
                now = time.perf_counter()
                self.lines.extend((now, line.rstrip("\n")) for line in self._log[self._seen : count])
                self._seen = count

    def first(self, pattern: str, since: float) -> float | None:
        """Seconds from `since` to the arrival of the first line after it matching `pattern`."""
        for arrived, line in list(self.lines):
            if arrived >= since and re.search(pattern, line):
                return arrived - since
        return None


class Host:
    """A running `mlxhost serve` of the bench, by name ("in_process", "isolated", "overload")."""

    def __init__(self, name: str, running: RunningHost) -> None:
        self.name = name
        self.running = running
        self.pid = running.pid
        assert running.url is not None  # started on TCP
        self.url: str = running.url

    @property
    def load_s(self) -> float | None:
        """The model load time an in-process server reported as ready (None for the parent)."""
        return self.running.load_s

    def worker_pids(self) -> set[int]:
        """Every worker the parent said it spawned."""
        return {int(m.group(1)) for line in list(self.running.log) if (m := SPAWNED.search(line))}

    def log_clock(self) -> LogClock:
        return LogClock(self.running.log)

    def log_tail(self, lines: int = 20) -> str:
        return "".join(list(self.running.log)[-lines:]).rstrip("\n")

    def stop(self) -> None:
        """SIGTERM (the parent stops its workers), SIGKILL if need be; no worker outlives it."""
        workers = self.worker_pids()
        with contextlib.suppress(psutil.Error):
            workers |= {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
        try:
            self.running.stop(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.running.process.wait()  # the harness killed it
        # A worker whose parent was killed stops when it sees its stdin close; give it a moment,
        # then kill it: a benchmark must leave nothing behind.
        deadline = time.monotonic() + WORKER_EXIT_WAIT_S
        for pid in sorted(workers):
            try:
                worker = psutil.Process(pid)
                if "mlxhost" not in " ".join(worker.cmdline()):
                    continue  # gone, and the pid reused
                worker.wait(timeout=max(0.0, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                progress(f"warning: {self.name} worker pid {pid} outlived its parent; killing it")
                with contextlib.suppress(psutil.Error):
                    worker.kill()
                    worker.wait(timeout=5)
            except psutil.Error:
                pass  # already gone


def start(name: str, model_path: Path, max_batch: int, options: Sequence[str] = ()) -> Host:
    """`python -m mlxhost serve` with `options` on a free port, ready; serving this checkout's code,
    installed or not."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    if not any(option.startswith("--standby-workers") for option in options):
        options = [*options, f"--standby-workers={STANDBY_WORKERS}"]
    # Every option as one `--opt=value` word: a value can never be read as an option.
    running = start_host(
        *options, f"--model={model_path}", "--host=127.0.0.1", f"--max-batch={max_batch}",
        admin_token_option(), env=env, timeout=SERVER_START_TIMEOUT_S,
    )  # fmt: skip
    return Host(name, running)


@contextlib.contextmanager
def running(host: Host) -> Iterator[Host]:
    """Stops the host when the block ends, however it ends; its log's last lines on an error."""
    try:
        yield host
    except BaseException:
        progress(f"mlxhost ({host.name}) log, the last lines:\n{host.log_tail(40)}")
        raise
    finally:
        host.stop()
