"""Two real hosts behind HAProxy, run with the shipped config/haproxy.cfg, as their clients see them.

The balancer is the real `haproxy` binary with the repository's own configuration file; the test
only fills in its environment variables (the listen port, the hosts' addresses, a short health
check interval, the runtime API socket). Which host answered a request is what the hosts
themselves say: the `x-mlxhost-session` id every answer carries is in exactly one host's
`/admin/sessions`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
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


@pytest.fixture(scope="module")
def farm(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Farm]:
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


def _session(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.headers["x-mlxhost-session"]


def test_requests_with_no_user_and_no_key_are_spread_over_the_hosts(farm: Farm) -> None:
    with farm.http() as http:
        sessions = [_session(http.post("/v1/chat/completions", json=chat())) for _ in range(8)]
    # Round robin, over consistent hashing's ring: both hosts served, though not strictly in turn.
    assert set(farm.served_by(sessions)) == {0, 1}


def test_one_user_stays_on_one_host_and_users_are_spread(farm: Farm) -> None:
    with farm.openai() as client:

        def ask(user: str) -> str:
            raw = client.chat.completions.with_raw_response.create(model="tiny", user=user, **chat())
            assert raw.parse().choices[0].message.content is not None
            return raw.headers["x-mlxhost-session"]

        assert len(set(farm.served_by([ask("agent-alone") for _ in range(5)]))) == 1
        # All clients send the same placeholder key: the body's `user` decides before it.
        homes = {user: set(farm.served_by([ask(user), ask(user)])) for user in USERS}
    assert all(len(home) == 1 for home in homes.values()), homes
    assert set().union(*homes.values()) == {0, 1}, homes


def test_a_responses_user_and_a_messages_user_id_keep_their_host_too(farm: Farm) -> None:
    with farm.openai() as client:
        responses = [
            client.responses.with_raw_response.create(
                model="tiny", input="Hello", max_output_tokens=2, user="agent-responses"
            ).headers["x-mlxhost-session"]
            for _ in range(3)
        ]
    with anthropic.Anthropic(base_url=farm.balancer.url, api_key="unused", max_retries=0) as claude:
        messages = [
            claude.messages.with_raw_response.create(
                model="tiny",
                max_tokens=2,
                messages=[{"role": "user", "content": "Hello"}],
                metadata={"user_id": "agent-claude"},
            ).headers["x-mlxhost-session"]
            for _ in range(3)
        ]
    assert len(set(farm.served_by(responses))) == 1
    assert len(set(farm.served_by(messages))) == 1


def test_without_a_user_the_api_key_keeps_a_caller_on_one_host(farm: Farm) -> None:
    homes = {}
    for key in (f"key-{i}" for i in range(8)):
        with farm.openai(api_key=key) as client:
            raw = [client.chat.completions.with_raw_response.create(model="tiny", **chat()) for _ in range(2)]
        homes[key] = set(farm.served_by([r.headers["x-mlxhost-session"] for r in raw]))
    assert all(len(home) == 1 for home in homes.values()), homes
    assert set().union(*homes.values()) == {0, 1}, homes


class Background:
    """A request through the balancer, in a thread; a stream's lines are kept as they arrive."""

    def __init__(self, farm: Farm, body: dict[str, Any]) -> None:
        self.response: httpx.Response | None = None
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(farm.http(), body), daemon=True)
        self._thread.start()

    def _run(self, http: httpx.Client, body: dict[str, Any]) -> None:
        try:
            with http, http.stream("POST", "/v1/chat/completions", json=body) as response:
                self.response = response
                for line in response.iter_lines():
                    self.lines.append(line)
        except BaseException as exc:  # noqa: BLE001  # for the test's thread to see and report
            self.error = exc

    def join(self) -> Background:
        self._thread.join(60)
        assert not self._thread.is_alive() and self.error is None, self.error
        return self

    @property
    def session(self) -> str:
        assert self.response is not None and self.response.status_code == 200, self.lines
        return self.response.headers["x-mlxhost-session"]


def _admission(host: RunningHost) -> dict[str, Any]:
    return next(iter(host.health()["admission"].values()), {"active": 0, "queued": 0})


def _cancel_live(hosts: list[RunningHost]) -> None:
    for host in (h for h in hosts if h.process.poll() is None):
        # A stopping host closes its port before it exits: then it has nothing left to cancel.
        with host.http() as admin, contextlib.suppress(httpx.TransportError):
            for live in admin.get("/admin/sessions").json()["live"]:
                admin.post(f"/admin/sessions/{live['id']}/cancel")


def test_a_full_host_answers_429_with_retry_after_through_the_balancer(farm: Farm) -> None:
    user = "agent-busy"
    running = Background(farm, chat(4000, stream=True, user=user))
    try:
        # Its first frames arrive while the host still generates: the balancer holds none back.
        wait_until(lambda: running.error or any(line.startswith("data: ") for line in running.lines))
        [busy] = farm.served_by([running.session])
        host = farm.hosts[busy]
        assert _admission(host)["active"] == 1
        rejected = _admission(host)["rejected"]
        waiting = Background(farm, chat(2, user=user))
        wait_until(lambda: _admission(host)["queued"] == 1)

        with farm.openai() as client, pytest.raises(openai.RateLimitError) as refused:
            client.chat.completions.create(model="tiny", user=user, **chat())
        # The host's own answer, unchanged: not retried on the other host, not the balancer's page.
        assert refused.value.status_code == 429
        assert refused.value.response.headers["retry-after"] == "1"
        assert refused.value.code == "queue_full"
        assert refused.value.response.json()["error"]["type"] == "resource_admission"
        assert _admission(host)["rejected"] == rejected + 1

        with host.http() as admin:
            assert admin.post(f"/admin/sessions/{running.session}/cancel").status_code == 202
        # The waiter then ran, on the same host; the stream ended with the host's last frame.
        assert farm.served_by([waiting.join().session]) == [busy]
        assert '"code":"cancelled"' in "".join(running.join().lines)
    finally:
        _cancel_live(farm.hosts)  # whatever a failure left running, so the next test starts idle


