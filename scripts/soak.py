"""Soak: hours (or seconds) of streams, abandoned clients and worker kills; does the host leak?

    python scripts/soak.py [--model DIR] [--minutes N | --seconds N] [--concurrency 8]
                           [--kill-every SECONDS] [--warmup SECONDS] [--fresh-tokens N] [--json PATH]

An isolated host (the default `mlxhost serve`) serves `--concurrency` clients that stream without
pause, each leaving mid-stream about a third of the time, while the worker is killed with SIGKILL
every `--kill-every` seconds. The parent's RSS and open file descriptors are sampled throughout.
The verdict compares two quiet moments, after the warm-up and at the end (clients paused, no
session open): it fails, exit 1, when the parent's RSS grew more than 5% or it holds more file
descriptors than before, or when the worker's RSS grew more than 10% (compared when no kill
replaced the worker in between: `--kill-every 0`). Every client request must end in a completion
or a clean error. `--fresh-tokens N` makes every other request a completion of N fresh random
token ids, the shape that filled the disk tier's index (hundreds of fresh long prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mlxhost.demo import cached_model  # noqa: E402
from mlxhost.testing import start_host  # noqa: E402

START_TIMEOUT_S = 180.0
CLEAN = {"worker_exited", "model_restarting", "shutting_down", "queue_full"}
RSS_GROWTH_LIMIT = 0.05
WORKER_RSS_GROWTH_LIMIT = 0.10


class Host:
    """The isolated host under soak (see `mlxhost.testing`), and the parent's resources."""

    def __init__(self, model: Path) -> None:
        # Every option as one `--opt=value` word: a value can never be read as an option. The
        # checkout's mlxhost comes first on the host's path, as it does on this script's.
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        self.running = start_host(
            f"--model={model}", "--restart-limit=100000", "--crash-backoff=0", "--early-exit=0",
            "--max-active=16", env={"PYTHONPATH": path}, timeout=START_TIMEOUT_S,
        )
        self.parent = psutil.Process(self.running.pid)

    def http(self, timeout: float = 30) -> httpx.Client:
        return self.running.http(timeout=timeout)

    def worker_pid(self) -> int | None:
        workers = self.running.health()["workers"]
        return workers[0]["pid"] if workers and workers[0]["state"] == "ready" else None

    def live_sessions(self) -> int:
        with self.http() as http:
            return len(http.get("/admin/sessions").json()["live"])

    def worker_rss_mb(self) -> tuple[int | None, float | None]:
        pid = self.worker_pid()
        try:
            return pid, (psutil.Process(pid).memory_info().rss / 2**20 if pid is not None else None)
        except psutil.NoSuchProcess:
            return None, None

    def sample(self) -> dict[str, float]:
        return {"t": time.monotonic(), "rss_mb": self.parent.memory_info().rss / 2**20, "fds": self.parent.num_fds()}

    def stop(self) -> int:
        return self.running.stop(timeout=60)


class Load:
    def __init__(self, host: Host, concurrency: int, seed: int, fresh_tokens: int = 0) -> None:
        self.host = host
        self.fresh_tokens = fresh_tokens
        self.running = threading.Event()
        self.stop = threading.Event()
        self.outcomes: dict[str, int] = {}
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._client, args=(random.Random(seed + i),)) for i in range(concurrency)
        ]

    def start(self) -> None:
        self.running.set()
        for thread in self.threads:
            thread.start()

    def _count(self, outcome: str) -> None:
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def _client(self, rng: random.Random) -> None:
        # A connection per request: when the load pauses, no client connection stays open to
        # blur the parent's file-descriptor count.
        while not self.stop.is_set():
            self.running.wait()
            with self.host.http(timeout=120) as http:
                if self.fresh_tokens and rng.random() < 0.5:
                    self._fresh(http, rng)
                    continue
                body = {
                    "messages": [{"role": "user", "content": "Go on"}],
                    "max_tokens": rng.randint(20, 200),
                    "temperature": 0.8,
                    "stream": True,
                }
                leave_after = rng.randint(1, 40) if rng.random() < 0.33 else None
                try:
                    self._one(http, body, leave_after)
                except httpx.HTTPError as exc:
                    with self.lock:
                        self.failures.append(f"{type(exc).__name__}: {exc}")

    def _fresh(self, http: httpx.Client, rng: random.Random) -> None:
        """A completion of fresh random ids: a prompt no cache has, which the disk tier keeps."""
        prompt = [rng.randrange(3, 1000) for _ in range(self.fresh_tokens)]
        try:
            response = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
        except httpx.HTTPError as exc:
            with self.lock:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            return
        if response.status_code == 200:
            self._count("fresh")
        else:
            code = response.json()["error"]["code"]
            self._count(code) if code in CLEAN else self.failures.append(code)

    def _one(self, http: httpx.Client, body: dict[str, Any], leave_after: int | None) -> None:
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                code = response.json()["error"]["code"]
                self._count(code) if code in CLEAN else self.failures.append(code)
                time.sleep(0.2)
                return
            last = ""
            for n, line in enumerate(response.iter_lines()):
                if leave_after is not None and n >= leave_after:
                    self._count("left")
                    return
                if line.startswith("data: {"):
                    last = line
            data = json.loads(last[6:])
            if "error" in data:
                code = data["error"]["code"]
                self._count(code) if code in CLEAN else self.failures.append(code)
            else:
                self._count("completed")

    def pause(self, host: Host, timeout: float = 30) -> None:
        """Stop sending, and wait until the host has no session open."""
        self.running.clear()
        deadline = time.monotonic() + timeout
        while host.live_sessions():
            if time.monotonic() > deadline:
                raise SystemExit("sessions stayed open after the clients stopped")
            time.sleep(0.1)
        time.sleep(1.0)

    def finish(self) -> None:
        self.stop.set()
        self.running.set()
        for thread in self.threads:
            thread.join(30)


