"""A job request checked against this host: its model, its dataset, its adapter.

`parse_job_request` (the wire) checked the body's shape; this checks what only the host can know,
before anything is created, so that a refused submission leaves nothing behind. Each refusal is a
400 naming the field. A path is taken from the admin API only (never from /v1), and a job writes
only under the state directory, never where a request says.

A fine-tune's dataset is read whole here, every line through the reader the job itself uses
(`mlxhost.wire.admin.dataset_lines`), so that a file the host accepts the job accepts, and a bad
line 900 lines down is a 400 now rather than a failed job later. That reading (hundreds of MB,
perhaps) is done in a worker thread, in bounded memory, never on the event loop every request
shares.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin.dataset_lines import DatasetError, read_examples
from mlxhost.wire.admin.job_requests import (
    DEFAULT_NUM_LAYERS,
    FinetuneRequest,
    FuseRequest,
    JobRequest,
    PullRequest,
    QuantizeRequest,
)
from mlxhost.wire.admin.jobs import JobKind, JobRecord, JobState
from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.inert import escape_controls, excerpt

__all__ = ["ResolvedJob", "resolve"]

DATASET_FILES = ("train.jsonl", "valid.jsonl")


@dataclass(frozen=True)
class ResolvedJob:
    kind: JobKind
    model: ModelSpec  # the model the job reads
    model_path: Path
    options: dict[str, Any]  # as the record keeps them (paths absolute)
    adapter_path: Path | None = None  # fuse: the fine-tune's adapters


async def resolve(
    request: JobRequest,
    find_model: Callable[[str], tuple[ModelSpec, Path] | None],
    find_job: Callable[[str], JobRecord | None],
) -> ResolvedJob:
    """The request made concrete; InvalidRequest naming the field otherwise."""
    if isinstance(request, FuseRequest):
        return _fuse(request, find_model, find_job)
    if isinstance(request, PullRequest):
        # Nothing of this host's is read: the repo is the hub's, checked by the job's first call.
        return ResolvedJob(JobKind.PULL, ModelSpec(request.repo, request.repo), Path(request.repo), request.options())
    spec, path = _model(request.model, find_model)
    if spec.adapter is not None:
        raise InvalidRequest(
            f"model: '{spec.id}' is a model with LoRA adapters; fuse them first (a fuse job), "
            "then work on the fused model",
            param="model",
        )
    options = request.options()
    if isinstance(request, FinetuneRequest):
        data = await anyio.to_thread.run_sync(_dataset, request.data, request.batch_size)
        options["data"] = str(data)
        layers = _config(path).get("num_hidden_layers")
        if request.num_layers is None:
            # A default the user did not send must fit the model: a smaller one is adapted whole,
            # as mlx-lm does. Not told its layers here, the job fits the default once it loads it.
            known = isinstance(layers, int) and layers > 0
            options["num_layers"] = min(layers, DEFAULT_NUM_LAYERS) if known else None
        elif isinstance(layers, int) and request.num_layers > layers:
            raise InvalidRequest(
                f"num_layers: {request.num_layers}, but '{spec.id}' has {layers} layers (-1 adapts all)",
                param="num_layers",
            )
        return ResolvedJob(JobKind.FINETUNE, spec, path, options)
    assert isinstance(request, QuantizeRequest)
    if _quantized(path):
        raise InvalidRequest(f"model: '{spec.id}' is already quantized", param="model")
    return ResolvedJob(JobKind.QUANTIZE, spec, path, options)


def _fuse(
    request: FuseRequest,
    find_model: Callable[[str], tuple[ModelSpec, Path] | None],
    find_job: Callable[[str], JobRecord | None],
) -> ResolvedJob:
    adapter_job = find_job(request.adapter)
    if adapter_job is None:
        raise InvalidRequest(f"adapter: no job '{excerpt(request.adapter)}'", param="adapter")
    if adapter_job.kind != JobKind.FINETUNE or adapter_job.job_state is not JobState.SUCCEEDED:
        raise InvalidRequest(
            f"adapter: job '{adapter_job.id}' is a {adapter_job.kind} job in state {adapter_job.state}; "
            "a fuse needs a succeeded finetune",
            param="adapter",
        )
    assert adapter_job.result is not None
    spec, path = _model(request.model or adapter_job.model, find_model)
    options = {"adapter": adapter_job.id}
    return ResolvedJob(JobKind.FUSE, spec, path, options, adapter_path=Path(adapter_job.result.path))


def _model(name: str, find_model: Callable[[str], tuple[ModelSpec, Path] | None]) -> tuple[ModelSpec, Path]:
    found = find_model(name)
    if found is None:
        raise InvalidRequest(
            f"model: this host has no model '{excerpt(name)}'", param="model", code="model_not_found"
        )
    return found


def _dataset(data: str, batch_size: int) -> Path:
    """The dataset directory, every line of its files read (in a worker thread: it blocks)."""
    try:
        path = Path(data).expanduser()
    except RuntimeError:  # `~someone` for a user this host does not know
        raise InvalidRequest(
            f"data: cannot expand '{excerpt(data)}': no such user here", param="data"
        ) from None
    if not path.is_absolute():
        raise InvalidRequest(
            f"data: '{excerpt(data)}' is a relative path; give the dataset directory's absolute path",
            param="data",
        )
    try:
        if not path.is_dir():
            raise InvalidRequest(f"data: no directory at '{excerpt(data)}'", param="data")
        for name in DATASET_FILES:
            if not (path / name).is_file():
                raise InvalidRequest(
                    f"data: '{excerpt(data)}' has no {name} (a fine-tune needs {' and '.join(DATASET_FILES)})",
                    param="data",
                )
        for name in DATASET_FILES:
            _examples(path / name, batch_size)
        return path.resolve()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise InvalidRequest(
                f"data: '{excerpt(data)}' has a name too long for the filesystem (most take 255 bytes a name)",
                param="data",
            ) from None
        raise InvalidRequest(
            f"data: cannot use '{excerpt(data)}': {exc.strerror or exc}", param="data"
        ) from None


def _examples(file: Path, batch_size: int) -> None:
    """A malformed dataset is refused now, not minutes into the job, as the job would refuse it."""
    if not os.access(file, os.R_OK):
        raise InvalidRequest(f"data: the host cannot read {escape_controls(str(file))}", param="data")
    count = 0
    try:
        with file.open("rb") as handle:
            for _ in read_examples(handle, str(file)):
                count += 1
    except DatasetError as exc:
        raise InvalidRequest(f"data: {exc}", param="data") from None
    except OSError as exc:
        where = escape_controls(str(file))
        raise InvalidRequest(f"data: cannot read {where}: {exc.strerror or exc}", param="data") from None
    if count < batch_size:  # mlx-lm's batching fails on it, but only once training draws from it
        raise InvalidRequest(
            f"data: {escape_controls(str(file))} has {count} examples, fewer than batch_size={batch_size}",
            param="data",
        )


def _quantized(path: Path) -> bool:
    config = _config(path)
    return "quantization" in config or "quantization_config" in config


def _config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}
