"""The report: the text printed at the end of a run (the table of the four paths, the targets,
then each measurement's section), and the JSON document written with --json.

The JSON's layout is the records' (`bench.results`, whose docstring documents it).
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass

import mlx.core as mx
import mlx_lm

from bench.cancel import CANCEL_STEPS_TARGET, print_cancel
from bench.constrained import print_constrained
from bench.event_latency import EVENT_LATENCY_P95_TARGET_MS, print_event_latency
from bench.figures import print_table
from bench.hosts import server_options
from bench.hub import HUB_EVENTS_PER_S_TARGET
from bench.lagging import LAGGING_RATIO_TARGET, print_lagging
from bench.memory import PARENT_RSS_TARGET_MB, parent_rss_ok, print_memory
from bench.overload import (
    ADMITTED_RATIO_TARGET,
    REJECT_P99_TARGET_MS,
    overload_options,
    print_overload,
)
from bench.plan import Plan
from bench.recovery import print_recovery
from bench.results.document import BenchDocument, RecoveryTargets, Targets
from bench.results.measurements import (
    CancelSummary,
    EventLatency,
    EventsSummary,
    OverloadSummary,
    RecoverySummary,
)
from bench.results.parts import AgentSummary, ClosedLoopSummary, JobsSummary
from bench.results.serving import (
    ByPath,
    Info,
    Machine,
    PartSettings,
    PathSummary,
    Percentiles,
    Ratios,
    RunSettings,
    ServerOptions,
    SpeedTargets,
    TTFTByPath,
    TTFTFigures,
    Versions,
)
from bench.run import Measured
from bench.settings import LABELS, PATHS, PREFILL_BATCH, REPO_ROOT, SERVED
from bench.targets import CONSTRAINED_VS_FREE_MIN, c1_figure, path_ratios, print_targets
from bench.throughput import Row


def machine_info() -> Machine:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return Machine(
        platform=platform.platform(),
        machine=platform.machine(),
        processor=platform.processor() or None,
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        mlx_device=str(mx.default_device()),
        load_average_at_start=[round(x, 2) for x in load] if load else None,
    )


def versions() -> Versions:
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = None
    return Versions(mlx=mx.__version__, mlx_lm=mlx_lm.__version__, mlxhost_commit=commit)


def print_header(plan: Plan, info: Info) -> None:
    """The machine, the versions, the model and the prompt."""
    machine, model, version = info.machine, info.model, info.versions
    print(
        f"machine: {machine.platform}, {machine.cpu_count} CPUs, "
        f"mlx device {machine.mlx_device}, "
        f"load average at start {machine.load_average_at_start}"
    )
    print(
        f"versions: mlx {version.mlx}, mlx-lm {version.mlx_lm}, "
        f"mlxhost {version.mlxhost_commit}"
    )
    print(f"model: {model.path} (size {model.size}, {model.parameters:,} parameters)")
    print(
        f"prompt: {model.prompt_tokens} tokens, greedy, max_tokens {plan.max_tokens}, "
        f"repeats {plan.repeats} (medians), concurrency {','.join(map(str, plan.concurrency))}"
    )


def print_report(plan: Plan, info: Info, rows: list[Row], measured: Measured, figures: Figures) -> None:
    """Everything but the admin event stream (`print_events`) and the jobs (`bench.jobs`)."""
    print_header(plan, info)
    print()
    header = (
        "measurement", "raw", "mlx_lm.server", "in-process", "isolated", "in-proc/raw",
        "isolated/raw", "isolated/mlx_lm.server",
        "tokens/stream raw / mlx_lm.server / in-proc / isolated",
    )  # fmt: skip
    lines = [
        (
            row.label,
            *(f"{row.values[path]:.1f}" for path in PATHS),
            f"{row.ratio('in_process'):.3f}",
            f"{row.ratio('isolated'):.3f}",
            f"{row.ratio('isolated', 'mlx_lm_server'):.3f}",
            row.tokens,
        )
        for row in rows
    ]
    print_table(header, lines, ["<", *">" * 7, "<"])
    print()
    print(
        "ratio = path / base: above 1 is better for tok/s rows, worse for TTFT. TTFT c1: every "
        "single-stream request (the c1 runs and the TTFT requests); cN: every stream of the cN "
        "runs, from its own start."
    )
    print_servers(measured)
    print_targets(figures.targets)
    print_memory(measured.memory)
    print_recovery(figures.recovery)
    print_constrained(measured.constrained)
    print_cancel(figures.cancel)
    print_overload(figures.overload)


def print_servers(measured: Measured) -> None:
    """How mlx_lm.server ran, and what every server served from its prompt cache."""
    peer = measured.mlx_lm_server
    cached = ", ".join(
        f"{tokens} tokens x{count}" for tokens, count in peer.cached_prompt_tokens.items()
    )
    how = (
        "as shipped"
        if peer.as_shipped
        else "its own main(), the listen backlog raised from socketserver's 5"
    )
    print(
        f"mlx_lm.server: {how} (listen backlog {peer.listen_backlog}); options "
        f"{' '.join(peer.options)}; start to first answer {peer.ready_s:.2f} s; prompt "
        f"tokens served from its prompt cache (usage cached_tokens), by request: {cached or '?'}"
    )
    for name in SERVED:
        by_request = measured.cached_prompt_tokens.get(name) or {}
        listed = ", ".join(f"{tokens} tokens x{count}" for tokens, count in by_request.items())
        print(f"{LABELS[name]}: prompt tokens served from its prompt cache, by request: {listed or '?'}")
    for name, retries in measured.stream_retries.items():
        if retries:
            listed = ", ".join(f"{kind} x{count}" for kind, count in retries.items())
            print(
                f"{LABELS[name]}: streams tried again after their connection failed before the "
                f"response head: {listed} (the time counts from the first try)"
            )


def print_events(latency: EventLatency, events: EventsSummary) -> None:
    print_event_latency(latency)
    print_lagging(events)


def part_settings(plan: Plan) -> PartSettings:
    """A --*-only run's settings."""
    return PartSettings(
        max_tokens=plan.max_tokens,
        repeats=plan.repeats,
        concurrency=plan.concurrency,
        temperature=0.0,
        max_batch=plan.max_batch,
        quick=plan.quick,
        only=plan.only,
        jobs_only=plan.jobs_only,
    )


