"""Two real hosts behind HAProxy (config/haproxy.cfg), as their clients see them: which host a
request goes to. Requests with no user and no key are spread; a user (`user`, `metadata.user_id`)
or else the API key keeps a caller on one host, also when the body is longer than the balancer reads.

Which host answered a request is what the hosts themselves say: the `x-mlxhost-session` id every
answer carries is in exactly one host's `/admin/sessions` (see load_balancer_helpers.py).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx

from tests.e2e.load_balancer_helpers import USERS, Farm, chat, farm_fixture  # noqa: F401


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
