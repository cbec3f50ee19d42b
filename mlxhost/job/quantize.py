"""`quantize`: a quantized copy of a model, made by `mlx_lm.convert` as `mlx_lm.convert -q` makes it.

`convert` loads the weights lazily, so the real work (quantizing and writing every shard) happens
inside its final save: there is no step boundary worth reporting within it. Progress is therefore
two lines, before and after; a cancel stops it at once (see `mlxhost.job.stop`), and what it had
written is removed with the partial directory.
"""

from __future__ import annotations

from pathlib import Path

from mlx_lm.convert import convert

from mlxhost.job.log import JobLog
from mlxhost.job.spec import model_directory, option
from mlxhost.job.stop import Stop
from mlxhost.wire.admin.jobs import JobProgress, LaunchedJob

__all__ = ["quantize"]


def quantize(spec: LaunchedJob, partial: Path, log: JobLog, stop: Stop) -> None:
    dtype = spec.options.get("dtype")
    # A dtype alone (`mlxhost pull --dtype bfloat16`) converts without quantizing.
    bits = option(spec.options, "bits", int, 4) if spec.options.get("bits") is not None or dtype is None else None
    group_size = option(spec.options, "group_size", int, 64)
    model_directory(spec)
    log.progress(JobProgress(iteration=0, total=1))
    what = f"{bits} bits, group size {group_size}" if bits is not None else str(dtype)
    log.message(f"converting {spec.model_path} to {what}")
    convert(
        spec.model_path, str(partial), quantize=bits is not None, q_bits=bits or 4, q_group_size=group_size,
        dtype=dtype if isinstance(dtype, str) else None,
    )  # fmt: skip
    log.progress(JobProgress(iteration=1, total=1))
