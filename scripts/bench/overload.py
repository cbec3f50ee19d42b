"""Overload: what a parent that is full costs the requests it admitted, and how fast it refuses.

A separate isolated server with --max-active 4 --max-queued 4, max(--repeats, 3) rounds of two
runs, in alternating order. Each run: 4 streams of 4 x max_tokens, all admitted (the parent's
/health polled until admission.active is 4), total tok/s from their start to the last end.
Unloaded: nothing else. Overloaded: from then until the first admitted stream ends, 8 more clients
(each on its own keep-alive connection, speaking raw HTTP/1.1, see `bench.raw_http`), each sending
a non-streaming request with max_tokens 1 and, after a 429, the next one 20 ms (+-50%) later: 4 of
them wait in the queue, the other 4 keep drawing 429s (about 150-200 a second). Then the
unanswered ones (the queued) close their connections, which takes them out of the queue; with
max_tokens 1, one admitted in between costs the streams one short prefill. reject_ms is request
sent to the whole 429 read, client side; each 429 is checked for Retry-After, x-mlxhost-session
and error type/code. CPU seconds of the parent, the worker and this process are recorded per run.
Targets: reject_ms p99 < 5 ms; admitted_vs_unloaded (median overloaded tok/s / median unloaded)
>= 0.95.
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
from dataclasses import dataclass

import anyio
import httpx

from bench import hosts
from bench.figures import median, percentile, progress, ratio, verdict
from bench.health import isolated_worker, wait_admission
from bench.plan import Plan
from bench.processes import CPUClock, cores_used, describe_cores
from bench.raw_http import ERRORS, RawHTTP, prepared_post
from bench.results.measurements import (
    CoresByLoad,
    OverloadSettings,
    OverloadSummary,
    RejectLatency,
    TokSByLoad,
)
from bench.runs import BatchRun, StreamRun, describe_batch
from bench.settings import REQUEST_TIMEOUT_S, alternating
from bench.streams import CHAT_PATH, HTTPBench, chat_body, gather

OVERLOAD_MAX_ACTIVE = 4
OVERLOAD_MAX_QUEUED = 4
OVERLOAD_EXTRA = 8
OVERLOAD_REFILL_S = 0.02
OVERLOAD_REFILL_JITTER = 0.5
OVERLOAD_TOKENS_FACTOR = 4  # the admitted streams' max_tokens: this many times --max-tokens
OVERLOAD_MIN_ROUNDS = 3  # rounds (one unloaded and one overloaded run each), even with --quick
REJECT_P99_TARGET_MS = 5.0
ADMITTED_RATIO_TARGET = 0.95


@dataclass(frozen=True)
class OverloadRun:
    """OVERLOAD_MAX_ACTIVE admitted streams, with or without extra requests alongside."""

    overloaded: bool
    admitted: BatchRun
    reject_ms: list[float]  # each 429: request sent to the whole response read
    extra: dict[str, int]  # the extra requests by how they ended
    extra_s: float  # how long extra requests were fired
    rejected_by_parent: int  # the parent's admission.rejected, the change over the run
    cpu_s: dict[str, float]  # CPU seconds over the run: parent, worker, client (this process)
    problems: dict[str, int]  # what 429s lacked of what the server promises, and how many

    @property
    def admitted_tok_s(self) -> float:
        return self.admitted.total_tok_s

    @property
    def rejects_per_s(self) -> float:
        return len(self.reject_ms) / self.extra_s if self.extra_s > 0 else float("nan")


def overload_options() -> list[str]:
    return [f"--max-active={OVERLOAD_MAX_ACTIVE}", f"--max-queued={OVERLOAD_MAX_QUEUED}"]


def check_refusal(headers: dict[str, str], content: bytes) -> list[str]:
    """What a 429 lacks of what the server promises.

    No `x-mlxhost-session`: a request turned away at the door never becomes a session (README,
    "Load, cancellation and shutdown").
    """
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    return [
        what
        for what, ok in (
            ("Retry-After", "retry-after" in headers),
            ("type resource_admission", error.get("type") == "resource_admission"),
            ("code queue_full", error.get("code") == "queue_full"),
        )
        if not ok
    ]


async def overload_once(
    client: httpx.AsyncClient,
    prompt: str,
    max_tokens: int,
    overloaded: bool,
    pids: dict[str, int],
    rng: random.Random,
) -> OverloadRun:
    """OVERLOAD_MAX_ACTIVE streams of `max_tokens`, all admitted at once; with `overloaded`, from
    the moment they all run until the first of them ends, OVERLOAD_EXTRA more clients, each
    sending a request (max_tokens 1) and, after a 429, sending the next one OVERLOAD_REFILL_S
    later (jittered +-50%): OVERLOAD_MAX_QUEUED of them wait in the queue, the others get 429 in
    turn. When the first admitted stream ends the clients still waiting for an answer (the
    queued ones) close their connections, which takes their sessions out of the queue; one
    admitted in between costs the remaining streams one short prefill."""
    idle = await wait_admission(client, lambda s: s["active"] == 0 and s["queued"] == 0)
    bench = HTTPBench(client, prompt, max_tokens)
    first_done = anyio.Event()
    runs: list[StreamRun] = []
    reject_ms: list[float] = []
    extra: collections.Counter[str] = collections.Counter()
    problems: collections.Counter[str] = collections.Counter()
    host, port, payload = prepared_post(
        str(client.base_url), CHAT_PATH, chat_body(prompt, 1, stream=False)
    )
    connections = [RawHTTP(host, port) for _ in range(OVERLOAD_EXTRA)] if overloaded else []
    for connection in connections:
        await connection.connect()  # before the clock starts

    async def admitted() -> None:
        try:
            runs.append(await bench.stream())
        finally:
            first_done.set()

    async def extra_client(connection: RawHTTP) -> None:
        while not first_done.is_set():
            began = time.perf_counter()
            try:
                status, headers, content = await connection.request(payload)
            except anyio.get_cancelled_exc_class():
                extra["closed unanswered (queued)"] += 1
                raise
            except ERRORS as exc:
                extra[type(exc).__name__] += 1
            else:
                extra[str(status)] += 1
                if status == 429:
                    reject_ms.append((time.perf_counter() - began) * 1e3)
                    missing = check_refusal(headers, content)
                    if missing:
                        problems[f"429s without {', '.join(missing)}"] += 1
            jitter = rng.uniform(1 - OVERLOAD_REFILL_JITTER, 1 + OVERLOAD_REFILL_JITTER)
            with anyio.move_on_after(OVERLOAD_REFILL_S * jitter):
                await first_done.wait()

    clock = CPUClock(pids)
    start = time.perf_counter()
    extra_s = 0.0
    try:
        async with anyio.create_task_group() as streams:
            for _ in range(OVERLOAD_MAX_ACTIVE):
                streams.start_soon(admitted)
            # Both kinds of run poll the parent alike, until all the streams are running.
            await wait_admission(
                client, lambda s: s["active"] >= OVERLOAD_MAX_ACTIVE or first_done.is_set()
            )
            if overloaded:
                fired = time.perf_counter()
                async with anyio.create_task_group() as clients:
                    for connection in connections:
                        clients.start_soon(extra_client, connection)
                    await first_done.wait()
                    extra_s = time.perf_counter() - fired
                    # Those waiting for an answer close their connections.
                    clients.cancel_scope.cancel()
    finally:
        for connection in connections:
            await connection.aclose()
    wall = time.perf_counter() - start
    cpu_s = clock.elapsed()
    after = await wait_admission(client, lambda s: s["active"] == 0 and s["queued"] == 0)
    return OverloadRun(
        overloaded=overloaded,
        admitted=BatchRun([run.tokens for run in runs], wall),
        reject_ms=reject_ms,
        extra=dict(extra),
        extra_s=extra_s,
        rejected_by_parent=after["rejected"] - idle["rejected"],
        cpu_s=cpu_s,
        problems=dict(problems),
    )


def describe_overload(run: OverloadRun) -> str:
    wall = run.admitted.wall_s
    cores = describe_cores({name: seconds / wall for name, seconds in run.cpu_s.items()})
    text = f"admitted {describe_batch(run.admitted)}; CPU cores used: {cores}"
    if run.overloaded:
        text += (
            f"; {len(run.reject_ms)} 429s in {run.extra_s:.2f} s "
            f"(p50 {percentile(run.reject_ms, 50):.2f} ms, p99 {percentile(run.reject_ms, 99):.2f} "
            f"ms), extra requests {run.extra}, parent counted {run.rejected_by_parent} rejected"
        )
    return text


async def measure_overload(plan: Plan, prompt: str) -> list[OverloadRun]:
    """A separate isolated server with --max-active 4 --max-queued 4 (see OVERLOAD_*)."""
    max_tokens = plan.max_tokens * OVERLOAD_TOKENS_FACTOR
    rounds = plan.rounds(OVERLOAD_MIN_ROUNDS)
    options = overload_options()
    progress("overload: starting an isolated server with " + " ".join(options))
    server = await anyio.to_thread.run_sync(
        hosts.start, "overload", plan.model_path, plan.max_batch, options
    )
    with hosts.running(server):
        connections = OVERLOAD_MAX_ACTIVE + 4
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(
            base_url=server.url, timeout=httpx.Timeout(REQUEST_TIMEOUT_S), limits=limits
        ) as client:
            worker = await isolated_worker(client)
            pids = {"parent": server.pid, "worker": int(worker["pid"]), "client": os.getpid()}
            # Warm-up: a stream, then one burst past capacity (4 run, 4 wait, the rest get 429),
            # which also opens the pooled connections.
            await HTTPBench(client, prompt, plan.max_tokens).stream()
            burst = chat_body(prompt, 1, stream=False)
            await gather(
                [lambda: client.post(CHAT_PATH, json=burst)] * (OVERLOAD_MAX_ACTIVE + OVERLOAD_EXTRA)
            )
            rng = random.Random(0)
            runs: list[OverloadRun] = []
            for number, overloaded in alternating(rounds):
                run = await overload_once(client, prompt, max_tokens, overloaded, pids, rng)
                runs.append(run)
                kind = "overloaded" if overloaded else "unloaded"
                progress(f"  overload {number + 1}/{rounds} {kind}: {describe_overload(run)}")
    return runs


def overload_summary(runs: list[OverloadRun], max_tokens: int) -> OverloadSummary:
    unloaded_runs = [r for r in runs if not r.overloaded]
    loaded_runs = [r for r in runs if r.overloaded]
    unloaded = [r.admitted.total_tok_s for r in unloaded_runs]
    overloaded = [r.admitted.total_tok_s for r in loaded_runs]
    rejects = [ms for r in loaded_runs for ms in r.reject_ms]
    extra: collections.Counter[str] = collections.Counter()
    for r in loaded_runs:
        extra.update(r.extra)
    admitted_ratio = ratio(median(overloaded), median(unloaded))
    p99 = percentile(rejects, 99)
    # Round by round: each round has one run of each kind, next to each other.
    pairs = list(zip(unloaded, overloaded, strict=False))
    empty: collections.Counter[str] = collections.Counter()

    def cores(kind: list[OverloadRun]) -> dict[str, float]:
        return cores_used([(r.cpu_s, r.admitted.wall_s) for r in kind])

    # The parent's CPU for the refusals: what it used beyond its unloaded run, per 429.
    def parent_cores(run: OverloadRun) -> float:
        return run.cpu_s["parent"] / run.admitted.wall_s

    per_reject = [
        ratio(
            (parent_cores(over) - parent_cores(unl)) * over.admitted.wall_s * 1e3,
            len(over.reject_ms),
        )
        for unl, over in zip(unloaded_runs, loaded_runs, strict=False)
    ]
    return OverloadSummary(
        reject_ms=RejectLatency(
            p50=percentile(rejects, 50), p99=p99, max=max(rejects, default=float("nan")), count=len(rejects)
        ),
        admitted_vs_unloaded=admitted_ratio,
        admitted_vs_unloaded_by_round=[ratio(o, u) for u, o in pairs],
        admitted_tok_s=TokSByLoad(unloaded=median(unloaded), overloaded=median(overloaded)),
        rejects_per_s=median([r.rejects_per_s for r in loaded_runs]),
        extra_requests=dict(extra),
        cpu_cores=CoresByLoad(unloaded=cores(unloaded_runs), overloaded=cores(loaded_runs)),
        parent_cpu_ms_per_429=median(per_reject),
        rejected_by_parent=sum(r.rejected_by_parent for r in loaded_runs),
        problems=dict(sum((collections.Counter(r.problems) for r in runs), empty)),
        reject_ok=None if not rejects else p99 < REJECT_P99_TARGET_MS,
        admitted_ok=admitted_ratio >= ADMITTED_RATIO_TARGET,
        settings=OverloadSettings(
            server_options=overload_options(),
            admitted_streams=OVERLOAD_MAX_ACTIVE,
            admitted_max_tokens=max_tokens,
            extra_in_flight=OVERLOAD_EXTRA,
            extra_max_tokens=1,
            refill_ms=OVERLOAD_REFILL_S * 1e3,
            refill_jitter=OVERLOAD_REFILL_JITTER,
            rounds=len(pairs),
        ),
        runs=runs,
    )


def print_overload(overload: OverloadSummary) -> None:
    settings = overload.settings
    reject, tok_s = overload.reject_ms, overload.admitted_tok_s
    print()
    print(
        f"overload (a separate isolated server with {' '.join(settings.server_options)}; "
        f"{settings.rounds} round(s) of one unloaded and one overloaded run, medians):"
    )
    print(
        f"  {settings.admitted_streams} admitted streams of max_tokens "
        f"{settings.admitted_max_tokens}; overloaded: meanwhile {settings.extra_in_flight} "
        f"more clients, each sending a request (max_tokens 1) and, after a 429, the next one "
        f"{settings.refill_ms:g} ms (+-50%) later, until the first admitted stream ends; then "
        "the ones still unanswered (queued) close their connections"
    )
    by_round = ", ".join(f"{r:.3f}" for r in overload.admitted_vs_unloaded_by_round)
    print(
        f"  admitted total tok/s: unloaded {tok_s.unloaded:.1f}, overloaded "
        f"{tok_s.overloaded:.1f}: admitted_vs_unloaded {overload.admitted_vs_unloaded:.3f} "
        f"(by round {by_round}): target >= {ADMITTED_RATIO_TARGET:g}: "
        f"{verdict(overload.admitted_ok)}"
    )
    print(
        f"  429 latency (request sent to the whole answer read, client side): p50 "
        f"{reject.p50:.2f} ms, p99 {reject.p99:.2f} ms, max {reject.max:.2f} ms over "
        f"{reject.count} (~{overload.rejects_per_s:.0f}/s): target p99 < "
        f"{REJECT_P99_TARGET_MS:g} ms: {verdict(overload.reject_ok)}"
    )
    extra = " ".join(f"{k}:{v}" for k, v in sorted(overload.extra_requests.items()))
    print(
        f"  extra requests: {extra}; the parent counted {overload.rejected_by_parent} "
        "rejected"
    )
    cpu = overload.cpu_cores
    print(
        f"  CPU cores used (of {os.cpu_count()}): unloaded {describe_cores(cpu.unloaded)}; "
        f"overloaded {describe_cores(cpu.overloaded)}; the parent's extra CPU per 429 "
        f"{overload.parent_cpu_ms_per_429:.2f} ms"
    )
    for problem, count in overload.problems.items():
        print(f"  problem: {count} {problem}")
