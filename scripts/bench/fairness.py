"""--fairness: how pooled work (embeddings) shares a worker with other work, through an isolated host.

One host serves the demo embedding model and the run's chat model, which embeds too (one worker
for both, `task = ["generate", "embed"]`). Two measurements, each `max(--repeats, 3)` rounds (1
with --smoke), medians:

- behind: 6 inputs of 3,900 token ids are sent to the embedding model; once the host admitted
  them, a one-token request follows; its time, request to answer (target: under 0.5 s on the tiny
  model). The big one is cancelled after.
- beside: 64 inputs of 200 tokens are sent to the chat model's worker; once admitted, a chat
  stream of 32 tokens with `stream_interval` 0 (a frame a token) follows; the stream's largest gap
  between two frames, its first included (target: under 0.3 s).

Both were the probe's findings: 20.4 s behind, 1.9-2.8 s beside, when passes were planned by the
oldest request and by what decoded when they were planned.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.figures import progress
from bench.plan import Plan
from bench.results.record import Record
from mlxhost.demo import make_model
from mlxhost.testing import RunningHost, start_host, wait_until

__all__ = ["Fairness", "measure_fairness", "print_fairness"]

BEHIND_TARGET_S = 0.5
BESIDE_TARGET_S = 0.3
EMBED, CHAT = "embedder", "chatty"


@dataclass(frozen=True)
class Fairness(Record):
    behind_s: list[float] = field(default_factory=list)  # the one-token request's time, per round
    beside_gap_s: list[float] = field(default_factory=list)  # the stream's largest gap, per round
    DERIVED = ("behind_median_s", "beside_gap_median_s", "behind_ok", "beside_ok")

    @property
    def behind_median_s(self) -> float:
        return statistics.median(self.behind_s)

    @property
    def beside_gap_median_s(self) -> float:
        return statistics.median(self.beside_gap_s)

    @property
    def behind_ok(self) -> bool:
        return self.behind_median_s < BEHIND_TARGET_S

    @property
    def beside_ok(self) -> bool:
        return self.beside_gap_median_s < BESIDE_TARGET_S


def _behind_big(host: RunningHost, big: dict[str, Any], then: Any) -> Any:
    """Send `big` in a thread, and once the host admitted it call `then(http)`; its result. `big`
    is cancelled after."""
    with host.http(timeout=300) as admin:
        opened = admin.get("/admin/sessions").json()["opened"]

        def send() -> None:
            with host.http(timeout=300) as http:
                http.post("/v1/embeddings", json=big)

        thread = threading.Thread(target=send)
        thread.start()
        wait_until(lambda: admin.get("/admin/sessions").json()["opened"] > opened, timeout=60)
        result = then(admin)
        for session in admin.get("/admin/sessions").json()["live"]:
            admin.post(f"/admin/sessions/{session['id']}/cancel")
        thread.join(timeout=120)
    return result


def _small(http: Any) -> float:
    began = time.perf_counter()
    http.post("/v1/embeddings", json={"model": EMBED, "input": [[7]]}).raise_for_status()
    return time.perf_counter() - began


def _stream_gap(http: Any) -> float:
    body = {"model": CHAT, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32, "stream": True}
    began = time.perf_counter()
    last, gap = began, 0.0
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                now = time.perf_counter()
                gap, last = max(gap, now - last), now
    return gap


def measure_fairness(plan: Plan) -> Fairness:
    rounds = 1 if plan.smoke else max(plan.repeats, 3)
    with tempfile.TemporaryDirectory(prefix="mlxhost-bench-fairness-") as folder:
        root = Path(folder)
        embedder = make_model(root / "embed", task="embed")
        config = root / "models.toml"
        config.write_text(
            f'[[model]]\nid = "{EMBED}"\npath = "{embedder}"\n\n'
            f'[[model]]\nid = "{CHAT}"\npath = "{plan.model_path}"\ntask = ["generate", "embed"]\n'
        )
        result = Fairness()
        with start_host("--config", str(config), "--max-resident", "2", "--stream-interval", "0") as host:
            huge = {"model": EMBED, "input": [[5] * 3900 for _ in range(6)]}
            wide = {"model": CHAT, "input": [[(i % 50) + 3] * 200 for i in range(64)]}
            with host.http(timeout=120) as http:  # both workers loaded before anything is timed
                http.post("/v1/embeddings", json={"model": EMBED, "input": "warm"}).raise_for_status()
                http.post("/v1/embeddings", json={"model": CHAT, "input": "warm"}).raise_for_status()
            for round_ in range(rounds):
                behind = _behind_big(host, huge, _small)
                beside = _behind_big(host, wide, _stream_gap)
                result.behind_s.append(behind)
                result.beside_gap_s.append(beside)
                progress(f"  round {round_ + 1}/{rounds}: behind {behind:.3f} s, stream's largest gap {beside:.3f} s")
        return result


def print_fairness(fairness: Fairness) -> None:
    print()
    print("fairness: pooled work beside other work on one worker (medians)")
    print(
        f"  a one-token embeddings request behind 6 x 3,900 ids: {fairness.behind_median_s:.3f} s "
        f"(< {BEHIND_TARGET_S} s: {'pass' if fairness.behind_ok else 'FAIL'}); rounds {fairness.behind_s}"
    )
    print(
        f"  a stream's largest gap with 64 x 200 inputs first: {fairness.beside_gap_median_s:.3f} s "
        f"(< {BESIDE_TARGET_S} s: {'pass' if fairness.beside_ok else 'FAIL'}); rounds {fairness.beside_gap_s}"
    )
