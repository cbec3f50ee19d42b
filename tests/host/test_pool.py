"""The pool, with real workers: routing by name and alias, residency, eviction, idle unloading."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from mlxhost.demo import make_model
from mlxhost.testing import RunningHost, start_host, wait_until

LONG_CHAT = {"messages": [{"role": "user", "content": "Go on forever"}], "max_tokens": 4000, "temperature": 0}
SHORT_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}

@pytest.fixture(scope="module")
def three_models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("pool")
    return [make_model(root / name, size="tiny", seed=seed) for seed, name in enumerate("abc")]


def resident(server: RunningHost) -> set[str]:
    return {w["model"] for w in server.health()["workers"]}


def test_the_pool_evicts_the_least_recently_used_idle_model(three_models: list[Path]) -> None:
    a, b, c = three_models
    server = start_host(
        "--model", f"alpha={a}", "--model", f"beta={b}", "--model", f"gamma={c}", "--max-resident", "2"
    )
    try:
        assert resident(server) == {"alpha"}  # the default preloads; the rest start on demand
        with server.http() as http:
            assert http.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "beta"}).json()["model"] == "beta"
            assert resident(server) == {"alpha", "beta"}
            http.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "alpha"})  # beta is now LRU
            assert http.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "gamma"}).json()["model"] == "gamma"
            assert resident(server) == {"alpha", "gamma"}
    finally:
        server.stop()


def test_the_pool_never_evicts_a_model_with_requests_in_flight(three_models: list[Path]) -> None:
    a, b, c = three_models
    # No liveness checks: a frozen worker is rightly taken for hung once `health_timeout` passes,
    # and loading two models on a busy machine can take that long. Eviction is what is tested.
    server = start_host(
        "--model", f"alpha={a}", "--model", f"beta={b}", "--model", f"gamma={c}", "--max-resident", "2",
        "--health-interval", "0",
    )
    try:
        with server.http() as http, server.http() as other:
            with http.stream("POST", "/v1/chat/completions", json={**LONG_CHAT, "stream": True, "model": "alpha"}) as stream:
                lines = stream.iter_lines()  # kept: a dropped iterator would close the stream
                next(lines)
                # Frozen, alpha's worker keeps that request in flight for as long as the test needs.
                alpha = server.worker("alpha")["pid"]
                os.kill(alpha, signal.SIGSTOP)
                try:
                    other.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "beta"})
                    # alpha is the least recently used, but busy: beta goes.
                    other.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "gamma"})
                    assert resident(server) == {"alpha", "gamma"}
                finally:
                    os.kill(alpha, signal.SIGCONT)
    finally:
        server.stop()


def test_routing_by_name_alias_and_the_strict_policy(three_models: list[Path], tmp_path: Path) -> None:
    a, b, _ = three_models
    config = tmp_path / "models.toml"
    config.write_text(
        f'[[model]]\nid = "alpha"\npath = "{a}"\n\n[[model]]\nid = "beta"\npath = "{b}"\naliases = ["b", "second"]\n'
    )
    with ExitStack() as hosts, ThreadPoolExecutor(2) as starting:
        # Two independent hosts, each seconds of start: started at once.
        both = [starting.submit(start_host, "--config", str(config), *more) for more in ([], ["--strict-models"])]
        for started in both:
            hosts.callback(lambda f=started: f.exception() is None and f.result().stop())
        lenient, strict = (started.result() for started in both)
        with lenient.http() as http:
            assert http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, "model": "second"}).json()["model"] == "beta"
            assert http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1}).json()["model"] == "alpha"
            assert http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, "model": "nope"}).json()["model"] == "alpha"
            assert [m["id"] for m in http.get("/v1/models").json()["data"]] == ["alpha", "beta"]
        with strict.http() as http:
            response = http.post("/v1/completions", json={"prompt": "x", "max_tokens": 1, "model": "nope"})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "model_not_found"


def test_an_idle_model_is_unloaded_and_comes_back_on_demand(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--idle-ttl", "0.5")
    try:
        wait_until(lambda: not server.health()["workers"], timeout=10)
        assert server.health()["status"] == "ok"  # it can still load on demand
        with server.http() as http:
            assert http.post("/v1/chat/completions", json=SHORT_CHAT).status_code == 200
    finally:
        server.stop()
    log = "".join(server.log)
    assert "unused for 0.5s" in log and log.count("spawned pid") == 2


def test_the_memory_budget_evicts_by_the_workers_readings(three_models: list[Path]) -> None:
    a, b, c = three_models
    # Each tiny worker reads about 1 MB (weights ~0.8 MB plus cache): two fit in 2.5 MB, three don't.
    server = start_host(
        "--model", f"alpha={a}", "--model", f"beta={b}", "--model", f"gamma={c}",
        "--max-resident", "3", "--memory-budget", str(2_500_000),
    )
    try:
        with server.http() as http:
            http.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "beta"})
            assert resident(server) == {"alpha", "beta"}
            wait_until(lambda: all(w["memory"] for w in server.health()["workers"]))
            http.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "beta"})
            http.post("/v1/chat/completions", json={**SHORT_CHAT, "model": "gamma"})
            assert resident(server) == {"beta", "gamma"}
    finally:
        server.stop()
    assert "memory_budget" in "".join(server.log)
