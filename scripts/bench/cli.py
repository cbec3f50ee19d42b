"""`python scripts/bench`: parse the options, load the model in this process (the raw path),
choose the prompt, run every measurement (`bench.run`) with the servers stopped however it ends,
then, each on servers of its own, the managed jobs (`bench.jobs`), the closed-loop load
(`bench.closed_loop`) and the agent scenario (`bench.agent`), and the hub alone; and report: the
text on stdout (progress on stderr), the chart, the JSON. With --jobs-only, --agent-only,
--closed-loop-only, --recovery-only, --group-only or --constrained-only, that part alone. With
--speculation, the speculation bench and its own options (`bench.speculation`)."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Sequence

import anyio

from bench.agent import measure_agent, print_agent
from bench.cancel import cancel_summary
from bench.chart import chart_title, write_chart
from bench.closed_loop import measure_closed_loop, print_closed_loop
from bench.constrained import print_constrained
from bench.constrained_only import measure_constrained_only
from bench.event_latency import event_latency_summary
from bench.figures import json_safe, progress, ratio
from bench.group import measure_group, print_group
from bench.hub import HUB_EVENTS, hub_throughput
from bench.jobs import measure_jobs, print_jobs
from bench.join_gap import measure_join_gap
from bench.join_gap_figures import JoinGapDocument, print_join_gap
from bench.lagging import events_summary
from bench.overload import OVERLOAD_TOKENS_FACTOR, overload_summary
from bench.peers import measure_peers
from bench.peers_figures import PeersDocument, print_peers
from bench.plan import Plan, parse_args
from bench.raw import RawMLX, choose_prompt
from bench.recovery import measure_recovery, print_recovery, recovery_summary, worker_import_s
from bench.report import (
    Figures,
    bench_document,
    machine_info,
    part_settings,
    print_events,
    print_header,
    print_report,
    versions,
)
from bench.results.document import Part, PartDocument
from bench.results.record import Record
from bench.results.serving import Info, Model, Startup
from bench.run import measure
from bench.settings import LABELS, PATHS
from bench.targets import c1_figure, speed_targets
from bench.throughput import summarize, table_rows


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if "--speculation" in arguments:  # a mode with options of its own; imported here, as it alone needs it
        from bench.speculation import main as speculation

        return speculation(arguments)
    plan = parse_args(arguments)
    machine, version = machine_info(), versions()
    progress(f"loading {plan.model_path}")
    raw = RawMLX(plan.model_path)
    progress("choosing a prompt whose greedy reply runs to max_tokens (raw warm-up)")
    prompt, ids, probe = choose_prompt(raw, plan.max_tokens)
    model = Model(
        path=str(plan.model_path),
        size=plan.size,
        parameters=raw.parameters,
        load_s=raw.load_s,
        prompt=prompt,
        prompt_tokens=len(ids),
        reply_probe=probe,
    )
    info = Info(machine, version, model)

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

    for name, counted in measured.prompt_tokens.items():
        if counted != len(ids):
            progress(
                f"warning: {LABELS[name]} counted {counted} prompt tokens, raw {len(ids)}: "
                "the paths do not see the same prompt"
            )
    summaries = {name: summarize(measured.results[name]) for name in PATHS}
    isolated_c1 = c1_figure(summaries["isolated"], "decode_tok_s")
    startup = Startup(
        raw_load_s=raw.load_s,
        in_process_load_s=measured.in_process_load_s,
        worker_import_s=measured.worker_import_s,
    )
    targets = speed_targets(summaries)
    recovery = recovery_summary(measured.recoveries, startup, measured.in_process_load_s)
    cancel = cancel_summary(
        measured.cancels,
        ratio(1e3, float("nan") if isolated_c1 is None else isolated_c1),
        measured.cancel_max_tokens,
    )
    overload = overload_summary(measured.overloads, plan.max_tokens * OVERLOAD_TOKENS_FACTOR)
    progress(f"event hub alone: publishing {HUB_EVENTS:,} events in this process")
    hub = anyio.run(hub_throughput)
    event_latency = event_latency_summary(
        measured.event_samples,
        measured.exit_samples,
        measured.event_types,
        measured.event_error,
        measured.exits_missing,
    )
    events = events_summary(measured.hub_runs, hub, measured.hub_max_tokens)
    figures = Figures(targets, recovery, cancel, overload, event_latency, events)
    print_report(plan, info, table_rows(summaries), measured, figures)
    print_events(event_latency, events)
    print_jobs(jobs)
    print_closed_loop(closed_loop)
    print_agent(agent)

    title = chart_title(info, plan.max_tokens, plan.repeats)
    chart = write_chart(plan.chart_path, summaries, plan.concurrency, title)
    print()
    print(f"chart: {chart}" if chart else "chart: skipped (matplotlib is not installed)")

    parts = (jobs, closed_loop, agent)
    document = bench_document(plan, info, summaries, measured, figures, None if chart is None else str(chart), parts)
    _write(plan, document)
    return 0


def _jobs_only(plan: Plan, info: Info, prompt: str) -> int:
    jobs = anyio.run(measure_jobs, plan, prompt)
    print_header(plan, info)
    print_jobs(jobs)
    _write_part(plan, info, jobs)
    return 0


def _part_only(plan: Plan, info: Info, raw: RawMLX, prompt: str) -> int:
    """--agent-only, --closed-loop-only, --recovery-only, --group-only or --constrained-only: that part
    alone, and its report; --peers too (`bench.peers`), and --pull (`bench.pull`)."""
    if plan.only == "peers":
        peers = anyio.run(measure_peers, plan, raw)
        print_header(plan, info)
        print_peers(peers)
        _write(plan, PeersDocument(info.machine, info.versions, info.model, part_settings(plan), peers))
        return 0
    if plan.only == "join_gap":  # --join-gap (bench.join_gap)
        gaps = anyio.run(measure_join_gap, plan, raw)
        print_header(plan, info)
        print_join_gap(gaps)
        _write(plan, JoinGapDocument(info.machine, info.versions, info.model, part_settings(plan), gaps))
        return 0
    if plan.only == "batch_kv":  # --batch-kv (bench.batch_kv); imported here to keep this one block
        from bench.batch_kv import BatchKVDocument, measure_batch_kv, print_batch_kv

        batch_kv = measure_batch_kv(plan, raw)
        print_header(plan, info)
        print_batch_kv(batch_kv)
        _write(plan, BatchKVDocument(info.machine, info.versions, info.model, part_settings(plan), batch_kv))
        return 0
    if plan.only == "embeddings":  # --embeddings (bench.embeddings); imported here to keep this one block
        from bench.embeddings import EmbeddingsDocument, measure_embeddings, print_embeddings

        embeddings = measure_embeddings(plan)
        print_header(plan, info)
        print_embeddings(embeddings)
        _write(plan, EmbeddingsDocument(info.machine, info.versions, part_settings(plan), embeddings))
        return 0
    if plan.only == "fairness":  # --fairness (bench.fairness); imported here to keep this one block
        from bench.fairness import measure_fairness, print_fairness

        fairness = measure_fairness(plan)
        print_header(plan, info)
        print_fairness(fairness)
        _write(plan, fairness)
        return 0
    if plan.only == "pull":  # --pull (bench.pull); imported here to keep this one block
        from bench.pull import (
            PULL_VS_HF_TARGET,
            SERVING_WHILE_PULLING_TARGET,
            PullDocument,
            measure_pull,
            print_pull,
        )

        pulled = measure_pull(plan, prompt)
        print_header(plan, info)
        print_pull(pulled)
        targets = pulled.targets(PULL_VS_HF_TARGET, SERVING_WHILE_PULLING_TARGET)
        settings = part_settings(plan)
        _write(plan, PullDocument(info.machine, info.versions, info.model, settings, pulled, targets))
        return 0
    part: Part
    if plan.only == "agent":
        part = agent = anyio.run(measure_agent, plan, raw)
        print_header(plan, info)
        print_agent(agent)
    elif plan.only == "closed_loop":
        part = closed_loop = anyio.run(measure_closed_loop, plan, raw)
        print_header(plan, info)
        print_closed_loop(closed_loop)
    elif plan.only == "group":
        part = group = anyio.run(measure_group, plan, prompt)
        print_header(plan, info)
        print_group(group)
    elif plan.only == "constrained":
        part = constrained = anyio.run(measure_constrained_only, plan, prompt, raw)
        print_header(plan, info)
        print_constrained(constrained)
    else:
        runs = anyio.run(measure_recovery, plan, prompt)
        startup = Startup(raw_load_s=raw.load_s, in_process_load_s=None, worker_import_s=worker_import_s())
        part = recovery = recovery_summary(runs, startup)
        print_header(plan, info)
        print_recovery(recovery)
    _write_part(plan, info, part)
    return 0


def _write_part(plan: Plan, info: Info, part: Part) -> None:
    _write(plan, PartDocument(info.machine, info.versions, info.model, part_settings(plan), part))


def _write(plan: Plan, document: Record) -> None:
    """The document to --json's path, NaN as null; nothing without --json."""
    if plan.json_path is None:
        return
    plan.json_path.parent.mkdir(parents=True, exist_ok=True)
    plan.json_path.write_text(json.dumps(json_safe(document.to_json()), indent=2) + "\n")
    progress(f"wrote {plan.json_path}")


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
