"""A client that leaves stops its generation within one decode step, streaming or not.

Proof comes from the engine's own counters on /health, not from timing.
"""

from __future__ import annotations

import httpx

from mlxhost.testing import RunningHost

LONG = {"messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 4000, "temperature": 0}


def test_streaming_client_disconnect_stops_generation(server: RunningHost) -> None:
    before = server.wait_for(lambda c: c["active"] == 0)
    health = server.worker_health()
    memory_before, kept_before = health["memory"]["active_bytes"], health["prompt_cache"]["bytes"]
    with server.http() as http:
        with http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as response:
            lines = response.iter_lines()
            received = [line for line, _ in zip(lines, range(100), strict=False)]
            assert any(line.startswith("data: ") for line in received)
            in_flight = server.engine()["generated_tokens"] - before["generated_tokens"]
        # Leaving the block closed the connection mid-stream.
    after = server.wait_for(lambda c: c["cancelled"] == before["cancelled"] + 1 and c["active"] == 0)
    # The KV cache of hundreds of tokens went with the session (the tiny model's is ~0.5 KB a token),
    # but for the copy the prompt cache keeps, bounded, for a prompt that shares its prefix.
    assert in_flight > 200
    health = server.worker_health()
    kept = health["prompt_cache"]["bytes"] - kept_before
    assert kept > 0  # a cancelled generation's cache is intact: kept
    assert health["memory"]["active_bytes"] - memory_before - kept < 64 * 1024
    assert after["completed"] == before["completed"]
    assert after["last_cancel_lag_steps"] <= 1
    assert after["generated_tokens"] - before["generated_tokens"] < 4000
    # Nothing is generated once the client has gone.
    assert server.engine()["generated_tokens"] == after["generated_tokens"]


def test_non_streaming_client_disconnect_stops_generation(server: RunningHost) -> None:
    before = server.wait_for(lambda c: c["active"] == 0)
    with server.http() as http:
        try:
            http.post("/v1/chat/completions", json=LONG, timeout=httpx.Timeout(30, read=0.3))
        except httpx.ReadTimeout:
            pass
        else:
            raise AssertionError("the request finished before the client gave up")
    after = server.wait_for(lambda c: c["cancelled"] == before["cancelled"] + 1 and c["active"] == 0)
    assert after["completed"] == before["completed"]
    assert after["last_cancel_lag_steps"] <= 1
    assert after["generated_tokens"] - before["generated_tokens"] < 4000
    assert server.engine()["generated_tokens"] == after["generated_tokens"]


def test_one_client_leaving_does_not_disturb_another(server: RunningHost) -> None:
    with server.http() as http, server.http() as other:
        with http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as leaving:
            next(leaving.iter_lines())
            staying = other.post(
                "/v1/chat/completions",
                json={"messages": LONG["messages"], "max_tokens": 50, "temperature": 0},
            )
    assert staying.status_code == 200
    assert staying.json()["usage"]["completion_tokens"] == 50 or staying.json()["choices"][0]["finish_reason"] == "stop"