def test_with_no_host_up_the_balancer_answers_503_with_retry_after(tmp_path: Path) -> None:
    balancer = start_balancer([f"127.0.0.1:{_free_port()}" for _ in SERVERS], tmp_path)
    try:
        balancer.wait_for(**dict.fromkeys(SERVERS, DOWN_CLOSED))
        client = openai.OpenAI(base_url=f"{balancer.url}/v1", api_key="unused", max_retries=0)
        with client, pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(model="tiny", user="agent-0", **chat())
        # Its own 503, in the shape the SDKs read as an error, and with a Retry-After they honour.
        assert refused.value.status_code == 503
        assert refused.value.response.headers["retry-after"] == "5"
        assert refused.value.code == "no_host_available"
    finally:
        balancer.stop()


def test_a_body_longer_than_the_buffer_passes_whole_and_is_placed_by_its_key(farm: Farm) -> None:
    def home(body: dict[str, Any], key: str) -> tuple[int, httpx.Response]:
        with farm.http() as http:
            response = http.post(
                "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
            )
        [host] = farm.served_by([response.headers["x-mlxhost-session"]])
        return host, response

    key = "key-long-prompts"
    keys_host, _ = home(chat(), key)
    user = next(u for u in USERS if home(chat(user=u), key)[0] != keys_host)
    # `messages` first, `user` last, as the SDKs send them: past the first tune.bufsize bytes,
    # the `user` is out of the balancer's sight, and the key places the request.
    long = {"messages": [{"role": "user", "content": "word " * 40_000}], "max_tokens": 2, "user": user}
    host, response = home(long, key)
    assert host == keys_host
    # Within the buffer, a long prompt's `user` is seen and places it.
    shorter = {**long, "messages": [{"role": "user", "content": "word " * 6_000}]}
    assert home(shorter, key)[0] != keys_host
    # The host read all of it: too long for the tiny model, it says so, by name.
    assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"


def test_admin_routes_and_metrics_stay_off_the_public_address(farm: Farm) -> None:
    token = {"authorization": f"Bearer {farm.hosts[0].admin_token}"}
    with farm.http() as http:
        assert http.get("/admin/state", headers=token).status_code == 403
        assert http.get("/metrics").status_code == 403
        assert http.get("/v1/models").status_code == 200
    with farm.hosts[0].http() as direct:
        assert direct.get("/admin/state").status_code == 200


# Last: it replaces a host of the module's farm (by one at the same address).
def test_a_stopping_host_leaves_the_rotation_and_its_users_return_when_it_is_back(farm: Farm) -> None:
    with farm.openai() as client:

        def ask(users: list[str]) -> list[int]:
            raw = [
                client.chat.completions.with_raw_response.create(model="tiny", user=u, **chat())
                for u in users
            ]
            return farm.served_by([r.headers["x-mlxhost-session"] for r in raw])

        before = dict(zip(USERS, ask(USERS), strict=True))
        assert set(before.values()) == {0, 1}
        leaving = farm.hosts[1]
        address = _address(leaving)
        mine = next(user for user, host in before.items() if host == 1)
        stream = Background(farm, chat(4000, stream=True, user=mine))
        try:
            wait_until(lambda: stream.error or any(line.startswith("data: ") for line in stream.lines))
            assert farm.served_by([stream.session]) == [1]
            leaving.process.send_signal(signal.SIGTERM)
            # Draining, the host answers /health with 503 (L7STS: a status, not a closed port), and
            # the checks take it out: every user, its own too, goes to the other host...
            farm.balancer.wait_for(host1=UP, host2=("DOWN", "L7STS"))
            assert ask(USERS) == [0] * len(USERS)
            # ... while the stream it was running goes on: marked down is not cut off.
            seen = len(stream.lines)
            wait_until(lambda: len(stream.lines) > seen)
            with leaving.http() as admin:
                assert admin.post(f"/admin/sessions/{stream.session}/cancel").status_code == 202
            assert [line for line in stream.join().lines if line][-1] == "data: [DONE]"
        finally:
            _cancel_live([leaving])
        assert leaving.process.wait(30) == 0  # drained and gone, nothing forced
        leaving.stop()
        farm.balancer.wait_for(host1=UP, host2=DOWN_CLOSED)
        assert ask(USERS * 2) == [0] * len(USERS) * 2

        # Back at its address, as a restarted service would be: the checks take it back.
        farm.hosts[1] = _host(farm.model, port=address.rsplit(":", 1)[1])
        assert _address(farm.hosts[1]) == address
        farm.balancer.wait_for(host1=UP, host2=UP)
        # Consistent hashing: each user is back on the host it had before.
        assert dict(zip(USERS, ask(USERS), strict=True)) == before