def quiet_sample(host: Host, load: Load) -> dict[str, float]:
    load.pause(host)
    # The parent's pooled connections to its worker expire after 5 idle seconds and are pruned
    # on the next request: wait, then send one, so both quiet moments see the same small pool.
    time.sleep(6)
    with host.http() as http:
        http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})
    time.sleep(0.5)
    samples = [host.sample() for _ in range(3) if not time.sleep(0.2)]
    worker_pid, worker_rss = host.worker_rss_mb()
    return {
        "rss_mb": statistics.median(s["rss_mb"] for s in samples),
        "fds": min(s["fds"] for s in samples),
        "worker_pid": worker_pid,
        "worker_rss_mb": worker_rss,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="mlx-lm model directory (default: the tiny demo model)")
    duration = parser.add_mutually_exclusive_group()
    duration.add_argument("--minutes", type=float, default=None)
    duration.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--kill-every", type=float, default=30.0, help="seconds between worker kills (0: none)")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before the baseline")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--rss-limit", type=float, default=RSS_GROWTH_LIMIT,
        help="allowed RSS growth from the baseline (default 0.05; short runs end while the host's "
        "bounded buffers, such as its event ring, are still filling)",
    )
    parser.add_argument(
        "--worker-rss-limit", type=float, default=WORKER_RSS_GROWTH_LIMIT,
        help="allowed growth of the worker's RSS from the baseline, when no kill replaced it (default 0.10)",
    )
    parser.add_argument("--fresh-tokens", type=int, default=0, help="every other request: N fresh token ids")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    seconds = args.seconds if args.seconds is not None else 60 * (args.minutes or 10)
    model = args.model or cached_model("bench-tiny")

    host = Host(model)
    load = Load(host, args.concurrency, args.seed, args.fresh_tokens)
    samples: list[dict[str, float]] = []
    kills = 0
    try:
        load.start()
        began = time.monotonic()
        time.sleep(args.warmup)
        baseline = quiet_sample(host, load)
        load.running.set()
        print(f"baseline after {args.warmup:g}s warm-up: RSS {baseline['rss_mb']:.1f} MB, {baseline['fds']} fds")
        next_kill = time.monotonic() + args.kill_every
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(2.0, max(0.0, end - time.monotonic())))
            samples.append(host.sample())
            if args.kill_every and time.monotonic() >= next_kill:
                if (pid := host.worker_pid()) is not None:
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
                next_kill = time.monotonic() + args.kill_every
            latest = samples[-1]
            print(
                f"  t+{latest['t'] - began:6.0f}s  parent RSS {latest['rss_mb']:6.1f} MB  fds {latest['fds']:4.0f}  "
                f"kills {kills}  {dict(sorted(load.outcomes.items()))}",
                flush=True,
            )
        final = quiet_sample(host, load)
    finally:
        load.finish()
        exit_code = host.stop()

    growth = final["rss_mb"] / baseline["rss_mb"] - 1
    fd_growth = final["fds"] - baseline["fds"]
    same_worker = baseline["worker_pid"] is not None and baseline["worker_pid"] == final["worker_pid"]
    worker_growth = (
        final["worker_rss_mb"] / baseline["worker_rss_mb"] - 1
        if same_worker and final["worker_rss_mb"] and baseline["worker_rss_mb"]
        else None
    )
    verdict = {
        "rss_ok": growth <= args.rss_limit,
        # A worker that a kill replaced started again from nothing: no growth to compare.
        "worker_rss_ok": worker_growth is None or worker_growth <= args.worker_rss_limit,
        "fds_ok": fd_growth <= 0,
        "clients_ok": not load.failures,
        "host_exit_ok": exit_code == 0,
    }
    report = {
        "seconds": seconds,
        "concurrency": args.concurrency,
        "kills": kills,
        "outcomes": load.outcomes,
        "failures": load.failures[:20],
        "baseline": baseline,
        "final": final,
        "rss_growth": round(growth, 4),
        "worker_rss_growth": None if worker_growth is None else round(worker_growth, 4),
        "fd_growth": fd_growth,
        "host_exit": exit_code,
        "verdict": verdict,
        "samples": samples,
    }
    print(
        f"final: RSS {final['rss_mb']:.1f} MB ({growth:+.1%}, limit +{args.rss_limit:.0%}), "
        f"{final['fds']} fds ({fd_growth:+d}); worker RSS "
        + (f"{final['worker_rss_mb']:.1f} MB ({worker_growth:+.1%}, limit +{args.worker_rss_limit:.0%})"
           if worker_growth is not None else "not compared (a kill replaced the worker)")
        + f"; {kills} kills; outcomes {dict(sorted(load.outcomes.items()))}; "
        f"failures {len(load.failures)}; host exit {exit_code}"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    ok = all(verdict.values())
    print("PASS" if ok else f"FAIL: {[k for k, v in verdict.items() if not v]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
