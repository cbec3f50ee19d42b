"""A model served by a group of two MLX ranks (mlx.launch, ring backend, loopback) as users see it.

Rank 0 serves and batches, rank 1 follows every step (mlxhost/worker/engine/group.py); the host supervises
them as one worker (mlxhost/host/workers/process.py). Greedy answers must be the single worker's.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until

PROMPTS = [
    "Hi",
    "Tell me about the sea.",
    "Write a poem about rain",
    "Why?",
    "a b c",
    "Go on",
    "ok",
    "The end",
]
LONG = {
    "model": "tiny",
    "messages": [{"role": "user", "content": "Tell me a long story"}],
    "max_tokens": 2000,
}


def _group_config(tmp: Path, model: Path, sharding: str = "tensor") -> Path:
    config = tmp / "group.toml"
    config.write_text(
        f'[[model]]\nid = "tiny"\npath = "{model}"\nranks = 2\nbackend = "ring"\nsharding = "{sharding}"\n'
    )
    return config


pytestmark = pytest.mark.slow  # two ranks take 10-20 s to start on 2 cores


@pytest.fixture(scope="module")
def group(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    config = _group_config(tmp_path_factory.mktemp("group"), tiny_model)
    # A stall in a collective (a rank stopped, a link down) is found by the stall timeout.
    with start_host(
        "--config", str(config), "--stall-timeout", "5", "--health-interval", "0.5", timeout=180
    ) as running:
        yield running


@pytest.fixture(scope="module")
def single_answers(server: RunningHost) -> list[str]:
    with server.client() as client:
        return [_answer(client, prompt) for prompt in PROMPTS]


def _answer(client: openai.OpenAI, prompt: str, model: str = "tiny") -> str:
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], max_tokens=24, temperature=0
    )
    return reply.choices[0].message.content or ""


def _signal_rank_mid_stream(host: RunningHost, pid: int, sig: int) -> dict[str, str]:
    """Signal a rank once a long stream has text; the error that ends the stream, cleanly."""
    with host.http() as http, http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as r:
        lines = r.iter_lines()
        for line in lines:
            if '"content":"' in line:
                break
        os.kill(pid, sig)
        events = [line for line in lines if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    error: dict[str, str] = json.loads(events[-2][6:])["error"]
    return error


def _ready_again(host: RunningHost) -> dict[str, Any]:
    ready: dict[str, Any] = wait_until(
        lambda: (w := host.worker("tiny"))["state"] == "ready" and w["ranks"] and w, timeout=120
    )
    return ready


def _ranks(host: RunningHost) -> list[dict[str, object]]:
    ranks: list[dict[str, object]] = host.worker("tiny")["ranks"]
    return ranks


def test_health_shows_every_rank_under_its_model(group: RunningHost) -> None:
    ranks = _ranks(group)
    assert [r["rank"] for r in ranks] == [0, 1]
    for rank in ranks:
        assert psutil.pid_exists(int(rank["pid"]))  # type: ignore[call-overload]
        assert isinstance(rank["rss_bytes"], int) and rank["rss_bytes"] > 0
    with group.http() as http:
        metrics = http.get("/metrics").text
    assert 'mlxhost_worker_rank_rss_bytes{host="' in metrics and 'rank="1"' in metrics
    # Every rank passed the per-row probe (a rank that failed it would make them all pad).
    assert group.worker_health("tiny")["batch"]["kv_layout"] == "per_row"


def test_greedy_answers_are_the_single_workers(group: RunningHost, single_answers: list[str]) -> None:
    with group.client() as client:
        assert [_answer(client, prompt) for prompt in PROMPTS] == single_answers


def test_eight_concurrent_streams(group: RunningHost, single_answers: list[str]) -> None:
    async def one(client: openai.AsyncOpenAI, prompt: str) -> str:
        stream = await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": prompt}],
            max_tokens=24,
            temperature=0,
            stream=True,
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def main() -> list[str]:
        async with group.async_client() as client:
            return await asyncio.gather(*(one(client, p) for p in PROMPTS))

    assert asyncio.run(main()) == single_answers
    engine = group.engine("tiny")
    assert engine["largest_batch"] >= 2
    # Its ranks drafted and verified alike (every rank drafts from the same tokens): the answers
    # are still the single worker's, whose own are those without drafts (test_speculation.py).
    assert engine["accepted_tokens"] > 0


def _turns(client: openai.OpenAI) -> tuple[str, int]:
    """An agent's second turn, re-sending the first: its answer and how much of it was cached."""
    first = [{"role": "user", "content": "Remember the number seven and the sea."}]
    reply = _answer(client, first[0]["content"])
    second = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    answer = client.chat.completions.create(model="tiny", messages=second, max_tokens=24, temperature=0)  # type: ignore[arg-type]
    details = answer.usage.prompt_tokens_details if answer.usage else None
    return answer.choices[0].message.content or "", (details.cached_tokens or 0) if details else 0


