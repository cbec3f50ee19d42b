"""A fine-tune both ways, for `bench.jobs`: `python -m mlx_lm lora --train ...` run directly, and
a `finetune` job of an mlxhost host followed over its log tail; each run's training reports.

mlx-lm 0.32's CLI prints tok/s rounded to a whole number, and no It/sec: so the direct run is given
`--report-to wandb`, and a stand-in `wandb` module on its PYTHONPATH writes each report mlx-lm
hands to `wandb.log` (the same dict the job's callback gets) as a JSON line. How long a run is
(`FinetuneShape`) depends on the model's size and --quick.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bench.figures import ratio
from bench.plan import Plan
from mlxhost.client.admin import AdminClient

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


def describe_finetune(run: FinetuneRun) -> str:
    rates = ", ".join(f"{r.iterations_per_s:.2f}" for r in run.reports)
    return f"it/s by report {rates} (the first dropped), {run.wall_s:.1f} s"
