"""Fixtures: the tiny model, and real `mlxhost serve` processes on a free port and a Unix socket."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest

from mlxhost.demo import make_model

ADMIN_TOKEN = "test-admin-token"
READY = re.compile(r"mlxhost ready: .* on (http://[\d.]+:\d+)?")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny", size="tiny")


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Poll `predicate` until it returns something true, and return that; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the condition")
        time.sleep(interval)


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str | None
    unix: Path | None
    log: list[str] = field(default_factory=list)
    admin_token: str = ADMIN_TOKEN

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        if self.url is None:
            assert self.unix is not None
            http = httpx.Client(transport=httpx.HTTPTransport(uds=str(self.unix)))
            return openai.OpenAI(base_url="http://mlxhost/v1", api_key=api_key, http_client=http)
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key)

    def async_client(self, **kwargs: object) -> openai.AsyncOpenAI:
        assert self.url is not None
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key="unused", **kwargs)  # type: ignore[arg-type]

    def http(self, timeout: float = 30.0, admin: bool = True) -> httpx.Client:
        """A client for the host; over TCP it carries the admin token unless `admin` is false."""
        if self.url is None:
            transport = httpx.HTTPTransport(uds=str(self.unix))
            return httpx.Client(base_url="http://mlxhost", transport=transport, timeout=timeout)
        headers = {"authorization": f"Bearer {self.admin_token}"} if admin else {}
        return httpx.Client(base_url=self.url, timeout=timeout, headers=headers)

    def health(self) -> dict:  # type: ignore[type-arg]
        with self.http() as http:
            return http.get("/health").json()  # type: ignore[no-any-return]

    def worker_health(self, model: str | None = None) -> dict:  # type: ignore[type-arg]
        """The /health of a model's worker, read straight from its private socket."""
        health = self.health()
        if "engine" in health:  # --in-process: the host is the worker
            return health
        workers = health["workers"]
        worker = next(w for w in workers if model is None or w["model"] == model)
        transport = httpx.HTTPTransport(uds=worker["socket"])
        with httpx.Client(base_url="http://worker", transport=transport, timeout=30) as http:
            return http.get("/health").json()  # type: ignore[no-any-return]

    def engine(self, model: str | None = None) -> dict:  # type: ignore[type-arg]
        return self.worker_health(model)["engine"]  # type: ignore[no-any-return]

    def worker(self, model: str | None = None) -> dict:  # type: ignore[type-arg]
        workers = self.health()["workers"]
        return next(w for w in workers if model is None or w["model"] == model)  # type: ignore[no-any-return]

    def wait_for(self, predicate, timeout: float = 10.0) -> dict:  # type: ignore[no-untyped-def,type-arg]
        """Poll the engine's counters until `predicate(counters)` holds."""
        deadline = time.monotonic() + timeout
        while True:
            counters = self.engine()
            if predicate(counters):
                return counters
            if time.monotonic() > deadline:
                raise AssertionError(f"engine never reached the expected state: {counters}")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def start_server(
    *args: str,
    env: dict[str, str] | None = None,
    tcp: bool = True,
    timeout: float = 60.0,
    new_session: bool = False,  # its own session and process group, as a terminal's foreground job
) -> Server:
    command = [sys.executable, "-m", "mlxhost", "serve", *args]
    if not any(a.startswith("--admin-token") for a in args):
        command += [f"--admin-token={ADMIN_TOKEN}"]  # one argv word: a token may start with '-'
    if tcp:
        command += ["--port", "0"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=new_session,
    )
    assert process.stdout is not None
    log: list[str] = []
    deadline = time.monotonic() + timeout
    url = None
    for line in process.stdout:
        log.append(line)
        if match := READY.search(line):
            url = match.group(1)
            break
        if time.monotonic() > deadline:
            break
    else:
        process.wait()
        raise RuntimeError("mlxhost serve exited before it was ready:\n" + "".join(log))
    unix = Path(args[args.index("--unix") + 1]) if "--unix" in args else None
    server = Server(process, url, unix, log)
    # Keep reading its output so the pipe never fills and blocks the server.
    threading.Thread(target=lambda: log.extend(process.stdout), daemon=True).start()  # type: ignore[arg-type]
    return server


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    socket = tmp_path_factory.mktemp("sock") / "mlxhost.sock"
    running = start_server("--model", str(tiny_model), "--unix", str(socket))
    yield running
    running.stop()


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with server.client() as c:
        yield c
