"""What a job made, as a model: its name, where it loads from, and what the pool says of it.

    finetune  <model>-lora-<id>     the base model, with the job's adapters loaded over it
    quantize  <model>-q<bits>-<id>  the job's output directory
    fuse      <model>-fused-<id>    the job's output directory
    pull      <repo>                the snapshot in the Hugging Face cache its `source.json` names

The name carries the job's id, so it never collides with a configured model or another job's.
`serve_output` registers it with the pool, once, when the job succeeds and when a later host starts.
"""

from __future__ import annotations

import json
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
    if kind is JobKind.PULL:
        # The job's own copy of where its files are (the job process writes it; see job/pull.py).
        source = json.loads((output / "source.json").read_text())
        snapshot = Path(str(source["path"]))
        if not (snapshot / "config.json").is_file():
            raise ValueError(f"the pulled snapshot {snapshot} has no config.json")
        origin = {"job": record.id, "kind": record.kind, "repo": record.model, "commit": str(source["commit"])}
        return JobModel(ModelSpec(record.model, record.model), snapshot, origin)
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
    if record.kind == JobKind.PULL:
        for model_id in pool.pending_for(record.model):
            pool.arrived(model_id, model.path)  # a configured model this pull was for
    if pool.resolve_exact(model.spec.id) is None:
        pool.register(model.spec, model.path, model.origin)
