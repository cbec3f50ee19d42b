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

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench import hosts
from bench.figures import at_least, median, number, progress, ratio, verdict
from bench.health import isolated_worker
from bench.plan import Plan
from bench.processes import CPUClock
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
WARM_UP_REPORTS = 1  # the first training report of each run: compiling, caches filling
NEVER_EVAL = 1_000_000  # steps_per_eval: mlx-lm still validates before the first and the last iteration
TRAIN_EXAMPLES = 64
RELEASE_WAIT_S = 60.0  # for the host to resume its workers after a job
RELEASE_POLL_S = 0.1
REPORTS_ENV = "MLXHOST_BENCH_LORA_REPORTS"
# `mlx_lm.lora --report-to wandb` calls wandb.init once, then wandb.log with every report.
WANDB_STANDIN = '''"""A stand-in for wandb (mlxhost's bench): each report mlx-lm logs, as a JSON line."""
import json
import os


def init(**kwargs):
    return None


def log(data, step=None):
    with open(os.environ["MLXHOST_BENCH_LORA_REPORTS"], "a") as file:
        file.write(json.dumps(data) + "\\n")
'''


@dataclass(frozen=True)
class FinetuneShape:
    """How long a fine-tune runs. CPU training of the bench model takes about 2 s an iteration at
    batch size 1 on short examples: a quick run of it is 6 iterations (about 20 s with the model's
    load and the two validations); the tiny model does some 20 iterations a second."""

    iters: int
    batch_size: int
    steps_per_report: int


SHAPES = {
    ("tiny", True): FinetuneShape(iters=100, batch_size=4, steps_per_report=20),
    ("tiny", False): FinetuneShape(iters=200, batch_size=4, steps_per_report=20),
    ("bench", True): FinetuneShape(iters=6, batch_size=1, steps_per_report=2),
    ("bench", False): FinetuneShape(iters=12, batch_size=1, steps_per_report=2),
}


def finetune_shape(plan: Plan) -> FinetuneShape:
    """A --model of unknown size is taken to be as slow as the bench model."""
    if plan.smoke:  # two reports, the first dropped as warm-up: one counted each way
        shape = SHAPES.get((plan.size, True), SHAPES[("bench", True)])
        return FinetuneShape(shape.steps_per_report * 2, shape.batch_size, shape.steps_per_report)
    return SHAPES.get((plan.size, plan.quick), SHAPES[("bench", plan.quick)])


@dataclass(frozen=True)
class TrainingReport:
    """One of mlx-lm's training reports."""

    iteration: int
    steps: int  # iterations since the previous report
    iterations_per_s: float
    tokens_per_s: float
    train_loss: float

    @property
    def tokens(self) -> float:
        """Tokens trained on since the previous report: both rates share the one training time.
        (mlx-lm's own rate of a shorter last interval is off; the shapes have none.)"""
        return ratio(self.tokens_per_s, self.iterations_per_s) * self.steps


@dataclass(frozen=True)
class FinetuneRun:
    path: str  # "direct" or "mlxhost"
    reports: list[TrainingReport]
    wall_s: float  # direct: process start to exit; mlxhost: submit to the outcome read
    job: str | None = None  # the job's id
    # CPU seconds of the host's parent and its (paused, or idle) worker over the run: what the
    # host takes from a job on a machine of few cores.
    host_cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def counted(self) -> list[TrainingReport]:
        return self.reports[WARM_UP_REPORTS:]


class JobsBenchError(RuntimeError):
    """A fine-tune did not run to its end."""


def write_dataset(where: Path, valid: int) -> Path:
    """Short chat examples: training cost grows with the tokens of a batch. `valid` is one batch:
    mlx-lm validates twice whatever steps_per_eval says, and that time is nobody's figure."""
    where.mkdir(parents=True)
    for name, count in (("train.jsonl", TRAIN_EXAMPLES), ("valid.jsonl", valid)):
        with (where / name).open("w") as file:
            for i in range(count):
                messages = [
                    {"role": "user", "content": f"What is {i} plus {i}?"},
                    {"role": "assistant", "content": f"{2 * i}."},
                ]
                file.write(json.dumps({"messages": messages}) + "\n")
    return where


def write_wandb_standin(where: Path) -> Path:
    (where / "wandb").mkdir(parents=True)
    (where / "wandb" / "__init__.py").write_text(WANDB_STANDIN)
    return where


