"""The report: the text printed at the end of a run (the table of the four paths, the targets,
then each measurement's section), and the JSON document written with --json.

JSON (--json): ratios.isolated_vs_raw, ratios.in_process_vs_raw, ratios.mlx_lm_server_vs_raw,
ratios.isolated_vs_mlx_lm_server and ratios.in_process_vs_mlx_lm_server (each with c1 = decode,
c1_e2e, ttft_p50, and cN = total tok/s), ratios.isolated_vs_in_process,
ttft_ms.{p50,p95}.{raw,mlx_lm_server,in_process,isolated} (with ttft_ms.count and
ttft_ms.by_concurrency.<path>.cN.{p50,p95}), results.{raw,mlx_lm_server,in_process,isolated},
mlx_lm_server (command, cached prompt tokens), rss_mb.{parent,worker,in_process,mlx_lm_server},
chart (the PNG's path, or null), recovery_s, worker_ready_s (medians) and recovery (model_load_s,
meets_target: recovery_s <= model load + 0.3 s, meets_ready_target: <= worker_ready_s + 1 s, runs:
each kill, split), constrained_vs_free (8 streams, 4 under a JSON schema, / 8 free: total tok/s),
grammar_compile_ms.{setup,cold,other,hit,tool,tokenizer} and constrained (tok/s, tokens and TTFT
by kind of stream, the compiler's own times, settings, runs), cancel_ms.{p50,max},
cancel_steps.{p50,max} and cancel (runs, per-step time, outcomes),
overload (reject_ms.{p50,p99,max,count}, admitted_vs_unloaded, admitted_tok_s, CPU, runs),
event_latency_ms.{p50,p95,max} (with by_type, publish_to_arrival_ms, worker_exited, samples),
events.hub_events_per_s and events.lagging_subscriber_ratio (with tok/s, CPU, events per run, what
the lagging subscriber got, hub_micro, runs), closed_loop (raw BatchGenerator and the isolated
server with finished rows replaced at once: by_concurrency.cN tok_s, ratios, cores, steps) with
closed_loop_tok_s, closed_loop_isolated_vs_raw_tokens_only, closed_loop_isolated_vs_raw_closed_loop
and closed_loop_client_cores, agent (the agent scenario: turns, mlxhost_vs_cold, hit_rate,
disk_bytes, events) with agent_ttft_vs_cold, agent_hit_rate and agent_disk_bytes,
finetune_vs_direct (a fine-tune's iterations/s as an
mlxhost job / mlx_lm.lora run directly) and serving_after_job_vs_before (total tok/s), with jobs
(settings, finetune, serving: every run), targets. With --jobs-only: the machine, versions, model,
a few settings, and the jobs' keys alone; likewise with --agent-only, --closed-loop-only and
--recovery-only, each part's own keys (`part_document`). For older readers ratios.mlxhost_vs_raw and
ttft_ms.p50.mlxhost remain, as aliases of the isolated figures; results.mlxhost is gone.
"""

from __future__ import annotations

import os
import platform
import subprocess
from typing import Any

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
from bench.recovery import READY_SLACK_S, RECOVERY_SLACK_S, print_recovery
from bench.settings import LABELS, PATHS, PREFILL_BATCH, REPO_ROOT, SERVED
from bench.targets import CONSTRAINED_VS_FREE_MIN, path_ratios, print_targets
from bench.throughput import Row


def machine_info() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "mlx_device": str(mx.default_device()),
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
    }


def versions() -> dict[str, str | None]:
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "mlxhost_commit": commit}


def print_header(plan: Plan, info: dict[str, Any]) -> None:
    """The machine, the versions, the model and the prompt."""
    machine, model, version = info["machine"], info["model"], info["versions"]
    print(
        f"machine: {machine['platform']}, {machine['cpu_count']} CPUs, "
        f"mlx device {machine['mlx_device']}, "
        f"load average at start {machine['load_average_at_start']}"
    )
    print(
        f"versions: mlx {version['mlx']}, mlx-lm {version['mlx_lm']}, "
        f"mlxhost {version['mlxhost_commit']}"
    )
    print(f"model: {model['path']} (size {model['size']}, {model['parameters']:,} parameters)")
    print(
        f"prompt: {model['prompt_tokens']} tokens, greedy, max_tokens {plan.max_tokens}, "
        f"repeats {plan.repeats} (medians), concurrency {','.join(map(str, plan.concurrency))}"
    )


