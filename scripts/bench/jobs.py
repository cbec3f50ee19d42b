"""Managed jobs: a fine-tune through mlxhost against `mlx_lm.lora` run directly, and what a job
leaves behind for serving. On a host of its own (`--state-dir` a temporary directory), after every
other server stopped.

Fine-tune. The same LoRA training both ways, same model, dataset and options (all layers, a report
every `steps_per_report` iterations, validation only where mlx-lm always does it: before the first
iteration and before the last), max(--repeats, 2) rounds of one run each way, the order
alternating from one round to the next:
  direct    `python -m mlx_lm lora --train ...` in a subprocess of this process.
  mlxhost   a `finetune` job (POST /admin/jobs), followed over its SSE log tail to its outcome.
The figure is mlx-lm's own iterations_per_second of each training report (steps_per_report over
the training time since the last report, validation excluded), the first report of each run
dropped as warm-up; medians over the reports left. The job logs it as `iterations_per_s`.
mlx-lm 0.32's CLI prints tok/s rounded to a whole number, and no It/sec: so the direct run is given
`--report-to wandb`, and a stand-in `wandb` module on its PYTHONPATH writes each report mlx-lm
hands to `wandb.log` (the same dict the job's callback gets) as a JSON line. With the same seed
both ways train on the same batches: the tokens of every report interval and the training losses
are compared, to show it. Target: mlxhost / direct >= 0.95.

Serving. On the same host, before any job: max(--repeats, 3) runs, and 5 s of them, of 8 streams
at once (or the plan's highest concurrency, when it has no 8), total tok/s as `bench.throughput`
measures them; then a short fine-tune job (one report's iterations); once the host says its
workers resumed, as many runs again. Target: after / before >= 0.95 (unchanged, within the noise).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench import hosts
from bench.figures import at_least, median, number, progress, ratio, verdict
from bench.finetune import (
    NEVER_EVAL,
    TRAIN_EXAMPLES,
    WARM_UP_REPORTS,
    FinetuneRun,
    describe_finetune,
    direct_command,
    direct_run,
    finetune_shape,
    job_options,
    mlxhost_run,
    wait_released,
    write_dataset,
    write_wandb_standin,
)
from bench.health import isolated_worker
from bench.plan import Plan
from bench.processes import CPUClock
from bench.results.parts import (
    FinetuneSide,
    FinetuneSummary,
    HostCores,
    JobsSettings,
    JobsSummary,
    LoadAverages,
    ServingJob,
    ServingRuns,
    ServingSummary,
)
from bench.runs import BatchRun, describe_batch
from bench.settings import REQUEST_TIMEOUT_S, alternating
from bench.streams import HTTPBench
from bench.throughput import warm_up_http
from mlxhost.client.admin import AdminClient, Target

FINETUNE_VS_DIRECT_TARGET = 0.95
SERVING_AFTER_JOB_TARGET = 0.95
JOBS_MIN_ROUNDS = 2
SERVING_CONCURRENCY = 8  # or the plan's highest, when it has no 8
# Each side of the job, there being no alternating them: at least this many runs, and as many as
# fill SERVING_MIN_S before it (the tiny model's runs take well under a second).
SERVING_MIN_RUNS = 3
SERVING_MIN_S = 5.0


async def served_model(client: httpx.AsyncClient) -> str:
    models = (await client.get("/v1/models")).json()["data"]
    return str(models[0]["id"])

async def measure_jobs(plan: Plan, prompt: str) -> JobsSummary:
    """Everything of this module on a host of its own, stopped when it ends; the summary."""
    shape = finetune_shape(plan)
    rounds = plan.rounds(JOBS_MIN_ROUNDS)
    top = max(plan.concurrency)
    serving_at = SERVING_CONCURRENCY if SERVING_CONCURRENCY in plan.concurrency else top
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mlxhost-bench-jobs-") as folder:
        work = Path(folder)
        data = write_dataset(work / "data", valid=shape.batch_size)
        standin = write_wandb_standin(work / "standin")
        options = [f"--state-dir={work / 'state'}", f"--max-active={max(hosts.MIN_MAX_ACTIVE, top)}"]
        progress("jobs: starting an isolated server with a state directory of its own")
        host = await anyio.to_thread.run_sync(hosts.start, "jobs", plan.model_path, plan.max_batch, options)
        limits = httpx.Limits(max_connections=top + 4, max_keepalive_connections=top + 4)
        target = Target(url=host.url, token=hosts.ADMIN_TOKEN)
        with hosts.running(host):
            async with (
                httpx.AsyncClient(base_url=host.url, timeout=REQUEST_TIMEOUT_S, limits=limits) as client,
                AdminClient(target, timeout=30.0) as admin,
            ):
                model = await served_model(client)
                http = HTTPBench(client, prompt, plan.max_tokens)
                await warm_up_http(http, plan)
                short = job_options(data, shape, iters=shape.steps_per_report)
                least = plan.rounds(SERVING_MIN_RUNS)
                min_s = 0.0 if plan.smoke else SERVING_MIN_S
                serving = await serving_around_a_job(http, admin, model, short, serving_at, least, min_s)
                pids = {"parent": host.pid, "worker": int((await isolated_worker(client))["pid"])}
                runs: list[FinetuneRun] = []
                for round_number, through_host in alternating(rounds):
                    clock = CPUClock(pids)
                    if through_host:
                        run = await mlxhost_run(admin, model, job_options(data, shape))
                    else:
                        run = await direct_run(plan.model_path, data, shape, work, standin, round_number)
                    run = replace(run, host_cpu_s=clock.elapsed())
                    if through_host:
                        await wait_released(admin)  # the next direct run on a host serving again
                    runs.append(run)
                    progress(f"  fine-tune {round_number + 1}/{rounds} {run.path}: {describe_finetune(run)}")
    settings = JobsSettings(
        model=model,
        iters=shape.iters,
        batch_size=shape.batch_size,
        num_layers=-1,
        steps_per_report=shape.steps_per_report,
        steps_per_eval=NEVER_EVAL,
        train_examples=TRAIN_EXAMPLES,
        valid_examples=shape.batch_size,
        warm_up_reports_dropped=WARM_UP_REPORTS,
        rounds=rounds,
        direct_command=direct_command(Path("MODEL"), Path("DATA"), shape, Path("ADAPTERS"))[1:],
        serving_concurrency=serving_at,
        serving_max_tokens=plan.max_tokens,
        serving_runs=len(serving.runs.before),
        host_options=options[1:],  # the state directory is a temporary one
        load_average=LoadAverages(start=list(load_at_start), end=list(os.getloadavg())),
    )
    return JobsSummary(settings=settings, finetune=finetune_summary(runs), serving=serving)


async def serving_around_a_job(
    http: HTTPBench,
    admin: AdminClient,
    model: str,
    job: dict[str, Any],  # the job's options (`bench.finetune.job_options`)
    concurrency: int,
    least: int,
    min_s: float = SERVING_MIN_S,
) -> ServingSummary:
    """Runs of `concurrency` streams before any job (at least `least`, and `min_s` of them),
    a job, and as many runs once the host has resumed its workers; the summary."""
    before: list[BatchRun] = []
    began = time.perf_counter()
    while len(before) < least or time.perf_counter() - began < min_s:
        before.append(await serving_run(http, concurrency, f"before a job {len(before) + 1}"))
    short = await mlxhost_run(admin, model, job)
    progress(f"  jobs: a short fine-tune ({short.job}): {short.wall_s:.1f} s")
    released_s = await wait_released(admin)
    after = [
        await serving_run(http, concurrency, f"after a job {index + 1}/{len(before)}")
        for index in range(len(before))
    ]
    return serving_summary(before, after, short, released_s)


async def serving_run(http: HTTPBench, concurrency: int, which: str) -> BatchRun:
    run = await http.batch(concurrency)
    progress(f"  serving {which} c{concurrency}: {describe_batch(run)}")
    return run


def finetune_summary(runs: list[FinetuneRun]) -> FinetuneSummary:
    def of(path: str) -> FinetuneSide:
        mine = [run for run in runs if run.path == path]
        counted = [report for run in mine for report in run.counted]

        def cores(name: str) -> float:
            return median([ratio(run.host_cpu_s[name], run.wall_s) for run in mine])

        return FinetuneSide(
            iterations_per_s=median([r.iterations_per_s for r in counted]),
            tokens_per_s=median([r.tokens_per_s for r in counted]),
            iterations_per_s_by_run=[median([r.iterations_per_s for r in run.counted]) for run in mine],
            wall_s=median([run.wall_s for run in mine]),
            reports_counted=len(counted),
            host_cores=HostCores(parent=cores("parent"), worker=cores("worker")),
        )

    direct, through_host = of("direct"), of("mlxhost")
    vs_direct = ratio(through_host.iterations_per_s, direct.iterations_per_s)
    # Round by round (its two runs next to each other in time): a machine that drifts shows here.
    by_round = [
        ratio(host_rate, direct_rate)
        for host_rate, direct_rate in zip(
            through_host.iterations_per_s_by_run, direct.iterations_per_s_by_run, strict=False
        )
    ]
    # Same batches both ways: every report interval trained on the same tokens, to the same loss.
    intervals: dict[int, set[int]] = {}
    losses: dict[int, list[float]] = {}
    for run in runs:
        for report in run.reports:
            intervals.setdefault(report.iteration, set()).add(round(report.tokens))
            losses.setdefault(report.iteration, []).append(report.train_loss)
    loss_spread = max((max(values) - min(values) for values in losses.values()), default=float("nan"))
    return FinetuneSummary(
        direct=direct,
        mlxhost=through_host,
        mlxhost_vs_direct=vs_direct,
        mlxhost_vs_direct_by_round=by_round,
        tokens_per_s_ratio=ratio(through_host.tokens_per_s, direct.tokens_per_s),
        end_to_end_vs_direct=ratio(direct.wall_s, through_host.wall_s),
        same_tokens_per_report=all(len(tokens) == 1 for tokens in intervals.values()),
        train_loss_spread=loss_spread,
        target=FINETUNE_VS_DIRECT_TARGET,
        meets_target=at_least(vs_direct, FINETUNE_VS_DIRECT_TARGET),
        runs=runs,
    )


def serving_summary(
    before: list[BatchRun], after: list[BatchRun], job: FinetuneRun, released_s: float
) -> ServingSummary:
    before_tok_s = median([run.total_tok_s for run in before])
    after_tok_s = median([run.total_tok_s for run in after])
    after_vs_before = ratio(after_tok_s, before_tok_s)
    return ServingSummary(
        before_tok_s=before_tok_s,
        after_tok_s=after_tok_s,
        after_vs_before=after_vs_before,
        target=SERVING_AFTER_JOB_TARGET,
        meets_target=at_least(after_vs_before, SERVING_AFTER_JOB_TARGET),
        job=ServingJob(
            id=job.job, wall_s=job.wall_s, iterations=job.reports[-1].iteration if job.reports else 0
        ),
        released_after_outcome_s=released_s,
        runs=ServingRuns(before=before, after=after),
    )


def print_jobs(jobs: JobsSummary) -> None:
    settings, finetune, serving = jobs.settings, jobs.finetune, jobs.serving
    direct, through_host = finetune.direct, finetune.mlxhost
    print()
    print(
        f"managed jobs (an isolated server of its own, {' '.join(settings.host_options)}, a "
        f"temporary --state-dir; load average {_loads(settings.load_average.start)} at the "
        f"start, {_loads(settings.load_average.end)} at the end):"
    )
    print(
        f"  fine-tune: LoRA on all layers, {settings.iters} iterations of batch "
        f"{settings.batch_size}, {settings.train_examples} short chat examples, a report "
        f"every {settings.steps_per_report} iterations, the first of each run dropped; "
        f"{settings.rounds} round(s) of one run each way, alternating; medians over the reports"
    )
    print(
        f"    mlx_lm.lora directly   {number(direct.iterations_per_s, 2):>7} it/s "
        f"{number(direct.tokens_per_s):>8} tok/s   run {number(direct.wall_s)} s "
        "(process start to exit)"
    )
    print(
        f"    finetune job (mlxhost) {number(through_host.iterations_per_s, 2):>7} it/s "
        f"{number(through_host.tokens_per_s):>8} tok/s   run {number(through_host.wall_s)} s "
        "(submit to outcome)"
    )
    same = "yes" if finetune.same_tokens_per_report else "NO"
    by_round = ", ".join(number(value, 3) for value in finetune.mlxhost_vs_direct_by_round)
    print(
        f"    mlxhost / direct (mlx-lm's iterations_per_second): {number(finetune.mlxhost_vs_direct, 3)}"
        f" (by round {by_round}): target >= {FINETUNE_VS_DIRECT_TARGET:g}: "
        f"{verdict(finetune.meets_target)} (the same "
        f"tokens in every report interval: {same}; train losses within "
        f"{number(finetune.train_loss_spread, 6)}; whole runs, direct time / mlxhost time "
        f"{number(finetune.end_to_end_vs_direct, 3)})"
    )
    print(
        "    the host's CPU (cores) meanwhile: parent "
        f"{number(through_host.host_cores.parent, 3)}, worker "
        f"{number(through_host.host_cores.worker, 3)} during the job; parent "
        f"{number(direct.host_cores.parent, 3)}, worker {number(direct.host_cores.worker, 3)} "
        "idle during the direct run"
    )
    print(
        f"  serving: c{settings.serving_concurrency} streams of max_tokens "
        f"{settings.serving_max_tokens}, total tok/s, {settings.serving_runs} runs each: before "
        f"any job {number(serving.before_tok_s)}, after a {serving.job.iterations}-iteration "
        f"fine-tune {number(serving.after_tok_s)}: after / before "
        f"{number(serving.after_vs_before, 3)}: target >= {SERVING_AFTER_JOB_TARGET:g}: "
        f"{verdict(serving.meets_target)} (workers resumed "
        f"{serving.released_after_outcome_s * 1e3:.0f} ms after the job's outcome was read)"
    )


def _loads(values: list[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)