def direct_command(model_path: Path, data: Path, shape: FinetuneShape, adapters: Path) -> list[str]:
    return [
        sys.executable, "-m", "mlx_lm", "lora", "--train", f"--model={model_path}", f"--data={data}",
        f"--iters={shape.iters}", f"--batch-size={shape.batch_size}", "--num-layers=-1",
        f"--adapter-path={adapters}", f"--steps-per-report={shape.steps_per_report}",
        f"--steps-per-eval={NEVER_EVAL}", "--report-to=wandb",
    ]  # fmt: skip


def job_options(data: Path, shape: FinetuneShape, iters: int | None = None) -> dict[str, Any]:
    """The job's options, the direct command's flags by their names on the wire."""
    return {
        "data": str(data),
        "iters": shape.iters if iters is None else iters,
        "batch_size": shape.batch_size,
        "num_layers": -1,
        "steps_per_report": shape.steps_per_report,
        "steps_per_eval": NEVER_EVAL,
    }


def training_reports(lines: list[dict[str, Any]], steps_per_report: int) -> list[TrainingReport]:
    """The training reports among mlx-lm's reports (the direct run's) or progress lines (the job's).

    A job's progress line carries everything known so far: a validation line (before the first
    iteration, and before the last, numbered the iteration before it) repeats the last rate. A
    training report falls on a multiple of steps_per_report, or the last iteration; and comes
    before any other line numbered alike.
    """
    reports: list[TrainingReport] = []
    for line in lines:
        iteration = int(line["iteration"])
        rate = line.get("iterations_per_s", line.get("iterations_per_second"))
        on_report = iteration % steps_per_report == 0 or iteration == line.get("total", iteration)
        previous = reports[-1].iteration if reports else 0
        if rate is None or not on_report or iteration <= previous:
            continue
        tokens_per_s = line.get("tokens_per_s", line.get("tokens_per_second"))
        reports.append(
            TrainingReport(
                iteration=iteration,
                steps=iteration - previous,
                iterations_per_s=float(rate),
                tokens_per_s=float("nan") if tokens_per_s is None else float(tokens_per_s),
                train_loss=float(line["train_loss"]),
            )
        )
    return reports