@dataclass(frozen=True)
class Figures:
    """The summaries of the main run's measurements, made from `Measured` (`bench.cli`)."""

    targets: SpeedTargets
    recovery: RecoverySummary
    cancel: CancelSummary
    overload: OverloadSummary
    event_latency: EventLatency
    events: EventsSummary


def bench_document(
    plan: Plan,
    info: Info,
    summaries: dict[str, PathSummary],
    measured: Measured,
    figures: Figures,
    chart: str | None,
    parts: tuple[JobsSummary, ClosedLoopSummary, AgentSummary],
) -> BenchDocument:
    """A whole run's document (--json)."""
    jobs, closed_loop, agent = parts
    memory, constrained = measured.memory, measured.constrained
    recovery, cancel, overload = figures.recovery, figures.cancel, figures.overload

    def ttft_of(figure: str) -> TTFTByPath:
        return TTFTByPath(**{path: c1_figure(summaries[path], figure) for path in PATHS})

    return BenchDocument(
        machine=info.machine,
        versions=info.versions,
        model=info.model,
        settings=RunSettings(
            max_tokens=plan.max_tokens,
            repeats=plan.repeats,
            concurrency=plan.concurrency,
            temperature=0.0,
            max_batch=plan.max_batch,
            prefill_batch=PREFILL_BATCH,
            server_options=ServerOptions(
                **{name: server_options(name, plan) for name in SERVED},
                mlx_lm_server=measured.mlx_lm_server.options,
                overload=overload_options(),
            ),
            ttft_requests=plan.ttft_requests,
            ttft_max_tokens=measured.ttft_max_tokens,
        ),
        results=summaries,
        ratios=Ratios(
            isolated_vs_raw=path_ratios(summaries, "isolated", "raw"),
            isolated_vs_mlx_lm_server=path_ratios(summaries, "isolated", "mlx_lm_server"),
            in_process_vs_raw=path_ratios(summaries, "in_process", "raw"),
            in_process_vs_mlx_lm_server=path_ratios(summaries, "in_process", "mlx_lm_server"),
            mlx_lm_server_vs_raw=path_ratios(summaries, "mlx_lm_server", "raw"),
            isolated_vs_in_process=path_ratios(summaries, "isolated", "in_process"),
        ),
        ttft_ms=TTFTFigures(
            p50=ttft_of("ttft_ms_p50"),
            p95=ttft_of("ttft_ms_p95"),
            count=ByPath(**{path: c1_figure(summaries[path], "ttft_samples") for path in PATHS}),
            by_concurrency={
                path: {key: Percentiles(f.ttft_ms_p50, f.ttft_ms_p95) for key, f in summaries[path].items()}
                for path in PATHS
            },
        ),
        mlx_lm_server=measured.mlx_lm_server,
        stream_retries=measured.stream_retries,
        cached_prompt_tokens=measured.cached_prompt_tokens,
        rss_mb=memory,
        recovery=recovery,
        constrained=constrained,
        cancel=cancel,
        overload=overload,
        targets=Targets(
            speed=figures.targets,
            parent_rss_mb_max=PARENT_RSS_TARGET_MB,
            parent_rss_ok=parent_rss_ok(memory),
            recovery=RecoveryTargets.of(recovery),
            constrained_vs_free_min=CONSTRAINED_VS_FREE_MIN,
            constrained_ok=constrained.meets_target,
            cancel_steps_max=CANCEL_STEPS_TARGET,
            cancel_ok=cancel.meets_target,
            reject_ms_p99_below=REJECT_P99_TARGET_MS,
            reject_ok=overload.reject_ok,
            admitted_vs_unloaded_min=ADMITTED_RATIO_TARGET,
            admitted_ok=overload.admitted_ok,
            event_latency_p95_ms_max=EVENT_LATENCY_P95_TARGET_MS,
            event_latency_ok=figures.event_latency.meets_target,
            hub_events_per_s_min=HUB_EVENTS_PER_S_TARGET,
            hub_ok=figures.events.hub_ok,
            lagging_subscriber_ratio_min=LAGGING_RATIO_TARGET,
            lagging_ok=figures.events.lagging_ok,
            jobs=jobs.targets(),
            closed_loop=closed_loop.targets(),
            agent=agent.targets(),
        ),
        server_engine_statistics=measured.server_engines,
        prompt_tokens_served=measured.prompt_tokens,
        chart=chart,
        event_latency=figures.event_latency,
        events=figures.events,
        jobs=jobs,
        closed_loop=closed_loop,
        agent=agent,
    )
