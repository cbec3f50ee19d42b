"""What a job made, as a model: its name, where it loads from, and what the pool says of it.

    finetune  <model>-lora-<id>     the base model, with the job's adapters loaded over it
    quantize  <model>-q<bits>-<id>  the job's output directory
    fuse      <model>-fused-<id>    the job's output directory

The name carries the job's id, so it never collides with a configured model or another job's.
`serve_output` registers it with the pool, once, when the job succeeds and when a later host starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mlxhost.host.jobs.records import JobRecords
from mlxhost.host.workers.pool import ModelPool
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin.jobs import JobKind, JobRecord, JobResult

__all__ = ["JobModel", "job_model", "serve_output"]


@dataclass(frozen=True)
class JobModel:
    spec: ModelSpec
    path: Path  # the model directory the worker loads (the base, for adapters)
    origin: Mapping[str, str]  # /v1/models' metadata for it


def job_model(record: JobRecord, output: Path) -> JobModel:
    """The model a succeeded job's `output` serves as; ValueError when there is nothing to serve."""
    if not output.is_dir():
        raise ValueError(f"it wrote no output at {output}")
    origin = {"job": record.id, "kind": record.kind, "base": record.model}
    kind = JobKind(record.kind)
    if kind is JobKind.FINETUNE:
        base = Path(str(record.options["model_path"]))
        name = f"{record.model}-lora-{record.id}"
        return JobModel(ModelSpec(name, str(base), adapter=str(output)), base, origin)
    suffix = f"q{record.options['bits']}" if kind is JobKind.QUANTIZE else "fused"
    name = f"{record.model}-{suffix}-{record.id}"
    return JobModel(ModelSpec(name, str(output)), output, origin)


def serve_output(record: JobRecord, output: Path, pool: ModelPool, records: JobRecords) -> None:
    """Serve what a succeeded job made as a model, its result recorded; OSError or ValueError if unusable."""
    model = job_model(record, output)
    if record.result is None:
        records.update(record.id, result=JobResult(model=model.spec.id, path=str(output)))
    if pool.resolve_exact(model.spec.id) is None:
        pool.register(model.spec, model.path, model.origin)