async def direct_run(
    model_path: Path, data: Path, shape: FinetuneShape, work: Path, standin: Path, run_number: int
) -> FinetuneRun:
    """`python -m mlx_lm lora --train ...`, its reports written by the stand-in wandb."""
    reports = work / f"direct-{run_number}.jsonl"
    command = direct_command(model_path, data, shape, work / f"direct-{run_number}")
    pythonpath = os.pathsep.join(filter(None, [str(standin), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, REPORTS_ENV: str(reports)}
    began = time.perf_counter()
    done = await anyio.run_process(command, env=env, cwd=work, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0 or not reports.is_file():
        output = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
        raise JobsBenchError(f"mlx_lm.lora exited {done.returncode}:\n{output}")
    lines = [json.loads(line) for line in reports.read_text().splitlines() if line.strip()]
    return FinetuneRun("direct", training_reports(lines, shape.steps_per_report), wall)


async def mlxhost_run(admin: AdminClient, model: str, options: dict[str, Any]) -> FinetuneRun:
    """A `finetune` job, followed over its SSE log tail (as `mlxhost jobs tail` does) to its end."""
    began = time.perf_counter()
    record = await admin.submit_job("finetune", model, **options)
    lines: list[dict[str, Any]] = []
    outcome = None
    async for event in admin.job_events(record.id):
        if event.type == "progress":
            lines.append(dict(event.data))
        elif event.terminal:
            outcome = event
    wall = time.perf_counter() - began
    if outcome is None or outcome.type != "succeeded":
        record = await admin.job(record.id)
        raise JobsBenchError(f"job {record.id} ended {record.state}: {record.error}")
    return FinetuneRun("mlxhost", training_reports(lines, options["steps_per_report"]), wall, record.id)


async def wait_released(admin: AdminClient) -> float:
    """Seconds until the host's execution lease is free again and no worker is paused."""
    began = time.perf_counter()
    with anyio.fail_after(RELEASE_WAIT_S):
        while True:
            execution = (await admin.snapshot()).execution
            if execution.exclusive is None and not execution.paused:
                return time.perf_counter() - began
            await anyio.sleep(RELEASE_POLL_S)


async def served_model(client: httpx.AsyncClient) -> str:
    models = (await client.get("/v1/models")).json()["data"]
    return str(models[0]["id"])


def describe_finetune(run: FinetuneRun) -> str:
    rates = ", ".join(f"{r.iterations_per_s:.2f}" for r in run.reports)
    return f"it/s by report {rates} (the first dropped), {run.wall_s:.1f} s"


async def measure_jobs(plan: Plan, prompt: str) -> dict[str, Any]:
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
    settings = {
        "model": model,
        "iters": shape.iters,
        "batch_size": shape.batch_size,
        "num_layers": -1,
        "steps_per_report": shape.steps_per_report,
        "steps_per_eval": NEVER_EVAL,
        "train_examples": TRAIN_EXAMPLES,
        "valid_examples": shape.batch_size,
        "warm_up_reports_dropped": WARM_UP_REPORTS,
        "rounds": rounds,
        "direct_command": direct_command(Path("MODEL"), Path("DATA"), shape, Path("ADAPTERS"))[1:],
        "serving_concurrency": serving_at,
        "serving_max_tokens": plan.max_tokens,
        "serving_runs": len(serving["runs"]["before"]),
        "host_options": options[1:],  # the state directory is a temporary one
        "load_average": {"start": list(load_at_start), "end": list(os.getloadavg())},
    }
    return {
        "settings": settings,
        "finetune": finetune_summary(runs),
        "serving": serving,
    }


async def serving_around_a_job(
    http: HTTPBench,
    admin: AdminClient,
    model: str,
    job: dict[str, Any],
    concurrency: int,
    least: int,
    min_s: float = SERVING_MIN_S,
) -> dict[str, Any]:
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


def finetune_summary(runs: list[FinetuneRun]) -> dict[str, Any]:
    def of(path: str) -> dict[str, Any]:
        mine = [run for run in runs if run.path == path]
        counted = [report for run in mine for report in run.counted]
        return {
            "iterations_per_s": median([r.iterations_per_s for r in counted]),
            "tokens_per_s": median([r.tokens_per_s for r in counted]),
            "iterations_per_s_by_run": [median([r.iterations_per_s for r in run.counted]) for run in mine],
            "wall_s": median([run.wall_s for run in mine]),
            "reports_counted": len(counted),
            "host_cores": {
                name: median([ratio(run.host_cpu_s[name], run.wall_s) for run in mine])
                for name in ("parent", "worker")
            },
        }

    direct, through_host = of("direct"), of("mlxhost")
    vs_direct = ratio(through_host["iterations_per_s"], direct["iterations_per_s"])
    # Round by round (its two runs next to each other in time): a machine that drifts shows here.
    by_round = [
        ratio(host_rate, direct_rate)
        for host_rate, direct_rate in zip(
            through_host["iterations_per_s_by_run"], direct["iterations_per_s_by_run"], strict=False
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
    return {
        "direct": direct,
        "mlxhost": through_host,
        "mlxhost_vs_direct": vs_direct,
        "mlxhost_vs_direct_by_round": by_round,
        "tokens_per_s_ratio": ratio(through_host["tokens_per_s"], direct["tokens_per_s"]),
        # A whole run's speed, start to end (model load and validations included), as a ratio of rates:
        "end_to_end_vs_direct": ratio(direct["wall_s"], through_host["wall_s"]),
        "same_tokens_per_report": all(len(tokens) == 1 for tokens in intervals.values()),
        "train_loss_spread": loss_spread,
        "target": FINETUNE_VS_DIRECT_TARGET,
        "meets_target": at_least(vs_direct, FINETUNE_VS_DIRECT_TARGET),
        "runs": [
            {
                "path": run.path,
                "job": run.job,
                "wall_s": run.wall_s,
                "host_cpu_s": run.host_cpu_s,
                "reports": [asdict(r) for r in run.reports],
            }
            for run in runs
        ],
    }


def serving_summary(
    before: list[BatchRun], after: list[BatchRun], job: FinetuneRun, released_s: float
) -> dict[str, Any]:
    before_tok_s = median([run.total_tok_s for run in before])
    after_tok_s = median([run.total_tok_s for run in after])
    after_vs_before = ratio(after_tok_s, before_tok_s)
    return {
        "before_tok_s": before_tok_s,
        "after_tok_s": after_tok_s,
        "after_vs_before": after_vs_before,
        "target": SERVING_AFTER_JOB_TARGET,
        "meets_target": at_least(after_vs_before, SERVING_AFTER_JOB_TARGET),
        "job": {
            "id": job.job,
            "wall_s": job.wall_s,
            "iterations": job.reports[-1].iteration if job.reports else 0,
        },
        "released_after_outcome_s": released_s,
        "runs": {
            "before": [{**asdict(run), "total_tok_s": run.total_tok_s} for run in before],
            "after": [{**asdict(run), "total_tok_s": run.total_tok_s} for run in after],
        },
    }


def jobs_figures(jobs: dict[str, Any], targets: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON's keys for this module: the whole summary, its two ratios at the top, and its
    targets beside the others in `targets` (the document's own, given)."""
    finetune, serving = jobs["finetune"], jobs["serving"]
    return {
        "jobs": jobs,
        "finetune_vs_direct": finetune["mlxhost_vs_direct"],
        "serving_after_job_vs_before": serving["after_vs_before"],
        "targets": {
            **(targets or {}),
            "finetune_vs_direct_min": FINETUNE_VS_DIRECT_TARGET,
            "finetune_ok": finetune["meets_target"],
            "serving_after_job_vs_before_min": SERVING_AFTER_JOB_TARGET,
            "serving_after_job_ok": serving["meets_target"],
        },
    }


def print_jobs(jobs: dict[str, Any]) -> None:
    settings, finetune, serving = jobs["settings"], jobs["finetune"], jobs["serving"]
    direct, through_host = finetune["direct"], finetune["mlxhost"]
    print()
    print(
        f"managed jobs (an isolated server of its own, {' '.join(settings['host_options'])}, a "
        f"temporary --state-dir; load average {_loads(settings['load_average']['start'])} at the "
        f"start, {_loads(settings['load_average']['end'])} at the end):"
    )
    print(
        f"  fine-tune: LoRA on all layers, {settings['iters']} iterations of batch "
        f"{settings['batch_size']}, {settings['train_examples']} short chat examples, a report "
        f"every {settings['steps_per_report']} iterations, the first of each run dropped; "
        f"{settings['rounds']} round(s) of one run each way, alternating; medians over the reports"
    )
    print(
        f"    mlx_lm.lora directly   {number(direct['iterations_per_s'], 2):>7} it/s "
        f"{number(direct['tokens_per_s']):>8} tok/s   run {number(direct['wall_s'])} s "
        "(process start to exit)"
    )
    print(
        f"    finetune job (mlxhost) {number(through_host['iterations_per_s'], 2):>7} it/s "
        f"{number(through_host['tokens_per_s']):>8} tok/s   run {number(through_host['wall_s'])} s "
        "(submit to outcome)"
    )
    same = "yes" if finetune["same_tokens_per_report"] else "NO"
    by_round = ", ".join(number(value, 3) for value in finetune["mlxhost_vs_direct_by_round"])
    print(
        f"    mlxhost / direct (mlx-lm's iterations_per_second): {number(finetune['mlxhost_vs_direct'], 3)}"
        f" (by round {by_round}): target >= {FINETUNE_VS_DIRECT_TARGET:g}: "
        f"{verdict(finetune['meets_target'])} (the same "
        f"tokens in every report interval: {same}; train losses within "
        f"{number(finetune['train_loss_spread'], 6)}; whole runs, direct time / mlxhost time "
        f"{number(finetune['end_to_end_vs_direct'], 3)})"
    )
    print(
        "    the host's CPU (cores) meanwhile: parent "
        f"{number(through_host['host_cores']['parent'], 3)}, worker "
        f"{number(through_host['host_cores']['worker'], 3)} during the job; parent "
        f"{number(direct['host_cores']['parent'], 3)}, worker {number(direct['host_cores']['worker'], 3)} "
        "idle during the direct run"
    )
    print(
        f"  serving: c{settings['serving_concurrency']} streams of max_tokens "
        f"{settings['serving_max_tokens']}, total tok/s, {settings['serving_runs']} runs each: before "
        f"any job {number(serving['before_tok_s'])}, after a {serving['job']['iterations']}-iteration "
        f"fine-tune {number(serving['after_tok_s'])}: after / before "
        f"{number(serving['after_vs_before'], 3)}: target >= {SERVING_AFTER_JOB_TARGET:g}: "
        f"{verdict(serving['meets_target'])} (workers resumed "
        f"{serving['released_after_outcome_s'] * 1e3:.0f} ms after the job's outcome was read)"
    )


def _loads(values: list[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)
