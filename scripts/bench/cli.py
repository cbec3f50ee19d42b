"""`python scripts/bench`: parse the options, load the model in this process (the raw path),
choose the prompt, run every measurement (`bench.run`) with the servers stopped however it ends,
then, each on servers of its own, the managed jobs (`bench.jobs`), the closed-loop load
(`bench.closed_loop`) and the agent scenario (`bench.agent`), and the hub alone; and report: the
text on stdout (progress on stderr), the chart, the JSON. With --jobs-only, --agent-only,
--closed-loop-only or --recovery-only, that part alone."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import anyio

from bench.agent import agent_figures, measure_agent, print_agent
from bench.cancel import cancel_summary
from bench.chart import chart_title, write_chart
from bench.closed_loop import closed_loop_figures, measure_closed_loop, print_closed_loop
from bench.event_latency import event_latency_summary
from bench.figures import json_safe, progress, ratio
from bench.group import measure_group, print_group
from bench.hub import HUB_EVENTS, hub_throughput
from bench.jobs import jobs_figures, measure_jobs, print_jobs
from bench.lagging import events_summary
from bench.overload import OVERLOAD_TOKENS_FACTOR, overload_summary
from bench.plan import Plan, parse_args
from bench.raw import RawMLX, choose_prompt
from bench.recovery import measure_recovery, print_recovery, recovery_summary, worker_import_s
from bench.report import (
    jobs_document,
    json_document,
    machine_info,
    part_document,
    print_events,
    print_header,
    print_report,
    versions,
)
from bench.run import measure
from bench.settings import LABELS, PATHS
from bench.targets import speed_targets
from bench.throughput import summarize, table_rows


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse_args(argv)
    info: dict[str, Any] = {"machine": machine_info(), "versions": versions()}
    progress(f"loading {plan.model_path}")
    raw = RawMLX(plan.model_path)
    progress("choosing a prompt whose greedy reply runs to max_tokens (raw warm-up)")
    prompt, ids, probe = choose_prompt(raw, plan.max_tokens)
    info["model"] = {
        "path": str(plan.model_path),
        "size": plan.size,
        "parameters": raw.parameters,
        "load_s": raw.load_s,
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "reply_probe": asdict(probe),
    }

    # The servers stop when their block ends, however it ends; so also on SIGTERM.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        if plan.jobs_only:
            return _jobs_only(plan, info, prompt)
        if plan.only is not None:
            return _part_only(plan, info, raw, prompt)
        with contextlib.ExitStack() as servers:
            measured = anyio.run(measure, plan, raw, prompt, ids, servers)
        # With every other server stopped: the jobs' host pauses its own workers, no one else's.
        jobs = anyio.run(measure_jobs, plan, prompt)
        closed_loop = anyio.run(measure_closed_loop, plan, raw)
        agent = anyio.run(measure_agent, plan, raw)
    finally:
        signal.signal(signal.SIGTERM, previous)

    for name, counted in measured["prompt_tokens"].items():
        if counted != len(ids):
            progress(
                f"warning: {LABELS[name]} counted {counted} prompt tokens, raw {len(ids)}: "
                "the paths do not see the same prompt"
            )
    summaries = {name: summarize(measured["results"][name]) for name in PATHS}
    isolated_c1 = summaries["isolated"].get("c1", {}).get("decode_tok_s", float("nan"))
    figures: dict[str, Any] = {
        "targets": speed_targets(summaries),
        "recovery": recovery_summary(measured["recoveries"], measured["in_process_load_s"]),
        "startup": {
            "raw_load_s": raw.load_s,
            "in_process_load_s": measured["in_process_load_s"],
            "worker_import_s": measured["worker_import_s"],
        },
        "cancel": cancel_summary(
            measured["cancels"], ratio(1e3, isolated_c1), measured["cancel_max_tokens"]
        ),
        "overload": overload_summary(
            measured["overloads"], plan.max_tokens * OVERLOAD_TOKENS_FACTOR
        ),
    }
    progress(f"event hub alone: publishing {HUB_EVENTS:,} events in this process")
    hub = anyio.run(hub_throughput)
    figures["event_latency"] = event_latency_summary(
        measured["event_samples"],
        measured["exit_samples"],
        measured["event_types"],
        measured["event_error"],
        measured["exits_missing"],
    )
    figures["events"] = events_summary(measured["hub_runs"], hub, measured["hub_max_tokens"])
    print_report(plan, info, table_rows(summaries), measured, figures)
    print_events(figures["event_latency"], figures["events"])
    print_jobs(jobs)
    print_closed_loop(closed_loop)
    print_agent(agent)

    title = chart_title(info, plan.max_tokens, plan.repeats)
    chart = write_chart(plan.chart_path, summaries, plan.concurrency, title)
    figures["chart"] = None if chart is None else str(chart)
    print()
    print(f"chart: {chart}" if chart else "chart: skipped (matplotlib is not installed)")

    if plan.json_path is not None:
        document = json_document(plan, info, summaries, measured, figures)
        document |= jobs_figures(jobs, document["targets"])
        document |= closed_loop_figures(closed_loop) | agent_figures(agent)
        document["targets"] |= part_targets(closed_loop, agent)
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        plan.json_path.write_text(json.dumps(json_safe(document), indent=2) + "\n")
        progress(f"wrote {plan.json_path}")
    return 0


def _jobs_only(plan: Plan, info: dict[str, Any], prompt: str) -> int:
    jobs = anyio.run(measure_jobs, plan, prompt)
    print_header(plan, info)
    print_jobs(jobs)
    if plan.json_path is not None:
        document = jobs_document(plan, info) | jobs_figures(jobs)
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        plan.json_path.write_text(json.dumps(json_safe(document), indent=2) + "\n")
        progress(f"wrote {plan.json_path}")
    return 0


def _part_only(plan: Plan, info: dict[str, Any], raw: RawMLX, prompt: str) -> int:
    """--agent-only, --closed-loop-only, --recovery-only or --group-only: that part alone, and its report."""
    figures: dict[str, Any]
    if plan.only == "agent":
        agent = anyio.run(measure_agent, plan, raw)
        print_header(plan, info)
        print_agent(agent)
        figures = agent_figures(agent) | {"targets": part_targets(agent=agent)}
    elif plan.only == "closed_loop":
        closed_loop = anyio.run(measure_closed_loop, plan, raw)
        print_header(plan, info)
        print_closed_loop(closed_loop)
        figures = closed_loop_figures(closed_loop) | {"targets": part_targets(closed_loop=closed_loop)}
    elif plan.only == "group":
        group = anyio.run(measure_group, plan, prompt)
        print_header(plan, info)
        print_group(group)
        figures = {"group": group}
    else:
        runs = anyio.run(measure_recovery, plan, prompt)
        startup = {"raw_load_s": raw.load_s, "in_process_load_s": None, "worker_import_s": worker_import_s()}
        recovery = recovery_summary(runs)
        print_header(plan, info)
        print_recovery(recovery, startup)
        figures = {
            "recovery_s": recovery["recovery_s"],
            "worker_ready_s": recovery["worker_ready_s"],
            "recovery": {**recovery, "startup": startup},
            "targets": {
                "recovery_slack_s": recovery["slack_s"],
                "model_load_s": recovery["model_load_s"],
                "recovery_ok": recovery["meets_target"],
                "recovery_ready_slack_s": recovery["ready_slack_s"],
                "recovery_ok_vs_worker_ready": recovery["meets_ready_target"],
            },
        }
    if plan.json_path is not None:
        document = part_document(plan, info) | figures
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        plan.json_path.write_text(json.dumps(json_safe(document), indent=2) + "\n")
        progress(f"wrote {plan.json_path}")
    return 0


def part_targets(
    closed_loop: dict[str, Any] | None = None, agent: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The targets of the closed loop and the agent scenario, for the JSON's `targets`."""
    targets: dict[str, Any] = {}
    if closed_loop is not None:
        targets["closed_loop_isolated_vs_raw_min"] = closed_loop["target"]
        targets["closed_loop_ok"] = closed_loop["meets_target"]
    if agent is not None:
        targets["agent_ttft_vs_cold_max"] = agent["target"]
        targets["agent_ok"] = agent["meets_target"]
    return targets


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
