"""Two real hosts behind HAProxy (config/haproxy.cfg), as their clients see them: when a host is
full, stopping or gone. A full host's 429 reaches the client unchanged; with no host up the
balancer answers its own 503; a stopping host leaves the rotation and its users return when it is
back; admin routes and metrics stay off the public address.

Which host answered a request is what the hosts themselves say: the `x-mlxhost-session` id every
answer carries is in exactly one host's `/admin/sessions` (see load_balancer_helpers.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mlxhost.testing import RunningHost, wait_until
from tests.e2e.load_balancer_helpers import (  # noqa: F401
    DOWN_CLOSED,
    SERVERS,
    UP,
    USERS,
    Farm,
    _address,
    _free_port,
    _host,
    chat,
    farm_fixture,
    start_balancer,
)


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
