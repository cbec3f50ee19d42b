"""One run of every measurement, in the order that keeps them from disturbing each other: the
servers start one after the other (each loads on a quiet machine); throughput and TTFT on all four
paths; memory, with the servers idle; then mlx_lm.server stops, and on the isolated server
constrained decoding (then grammar compiles in this process), cancellation, event latency and the
lagging subscriber (all before any kill), recovery (the kills, with a subscriber timing each
worker.exited); then overload on a server of its own, and the worker's import time. The managed
jobs (`bench.jobs`, on a server of their own) and the hub alone run after this, from `bench.cli`,
with every server stopped.

The three servers run side by side in subprocesses, driven over HTTP (see `bench.streams`). The
mlxhost servers run with the same serving options, and with --max-active at least the highest
concurrency (see `bench.hosts.server_options`), so that no stream of a cN run waits in the
parent's queue.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from bench import hosts
from bench.cancel import CancelRun, cancel_max_tokens, cancel_once, describe_cancel
from bench.constrained import CONSTRAINED_STREAMS, constrained_summary, measure_constrained
from bench.event_latency import measure_event_latency, worker_exits
from bench.figures import percentile, progress
from bench.health import isolated_worker
from bench.lagging import LAGGING_MIN_ROUNDS, LAGGING_TOKENS_FACTOR, HubRun, measure_hub_ratio
from bench.memory import measure_memory
from bench.mlx_lm_server import start_mlx_lm_server
from bench.overload import OverloadRun, measure_overload
from bench.plan import Plan
from bench.raw import RawMLX
from bench.recovery import Recovery, describe_recovery, recover_once, worker_import_s
from bench.results.measurements import ConstrainedSummary
from bench.results.serving import Memory, Peer
from bench.runs import Measurements
from bench.settings import HTTP_PATHS, LABELS, PATHS, REQUEST_TIMEOUT_S, SERVED
from bench.streams import HTTPBench
from bench.throughput import Paths, measure_throughput, warm_up_http, warm_up_raw
from bench.ttft import measure_ttft
from bench.watcher import EventSample, watching


@dataclass(frozen=True)
class Measured:
    """What `measure` hands to the report: the runs as measured, and the few summaries it made."""

    results: dict[str, Measurements]  # by path
    prompt_tokens: dict[str, int]  # by HTTP path: usage.prompt_tokens of the prompt
    stream_retries: dict[str, dict[str, int]]  # by HTTP path: streams tried again, by what failed
    # Every server's usage.prompt_tokens_details.cached_tokens (its prompt cache) to how many
    # requests reported it; raw mlx-lm has no prompt cache and prefills every prompt.
    cached_prompt_tokens: dict[str, dict[str, int]]
    mlx_lm_server: Peer
    ttft_max_tokens: int
    server_engines: dict[str, Any]  # each mlxhost server's engine counters, as its /health has them
    memory: Memory
    recoveries: list[Recovery]
    cancels: list[CancelRun]
    cancel_max_tokens: int
    overloads: list[OverloadRun]
    constrained: ConstrainedSummary
    worker_import_s: float
    in_process_load_s: float | None
    event_samples: list[EventSample]
    event_types: dict[str, int]
    event_error: str | None
    exit_samples: list[EventSample]
    exits_missing: int
    hub_runs: list[HubRun]
    hub_max_tokens: int


async def measure(
    plan: Plan, raw: RawMLX, prompt: str, ids: list[int], servers_stack: contextlib.ExitStack
) -> Measured:
    """Everything but the report. The servers go on `servers_stack`, which the caller closes."""
    results = {name: Measurements() for name in PATHS}
    top = max(plan.concurrency)
    warm_up_raw(raw, ids, plan)

    servers: dict[str, hosts.Host] = {}
    for name in SERVED:  # one after the other, so that each loads on a quiet machine
        progress(f"{LABELS[name]}: starting the server")
        options = hosts.server_options(name, plan)
        server = await anyio.to_thread.run_sync(
            hosts.start, name, plan.model_path, plan.max_batch, options
        )
        servers[name] = servers_stack.enter_context(hosts.running(server))
    progress(f"{LABELS['mlx_lm_server']}: starting the server")
    peer = await anyio.to_thread.run_sync(
        start_mlx_lm_server, plan.model_path, plan.max_batch, plan.max_tokens,
        plan.mlx_lm_server_backlog, prompt,
    )  # fmt: skip
    # Stopped after the memory readings (below), or by the caller's stack on an error.
    servers_stack.callback(peer.stop)
    urls = {"mlx_lm_server": peer.url, **{name: server.url for name, server in servers.items()}}

    # Enough connections for the constrained runs' streams too, all at once.
    connections = max(top, CONSTRAINED_STREAMS) + 4
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    async with contextlib.AsyncExitStack() as clients:
        http: dict[str, HTTPBench] = {}
        for name in HTTP_PATHS:
            client = httpx.AsyncClient(base_url=urls[name], timeout=timeout, limits=limits)
            client = await clients.enter_async_context(client)
            http[name] = HTTPBench(client, prompt, plan.max_tokens)
            progress(f"{LABELS[name]}: ready on {urls[name]}; warming up")
            await warm_up_http(http[name], plan)

        paths = Paths(raw, ids, http, results)
        await measure_throughput(plan, paths)
        ttft_tokens = await measure_ttft(plan, paths)

        # Memory, after the throughput runs and before any kill.
        isolated = http["isolated"].client
        worker = await isolated_worker(isolated)
        pids = {
            "parent": servers["isolated"].pid,
            "in_process": servers["in_process"].pid,
            "mlx_lm_server": peer.pid,
        }
        memory, engines = await measure_memory(worker, http["in_process"].client, pids)
        # The peer is done: it would only take memory (and its log thread CPU) from here on.
        await anyio.to_thread.run_sync(peer.stop)

        # Constrained decoding, on the isolated server after the memory readings (the worker's
        # grammars would add to its RSS) and before any kill; then grammar compiles, here.
        progress("constrained decoding: free runs and mixed runs on the isolated server")
        constrained = await measure_constrained(isolated, servers["isolated"].pid, prompt, plan, raw)

        # Cancellation, on the isolated server's first worker (before any kill).
        cancel_tokens = cancel_max_tokens(plan.size)
        cancels: list[CancelRun] = []
        for repeat in range(plan.repeats):
            cancel = await cancel_once(isolated, worker["socket"], prompt, cancel_tokens)
            cancels.append(cancel)
            progress(f"  cancel {repeat + 1}/{plan.repeats}: {describe_cancel(cancel)}")

        # The admin event stream, also before any kill: event latency, then generation with and
        # without a lagging subscriber.
        isolated_url = str(isolated.base_url)
        event_samples, event_types, event_error = await measure_event_latency(
            isolated, isolated_url, prompt
        )
        latencies = [s.latency_ms for s in event_samples]
        progress(
            f"  event latency: {len(latencies)} events, p50 {percentile(latencies, 50):.1f} ms, "
            f"p95 {percentile(latencies, 95):.1f} ms, max {max(latencies, default=math.nan):.1f} ms"
        )
        hub_tokens = plan.max_tokens * LAGGING_TOKENS_FACTOR
        hub_rounds = plan.rounds(LAGGING_MIN_ROUNDS)
        hub_runs = await measure_hub_ratio(isolated, isolated_url, prompt, hub_tokens, hub_rounds)

        # Recovery, with a subscriber that times each kill's worker.exited event.
        recoveries: list[Recovery] = []
        kills: list[tuple[int, float]] = []
        async with watching(isolated_url) as exit_watcher:
            for repeat in range(plan.repeats):
                run = await recover_once(servers["isolated"], isolated, prompt, kills)
                recoveries.append(run)
                progress(f"  recovery {repeat + 1}/{plan.repeats}: {describe_recovery(run)}")
            exit_samples, exits_missing = await worker_exits(exit_watcher, kills)

    overloads = await measure_overload(plan, prompt)
    imports_s = worker_import_s()
    return Measured(
        results=results,
        prompt_tokens={name: http[name].prompt_tokens for name in HTTP_PATHS},
        stream_retries={name: dict(http[name].retries) for name in HTTP_PATHS},
        cached_prompt_tokens={
            name: {str(k): v for k, v in sorted(http[name].cached_tokens.items())} for name in HTTP_PATHS
        },
        mlx_lm_server=Peer(
            command=peer.command,
            options=peer.command[peer.command.index("--model") :],
            listen_backlog=peer.backlog,
            as_shipped=not plan.mlx_lm_server_backlog,
            ready_s=peer.ready_s,
            cached_prompt_tokens={
                str(k): v for k, v in sorted(http["mlx_lm_server"].cached_tokens.items())
            },
        ),
        ttft_max_tokens=ttft_tokens,
        server_engines=engines,
        memory=memory,
        recoveries=recoveries,
        cancels=cancels,
        cancel_max_tokens=cancel_tokens,
        overloads=overloads,
        constrained=constrained_summary(constrained, plan.max_tokens),
        worker_import_s=imports_s,
        in_process_load_s=servers["in_process"].load_s,
        event_samples=event_samples,
        event_types=event_types,
        event_error=event_error,
        exit_samples=exit_samples,
        exits_missing=exits_missing,
        hub_runs=hub_runs,
        hub_max_tokens=hub_tokens,
    )