def test_the_next_turn_starts_from_the_prompt_cache_on_every_rank(
    group: RunningHost, server: RunningHost
) -> None:
    # Every rank keeps its own shard of the same entries: were rank 1's not rank 0's, the second
    # turn would start from KV that does not match, and its answer would not be the single worker's.
    with group.client() as client:
        answer, cached = _turns(client)
    with server.client() as client:
        expected, _ = _turns(client)
    assert cached > 0
    assert answer == expected


def test_a_client_that_leaves_stops_its_sequence_on_every_rank(
    group: RunningHost, single_answers: list[str]
) -> None:
    cancelled = group.engine("tiny")["cancelled"]
    with (
        group.http() as http,
        http.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as r,
    ):
        for line in r.iter_lines():
            if '"content":"' in line:
                break
    group.wait_for(lambda c: c["cancelled"] == cancelled + 1 and c["active"] == 0, timeout=30)
    # Had rank 1 kept the sequence, its batch would differ from rank 0's: no answer would match.
    with group.client() as client:
        assert _answer(client, PROMPTS[1]) == single_answers[1]


def test_killing_rank_1_mid_stream_restarts_the_whole_group(
    group: RunningHost, single_answers: list[str]
) -> None:
    old = _ranks(group)
    error = _signal_rank_mid_stream(group, int(old[1]["pid"]), signal.SIGKILL)  # type: ignore[call-overload]
    assert error["code"] == "worker_exited"
    worker = _ready_again(group)
    assert worker["restarts"] >= 1
    assert "rank 1" in (worker["last_exit"]["reason"] or "") and worker["last_exit"]["signal"] == "SIGKILL"
    assert {r["pid"] for r in worker["ranks"]}.isdisjoint({r["pid"] for r in old})
    wait_until(lambda: not any(psutil.pid_exists(int(r["pid"])) for r in old), timeout=10)  # type: ignore[call-overload]
    with group.client() as client:
        assert _answer(client, PROMPTS[0]) == single_answers[0]


def test_a_rank_stalled_in_a_collective_gets_the_group_restarted(
    group: RunningHost, single_answers: list[str]
) -> None:
    old = _ranks(group)
    stopped = int(old[1]["pid"])  # type: ignore[call-overload]
    # Rank 0 then waits in the next collective, forever.
    error = _signal_rank_mid_stream(group, stopped, signal.SIGSTOP)
    assert error["code"] == "worker_exited"
    worker = _ready_again(group)
    assert "stalled" in (worker["last_exit"]["reason"] or "")
    wait_until(lambda: not psutil.pid_exists(stopped), timeout=10)  # the stopped rank too
    with group.client() as client:
        assert _answer(client, PROMPTS[0]) == single_answers[0]


def test_a_pipelined_group_answers_as_one_worker(pipelined_model: Path, tmp_path: Path) -> None:
    # Two layers on each rank, the activations passed from one to the other every step. One host
    # serves the model twice: split across two ranks ("tiny"), and whole in one worker ("one").
    config = _group_config(tmp_path, pipelined_model, sharding="pipeline")
    config.write_text(
        config.read_text()
        + f'preload = true\n\n[[model]]\nid = "one"\npath = "{pipelined_model}"\npreload = true\n'
    )
    with start_host("--config", str(config), timeout=180) as host, host.client() as client:
        expected = [_answer(client, prompt, model="one") for prompt in PROMPTS[:4]]
        assert [_answer(client, prompt) for prompt in PROMPTS[:4]] == expected
        # Its ranks hold different layers: no prompt cache to keep alike (see group.py).
        _, cached = _turns(client)
        assert cached == 0
        assert len(_ranks(host)) == 2
        assert host.worker_health("tiny")["batch"]["kv_layout"] == "per_row"


def test_sigterm_of_the_host_leaves_no_rank(group: RunningHost) -> None:
    # Last in this module: it stops the module's host.
    ranks = _ranks(group)
    launcher = group.worker("tiny")["pid"]
    assert group.stop(signal.SIGTERM) == 0
    pids = [int(r["pid"]) for r in ranks] + [launcher]  # type: ignore[call-overload]
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        assert time.monotonic() < deadline, f"left running: {[p for p in pids if psutil.pid_exists(p)]}"
        time.sleep(0.1)