def print_report(
    plan: Plan, info: dict[str, Any], rows: list[Row], measured: dict[str, Any], figures: dict[str, Any]
) -> None:
    """Everything but the admin event stream (`print_events`) and the jobs (`bench.jobs`). `figures`
    holds the summaries: recovery, startup, cancel, overload, targets."""
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
    print_targets(figures["targets"])
    print_memory(measured["memory"])
    print_recovery(figures["recovery"], figures["startup"])
    print_constrained(measured["constrained"])
    print_cancel(figures["cancel"])
    print_overload(figures["overload"])


def print_servers(measured: dict[str, Any]) -> None:
    """How mlx_lm.server ran, and what every server served from its prompt cache."""
    peer = measured["mlx_lm_server"]
    cached = ", ".join(
        f"{tokens} tokens x{count}" for tokens, count in peer["cached_prompt_tokens"].items()
    )
    how = (
        "as shipped"
        if peer["as_shipped"]
        else "its own main(), the listen backlog raised from socketserver's 5"
    )
    print(
        f"mlx_lm.server: {how} (listen backlog {peer['listen_backlog']}); options "
        f"{' '.join(peer['options'])}; start to first answer {peer['ready_s']:.2f} s; prompt "
        f"tokens served from its prompt cache (usage cached_tokens), by request: {cached or '?'}"
    )
    for name in SERVED:
        by_request = measured["cached_prompt_tokens"].get(name) or {}
        listed = ", ".join(f"{tokens} tokens x{count}" for tokens, count in by_request.items())
        print(f"{LABELS[name]}: prompt tokens served from its prompt cache, by request: {listed or '?'}")
    for name, retries in measured["stream_retries"].items():
        if retries:
            listed = ", ".join(f"{kind} x{count}" for kind, count in retries.items())
            print(
                f"{LABELS[name]}: streams tried again after their connection failed before the "
                f"response head: {listed} (the time counts from the first try)"
            )


def print_events(latency: dict[str, Any], events: dict[str, Any]) -> None:
    print_event_latency(latency)
    print_lagging(events)


def jobs_document(plan: Plan, info: dict[str, Any]) -> dict[str, Any]:
    """--jobs-only: what the jobs' figures were measured on (`bench.jobs.jobs_figures` adds them)."""
    return part_document(plan, info)


def part_document(plan: Plan, info: dict[str, Any]) -> dict[str, Any]:
    """A --*-only run: what its figures were measured on (its module adds them)."""
    return {
        **info,
        "settings": {
            "max_tokens": plan.max_tokens,
            "repeats": plan.repeats,
            "concurrency": plan.concurrency,
            "temperature": 0.0,
            "max_batch": plan.max_batch,
            "quick": plan.quick,
            "only": plan.only,
            "jobs_only": plan.jobs_only,
        },
    }


