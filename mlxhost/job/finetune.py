"""`finetune`: LoRA adapters for a model, trained the way `mlx_lm.lora --train` trains them.

The steps are mlx-lm's own (`mlx_lm.lora.run` and `train_model`): seed, load the model, read the
datasets, freeze the model, `linear_to_lora_layers`, write `adapter_config.json` from the same
arguments `mlx_lm.lora` would have, and `train` with `TrainingArgs` and Adam. `train_model` itself is
not called because it takes no `iterate_batches`, and that is where a cancel waits: the batches
are drawn through `_stoppable`, which checks for a stop before each iteration (and each
validation batch). The output directory is then an adapter directory: `mlx_lm.load(model,
adapter_path=output)` serves it.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.lora import CONFIG_DEFAULTS
from mlx_lm.tuner.callbacks import TrainingCallback
from mlx_lm.tuner.trainer import TrainingArgs, iterate_batches, train
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import get_total_parameters, load, save_config

from mlxhost.job import JobError
from mlxhost.job.dataset import Split, read_lines, tokenize
from mlxhost.job.log import JobLog
from mlxhost.job.spec import model_directory, option
from mlxhost.job.stop import Stop
from mlxhost.wire.admin.job_requests import DEFAULT_NUM_LAYERS
from mlxhost.wire.admin.jobs import JobProgress, LaunchedJob

__all__ = ["finetune", "lora_arguments"]


def lora_arguments(spec: LaunchedJob, output: Path) -> types.SimpleNamespace:
    """The arguments `mlx_lm.lora` would run with for this job: its defaults, then our options.

    They are what `adapter_config.json` records, as `mlx_lm.lora` writes it.
    """
    options = spec.options
    data = option(options, "data", str, "")
    if not data:
        raise JobError("a fine-tune needs 'data', a directory with train.jsonl and valid.jsonl")
    args: dict[str, Any] = copy.deepcopy(CONFIG_DEFAULTS)  # nested dicts: leave mlx-lm's own alone
    args.update(
        model=spec.model_path,
        train=True,
        data=data,
        adapter_path=str(output),
        iters=option(options, "iters", int, 100),
        batch_size=option(options, "batch_size", int, 4),
        learning_rate=option(options, "learning_rate", float, 1e-5),
        num_layers=option(options, "num_layers", int, DEFAULT_NUM_LAYERS),
        steps_per_report=option(options, "steps_per_report", int, 10),
        steps_per_eval=option(options, "steps_per_eval", int, 200),
        max_seq_length=option(options, "max_seq_length", int, 2048),
        seed=option(options, "seed", int, 0),
    )
    args["lora_parameters"]["rank"] = option(options, "rank", int, 8)
    for name in ("iters", "batch_size", "steps_per_report", "steps_per_eval", "max_seq_length", "rank"):
        value = args["lora_parameters"]["rank"] if name == "rank" else args[name]
        if value < 1:
            raise JobError(f"option {name!r} must be at least 1, not {value}")
    return types.SimpleNamespace(**args)


def finetune(spec: LaunchedJob, partial: Path, log: JobLog, stop: Stop) -> None:
    args = lora_arguments(spec, Path(spec.output))
    model_directory(spec)
    train_split, valid_split = _read_splits(Path(args.data), args.batch_size)
    log.message(f"read {len(train_split)} training and {len(valid_split)} validation examples in {args.data}")

    np.random.seed(args.seed)  # as mlx_lm.lora.run, before anything draws from it
    model, tokenizer = load(spec.model_path)[:2]
    train_set, train_lengths = tokenize(train_split, tokenizer, args)
    valid_set, valid_lengths = tokenize(valid_split, tokenizer, args)
    longer = sum(n > args.max_seq_length for n in train_lengths + valid_lengths)
    log.message(
        f"{sum(train_lengths):,} training tokens, {sum(valid_lengths):,} validation tokens"
        + (f"; {longer} examples longer than max_seq_length={args.max_seq_length} are cut" if longer else "")
    )

    # mlx_lm.lora.train_model, up to the call to train():
    mx.random.seed(args.seed)
    model.freeze()
    layers = len(model.layers)
    if args.num_layers > layers:
        if spec.options.get("num_layers") is not None:
            raise JobError(f"num_layers={args.num_layers}, but the model has {layers} layers (-1 trains all)")
        args.num_layers = layers  # the default, not asked for: a smaller model is adapted whole
    linear_to_lora_layers(model, args.num_layers, args.lora_parameters)
    trainable = sum(v.size for v in dict(tree_flatten(model.trainable_parameters())).values())
    total = get_total_parameters(model)
    tuned = layers if args.num_layers < 0 else args.num_layers
    share = 100 * trainable / total
    log.message(f"training {trainable:,} of {total:,} parameters ({share:.2f}%), {tuned} of {layers} layers")

    partial.mkdir()
    save_config(vars(args), partial / "adapter_config.json")
    training_args = TrainingArgs(
        batch_size=args.batch_size,
        iters=args.iters,
        val_batches=args.val_batches,
        steps_per_report=args.steps_per_report,
        steps_per_eval=args.steps_per_eval,
        # mlx_lm.lora keeps a numbered checkpoint every `save_every` iterations so that a run can be
        # resumed; a job is never resumed (a cancel removes its output), so only the final
        # adapters are written.
        steps_per_save=args.iters + 1,
        adapter_file=str(partial / "adapters.safetensors"),
        max_seq_length=args.max_seq_length,
        grad_checkpoint=args.grad_checkpoint,
        grad_accumulation_steps=args.grad_accumulation_steps,
    )
    with stop.polled():
        train(
            model=model,
            args=training_args,
            optimizer=optim.Adam(learning_rate=args.learning_rate),
            train_dataset=train_set,
            val_dataset=valid_set,
            iterate_batches=_stoppable(stop),
            training_callback=_Reporter(log, args.iters, args.steps_per_report),
        )


def _read_splits(data: Path, batch_size: int) -> tuple[Split, Split]:
    if not data.is_dir():
        raise JobError(f"the dataset directory {data} does not exist")
    train_path, valid_path = data / "train.jsonl", data / "valid.jsonl"
    if not train_path.is_file():
        raise JobError(f"no train.jsonl in {data}")
    train_split = read_lines(train_path)
    # mlx-lm trains without validation when valid.jsonl is missing; a job does the same.
    valid_split = read_lines(valid_path) if valid_path.is_file() else Split(valid_path, [], [])
    # mlx-lm's batching fails on a split smaller than a batch, but only once training reaches it.
    if len(train_split) < batch_size:
        raise JobError(f"{train_path} has {len(train_split)} examples, fewer than batch_size={batch_size}")
    if 0 < len(valid_split) < batch_size:
        raise JobError(f"{valid_path} has {len(valid_split)} examples, fewer than batch_size={batch_size}")
    return train_split, valid_split


def _stoppable(stop: Stop) -> Callable[..., Iterator[Any]]:
    """mlx-lm's `iterate_batches`, with a safe point before each batch: between two iterations."""

    def iterate(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for batch in iterate_batches(*args, **kwargs):
            stop.check()
            yield batch

    return iterate


class _Reporter(TrainingCallback):
    """mlx-lm's training and validation reports as `progress` lines.

    Each line carries everything known so far (the last validation loss with a training report,
    and the other way round), so the latest line alone says where the job is.
    """

    def __init__(self, log: JobLog, total: int, steps_per_report: int) -> None:
        self._log = log
        self._steps_per_report = steps_per_report
        self._progress = JobProgress(iteration=0, total=total)
        self._reported = 0  # the iteration of the last training report

    def on_train_loss_report(self, train_info: dict[str, Any]) -> None:
        iteration = int(train_info["iteration"])
        # mlx-lm's rate is steps_per_report over the time since the last report; the last report
        # can come sooner (at `iters`), so rescale it to the iterations it really covers.
        steps, self._reported = iteration - self._reported, iteration
        rate = float(train_info["iterations_per_second"]) * steps / self._steps_per_report
        self._report(
            iteration=iteration,
            train_loss=float(train_info["train_loss"]),
            learning_rate=float(train_info["learning_rate"]),
            iterations_per_s=rate,
            tokens_per_s=float(train_info["tokens_per_second"]),
            peak_memory_bytes=round(float(train_info["peak_memory"]) * 1e9),  # mlx-lm reports GB
        )

    def on_val_loss_report(self, val_info: dict[str, Any]) -> None:
        self._report(iteration=int(val_info["iteration"]), val_loss=float(val_info["val_loss"]))

    def _report(self, **changes: Any) -> None:
        self._progress = dataclasses.replace(self._progress, **changes)
        self._log.progress(self._progress)
