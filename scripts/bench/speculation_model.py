"""The speculation bench's copy model: a demo model taught to re-emit a file with edits, by the
host's own jobs, and kept in the bench's work directory so that a rerun skips the training.

How it is made (`build_copy_model`): the edit dataset (`bench.speculation_data`) is written, an
isolated host is started on the base demo model with a state directory of its own, a `finetune`
job (LoRA, every layer) trains on the dataset and a `fuse` job folds the adapters into the weights;
both are submitted and followed over the admin API, as `mlxhost jobs submit` and `jobs tail` do.
The fused model's directory is copied into `<work>/copy-<size>-<key>/model`, beside a record of how
it was made (`made.json`); `key` digests the base model's config and every training setting, so a
change of either trains anew. A fused model is a plain mlx-lm model directory: the host serves it
and mlx-lm loads it alike, with no adapter layers in the way of either.

It does not learn to copy here. The spike (2 x86 cores, MLX on the CPU, mlx-lm 0.32.2, training as
the job trains: LoRA on every linear of every layer, scale 20, the loss on the whole example, as
the job has no mask_prompt; copy accuracy on held-out 10-line edits):

  model (data)                    rank, lr, batch, iters  time, tok/s   loss         forced / greedy
  agent (64 wide, 32,768 tokens)  8, 1e-3, 4, 100        406 s, 176    10.27-10.07  0.11 / 0.05
  tiny (64 wide, 1,024 tokens)    8, 1e-3, 4, 200        313 s, 1,300  6.74-6.70    0.16 / 0.12
  tiny                            64, 3e-3, 4, 300       579 s, 1,100  6.73-6.72    0.18 / 0.09
  tiny (16 words, repeated)       64, 2e-3, 16, 250      375 s, 1,400  6.74-6.73    stopped: flat
  bench (512 wide, 8 layers)      16, 1e-3, 4, 5         100 s, 21     25k tokens in 20 min

("forced": the answer tokens the model predicts from the true prefix; "greedy": the share of the
expected answer its greedy answer reproduces.)

The 64-wide demo models cannot get there through LoRA: their head (std 0.02) and final norm
(weight 1) are frozen, so no token's logit can rise more than |w| x sqrt(64) = 1.28 above zero (the
best possible loss is 5.68 of ln 1,024 = 6.93 for tiny, 9.15 of 10.40 for agent), and a copy circuit
would have to form through frozen random weights on that flat surface; none did. The bench model
has room (a best-case loss of 0.29) but trains at about 21 tokens a second on this CPU. Hence the
bench's default copy model, `bench.speculation_copier`, whose weights are set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench import hosts
from bench.figures import progress
from bench.jobs import served_model
from bench.results.record import Record
from bench.speculation_data import write_edit_dataset
from mlxhost import demo
from mlxhost.client.admin import AdminClient, Target

MADE = "made.json"
TRAIN_SEED = 7  # the training files' seed; the bench's own files come from other seeds
NEVER_EVAL = 1_000_000  # steps_per_eval: mlx-lm still validates before the first and the last iteration


@dataclass(frozen=True)
class CopyTraining(Record):
    """Everything the copy model's training depends on: the base model, the data, the job's options."""

    base: str  # the demo size fine-tuned
    file_lines: int  # lines of each training file
    train_examples: int
    valid_examples: int
    iters: int
    batch_size: int
    rank: int
    learning_rate: float
    max_seq_length: int
    num_layers: int = -1  # every layer
    seed: int = 0

    def job_options(self, data: Path) -> dict[str, Any]:
        """The `finetune` job's options, by their names on the wire."""
        return {
            "data": str(data),
            "iters": self.iters,
            "batch_size": self.batch_size,
            "rank": self.rank,
            "learning_rate": self.learning_rate,
            "max_seq_length": self.max_seq_length,
            "num_layers": self.num_layers,
            "steps_per_report": max(1, self.iters // 10),
            "steps_per_eval": NEVER_EVAL,
            "seed": self.seed,
        }

    def key(self, base_path: Path) -> str:
        """A digest of the settings and of the base model's config (other weights, another key)."""
        config = (base_path / "config.json").read_bytes()
        settings = json.dumps(dataclasses.asdict(self), sort_keys=True).encode()
        return hashlib.sha256(config + b"\0" + settings + b"\0" + str(TRAIN_SEED).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class TrainingReport(Record):
    iteration: int
    train_loss: float
    iterations_per_s: float


@dataclass(frozen=True)
class CopyModel(Record):
    """The copy model, as made (`made.json`), and whether this run made it or found it."""

    path: str
    base_path: str
    training: CopyTraining
    finetune_job: str
    fuse_job: str
    finetune_s: float  # the fine-tune job, submit to outcome
    fuse_s: float
    reports: list[TrainingReport]  # the job's training reports
    trained_by_this_run: bool = False


class CopyModelError(RuntimeError):
    """A job of the copy model's training did not succeed."""


def build_copy_model(work: Path, training: CopyTraining, retrain: bool = False) -> CopyModel:
    """The copy model of `training`: from `work` when it was made before (unless `retrain`),
    else made now by the host's jobs (minutes to an hour on a CPU, by the settings)."""
    base_path = demo.cached_model(f"bench-{training.base}", training.base)
    folder = work / f"copy-{training.base}-{training.key(base_path)}"
    made = folder / MADE
    if made.is_file() and not retrain:
        progress(f"copy model: {folder} (made before; --retrain makes it anew)")
        return _read_made(made)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    data = write_edit_dataset(
        folder / "data", training.train_examples, training.valid_examples, training.file_lines, TRAIN_SEED
    )
    progress(
        f"copy model: fine-tuning the {training.base} demo model on {training.train_examples} edits of "
        f"{training.file_lines}-line files with the host's finetune job, then fusing ({folder})"
    )
    state = folder / "state"
    host = hosts.start("copy-model", base_path, 8, [f"--state-dir={state}"])
    with hosts.running(host):
        model = anyio.run(_train_and_fuse, host.url, training, data, base_path, folder)
    shutil.rmtree(state, ignore_errors=True)  # the jobs' records and outputs: the model is copied out
    made.write_text(json.dumps(model.to_json(), indent=2) + "\n")
    return dataclasses.replace(model, trained_by_this_run=True)


async def _train_and_fuse(
    url: str, training: CopyTraining, data: Path, base: Path, folder: Path
) -> CopyModel:
    target = Target(url=url, token=hosts.ADMIN_TOKEN)
    async with (
        httpx.AsyncClient(base_url=url, timeout=60.0) as client,
        AdminClient(target, timeout=60.0) as admin,
    ):
        model = await served_model(client)
        tuned, tuned_s, lines = await _run_job(admin, "finetune", model, training.job_options(data))
        fused, fused_s, _ = await _run_job(admin, "fuse", None, {"adapter": tuned.id})
    assert fused.result is not None  # a succeeded job has one
    destination = folder / "model"
    _copy_directory(Path(fused.result.path), destination)
    reports = [
        TrainingReport(int(line["iteration"]), float(line["train_loss"]), float(line["iterations_per_s"]))
        for line in lines
        if line.get("train_loss") is not None and line.get("iterations_per_s") is not None
    ]
    reports = [r for i, r in enumerate(reports) if i == 0 or r.iteration != reports[i - 1].iteration]
    return CopyModel(
        str(destination), str(base), training, tuned.id, fused.id, tuned_s, fused_s, reports
    )


async def _run_job(admin: AdminClient, kind: str, model: str | None, options: dict[str, Any]) -> Any:
    """Submit a job and follow its log to its outcome: (its record, its seconds, its progress lines)."""
    began = time.perf_counter()
    record = await admin.submit_job(kind, model, **options)
    lines: list[dict[str, Any]] = []
    async for event in admin.job_events(record.id):
        if event.type == "progress":
            line = dict(event.data)
            lines.append(line)
            if line.get("train_loss") is not None and line.get("iterations_per_s") is not None:
                progress(
                    f"  {kind} {record.id}: iteration {line['iteration']}/{line.get('total')}, "
                    f"train loss {line['train_loss']:.3f}, {line['iterations_per_s']:.2f} it/s"
                )
        elif event.terminal:
            break
    record = await admin.job(record.id)
    if record.state != "succeeded" or record.result is None:
        raise CopyModelError(f"the {kind} job {record.id} ended {record.state}: {record.error}")
    return record, time.perf_counter() - began, lines


def _copy_directory(source: Path, destination: Path) -> None:
    """`source` copied to `destination`, which appears whole or not at all."""
    partial = destination.parent / f".{destination.name}.{os.getpid()}-{uuid.uuid4().hex}"
    shutil.copytree(source, partial)
    os.replace(partial, destination)


def _read_made(made: Path) -> CopyModel:
    data = json.loads(made.read_text())
    return CopyModel(
        path=data["path"],
        base_path=data["base_path"],
        training=CopyTraining(**data["training"]),
        finetune_job=data["finetune_job"],
        fuse_job=data["fuse_job"],
        finetune_s=data["finetune_s"],
        fuse_s=data["fuse_s"],
        reports=[TrainingReport(**report) for report in data["reports"]],
    )