def json_document(
    plan: Plan,
    info: dict[str, Any],
    summaries: dict[str, dict[str, Any]],
    measured: dict[str, Any],
    figures: dict[str, Any],
) -> dict[str, Any]:
    recovery, startup = figures["recovery"], figures["startup"]
    cancel, overload = figures["cancel"], figures["overload"]
    latency, events = figures["event_latency"], figures["events"]
    isolated_vs_raw = path_ratios(summaries, "isolated", "raw")

    def ttft_of(figure: str) -> dict[str, Any]:
        values = {path: summaries[path].get("c1", {}).get(figure) for path in PATHS}
        return {**values, "mlxhost": values["isolated"]}  # the old key: the isolated server

    by_concurrency = {
        path: {
            key: {"p50": values["ttft_ms_p50"], "p95": values["ttft_ms_p95"]}
            for key, values in summaries[path].items()
        }
        for path in PATHS
    }
    memory, constrained = measured["memory"], measured["constrained"]
    return {
        **info,
        "settings": {
            "max_tokens": plan.max_tokens,
            "repeats": plan.repeats,
            "concurrency": plan.concurrency,
            "temperature": 0.0,
            "max_batch": plan.max_batch,
            "prefill_batch": PREFILL_BATCH,
            "server_options": {
                **{name: server_options(name, plan) for name in SERVED},
                "mlx_lm_server": measured["mlx_lm_server"]["options"],
                "overload": overload_options(),
            },
            "ttft_requests": plan.ttft_requests,
            "ttft_max_tokens": measured["ttft_max_tokens"],
        },
        "results": summaries,
        "ratios": {
            "isolated_vs_raw": isolated_vs_raw,
            "isolated_vs_mlx_lm_server": path_ratios(summaries, "isolated", "mlx_lm_server"),
            "in_process_vs_raw": path_ratios(summaries, "in_process", "raw"),
            "in_process_vs_mlx_lm_server": path_ratios(summaries, "in_process", "mlx_lm_server"),
            "mlx_lm_server_vs_raw": path_ratios(summaries, "mlx_lm_server", "raw"),
            "isolated_vs_in_process": path_ratios(summaries, "isolated", "in_process"),
            "mlxhost_vs_raw": isolated_vs_raw,  # the old key: the default (isolated) server
        },
        "ttft_ms": {
            "p50": ttft_of("ttft_ms_p50"),
            "p95": ttft_of("ttft_ms_p95"),
            "count": {path: summaries[path].get("c1", {}).get("ttft_samples") for path in PATHS},
            "by_concurrency": by_concurrency,
        },
        "mlx_lm_server": measured["mlx_lm_server"],
        "stream_retries": measured["stream_retries"],
        "cached_prompt_tokens": measured["cached_prompt_tokens"],
        "rss_mb": memory,
        "recovery_s": recovery["recovery_s"],
        "worker_ready_s": recovery["worker_ready_s"],
        "recovery": {**recovery, "startup": startup},
        "constrained_vs_free": constrained["mixed_vs_free"],
        "grammar_compile_ms": constrained["compile_ms"],
        "constrained": constrained,
        "cancel_ms": cancel["cancel_ms"],
        "cancel_steps": cancel["cancel_steps"],
        "cancel": cancel,
        "overload": overload,
        "targets": {
            **figures["targets"],
            "parent_rss_mb_max": PARENT_RSS_TARGET_MB,
            "parent_rss_ok": parent_rss_ok(memory),
            # recovery_s <= the model's load time + recovery_slack_s (issue 14): the load alone,
            # without interpreter start and imports, as the respawned worker reports it.
            "recovery_slack_s": RECOVERY_SLACK_S,
            "model_load_s": recovery["model_load_s"],
            "recovery_ok": recovery["meets_target"],
            "recovery_ok_vs_model_load": recovery["meets_target"],  # the older name of recovery_ok
            # The older target: recovery_s <= worker_ready_s + recovery_ready_slack_s.
            "recovery_ready_slack_s": READY_SLACK_S,
            "recovery_ok_vs_worker_ready": recovery["meets_ready_target"],
            "constrained_vs_free_min": CONSTRAINED_VS_FREE_MIN,
            "constrained_ok": constrained["meets_target"],
            "cancel_steps_max": CANCEL_STEPS_TARGET,
            "cancel_ok": cancel["meets_target"],
            "reject_ms_p99_below": REJECT_P99_TARGET_MS,
            "reject_ok": overload["reject_ok"],
            "admitted_vs_unloaded_min": ADMITTED_RATIO_TARGET,
            "admitted_ok": overload["admitted_ok"],
            "event_latency_p95_ms_max": EVENT_LATENCY_P95_TARGET_MS,
            "event_latency_ok": latency["meets_target"],
            "hub_events_per_s_min": HUB_EVENTS_PER_S_TARGET,
            "hub_ok": events["hub_ok"],
            "lagging_subscriber_ratio_min": LAGGING_RATIO_TARGET,
            "lagging_ok": events["lagging_ok"],
        },
        "server_engine_statistics": measured["server_engines"],
        "prompt_tokens_served": measured["prompt_tokens"],
        "chart": figures["chart"],
        "event_latency_ms": latency,
        "events": events,
    }
