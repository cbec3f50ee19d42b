"""Two real hosts behind HAProxy, run with the shipped config/haproxy.cfg: the balancer, the farm
fixture and what both load balancer test files share.

The balancer is the real `haproxy` binary with the repository's own configuration file; the tests
only fill in its environment variables (the listen port, the hosts' addresses, a short health
check interval, the runtime API socket). Which host answered a request is what the hosts
themselves say: the `x-mlxhost-session` id every answer carries is in exactly one host's
`/admin/sessions`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until

HAPROXY = shutil.which("haproxy")
if HAPROXY is None:
    pytest.skip(
        "haproxy is not installed, so the load balancer example cannot be run: install it with "
        "`apt-get install haproxy` (Debian, Ubuntu) or `brew install haproxy` (macOS)",
        allow_module_level=True,
    )

CONFIG = Path(__file__).resolve().parents[2] / "config" / "haproxy.cfg"
BACKEND = "mlxhost"
SERVERS = ("host1", "host2")  # the config's `server` lines, in order
CHECK_INTER = "200ms"  # a host's leaving and coming back are seen within a second
SETTLE_S = 30.0  # the bound on every wait for the balancer to see a change
PROMPT = [{"role": "user", "content": "Hello"}]
USERS = [f"agent-{i}" for i in range(8)]


def chat(max_tokens: int = 2, **fields: Any) -> dict[str, Any]:
    return {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, **fields}


@dataclass
class Balancer:
    """A `haproxy -db` (foreground) process running config/haproxy.cfg."""

    process: subprocess.Popen[bytes]
    url: str
    stats: Path
    log: Path

    def command(self, line: str) -> str:
        """One command of HAProxy's runtime API, and its whole answer."""
        with socket.socket(socket.AF_UNIX) as api:
            api.settimeout(10)
            api.connect(str(self.stats))
            api.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := api.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers(self) -> dict[str, tuple[str, str]]:
        """Each host as the health checks see it: (UP, DOWN or on the way, the last check's result)."""
        lines = self.command("show stat").splitlines()
        header = lines[0].removeprefix("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {r["svname"]: (r["status"], r["check_status"]) for r in rows if r["pxname"] == BACKEND}

    def wait_for(self, **expected: tuple[str, str]) -> None:
        def seen() -> bool:
            servers = self.servers()
            return all(servers.get(name) == state for name, state in expected.items())

        try:
            wait_until(seen, timeout=SETTLE_S)
        except AssertionError:
            raise AssertionError(f"HAProxy never saw {expected}: {self.servers()}\n{self.output()}") from None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


UP = ("UP", "L7OK")  # up, and its last GET /health answered 200
DOWN_CLOSED = ("DOWN", "L4CON")  # down: nothing listens at its address any more


def start_balancer(addresses: list[str], folder: Path) -> Balancer:
    """HAProxy in front of `addresses` (host:port, one per server line), once it listens."""
    assert len(addresses) == len(SERVERS)
    hosts = {f"MLXLB_HOST{i}": address for i, address in enumerate(addresses, 1)}
    for _ in range(3):  # the free port may be taken before HAProxy binds it: then another one
        balancer = _launch(hosts, _free_port(), folder)
        if balancer is not None:
            return balancer
    raise RuntimeError(f"haproxy did not start:\n{(folder / 'haproxy.log').read_text(errors='replace')}")


def _launch(hosts: dict[str, str], port: int, folder: Path) -> Balancer | None:
    assert HAPROXY is not None
    stats, log = folder / "haproxy.sock", folder / "haproxy.log"
    env = {**os.environ, **hosts, "MLXLB_BIND": f"127.0.0.1:{port}", "MLXLB_INTER": CHECK_INTER}
    env["MLXLB_STATS"] = str(stats)
    with log.open("wb") as out:
        process = subprocess.Popen([HAPROXY, "-db", "-f", str(CONFIG)], stdout=out, stderr=out, env=env)
    balancer = Balancer(process, f"http://127.0.0.1:{port}", stats, log)
    wait_until(lambda: process.poll() is not None or (stats.exists() and _listens(port)))
    if process.poll() is None:
        return balancer
    balancer.stop()
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _host(model: Path, port: str | None = None) -> RunningHost:
    # One running and one waiting per host: requests one after another never meet a full queue,
    # and a long stream with one waiter fills it. allowed_hosts: clients name the balancer in Host.
    # A long grace: a stopping host's stream runs until the test ends it, however slow the machine.
    args = ["--model", str(model), "--host", "127.0.0.1", "--allowed-hosts", "127.0.0.1"]
    args += ["--max-active", "1", "--max-queued", "1", "--shutdown-grace", "60"]
    if port is None:
        return start_host(*args)
    return start_host(*args, "--port", port, tcp=False)


def _address(host: RunningHost) -> str:
    assert host.url is not None
    return host.url.removeprefix("http://")


@dataclass
class Farm:
    """Two hosts behind one balancer; a test that replaces a host puts the new one in `hosts`."""

    hosts: list[RunningHost]
    balancer: Balancer
    model: Path

    def http(self) -> httpx.Client:
        """A client of the balancer that presents no API key, as an anonymous caller would."""
        return httpx.Client(base_url=self.balancer.url, timeout=60)

    def openai(self, api_key: str = "unused") -> openai.OpenAI:
        # No retries: a 429 must reach the test as it reached the client, not be retried away.
        return openai.OpenAI(base_url=f"{self.balancer.url}/v1", api_key=api_key, max_retries=0)

    def served_by(self, sessions: list[str]) -> list[int]:
        """For each session id (an answer's `x-mlxhost-session`), the index of the host that ran it."""
        known = [_session_ids(host) for host in self.hosts]
        owners = []
        for session in sessions:
            where = [i for i, ids in enumerate(known) if session in ids]
            assert len(where) == 1, f"session {session} is known to hosts {where}"
            owners.append(where[0])
        return owners


def _session_ids(host: RunningHost) -> set[str]:
    if host.process.poll() is not None:
        return set()  # stopped: it runs nothing
    with host.http() as admin:
        record = admin.get("/admin/sessions").json()
    return {s["id"] for s in (*record["live"], *record["recent"])}


# Named apart from the fixture, so that the tests' `farm` arguments shadow no import.
@pytest.fixture(scope="module", name="farm")
def farm_fixture(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
    hosts: list[RunningHost] = []
    balancer: Balancer | None = None
    try:
        hosts.extend(_host(tiny_model) for _ in SERVERS)
        balancer = start_balancer([_address(h) for h in hosts], tmp_path_factory.mktemp("haproxy"))
        # Healthy by their checks, not only by HAProxy's optimistic start state.
        balancer.wait_for(**dict.fromkeys(SERVERS, UP))
        yield Farm(hosts, balancer, tiny_model)
    finally:
        if balancer is not None:
            balancer.stop()
        for host in hosts:
            host.stop()
