"""`fuse`: a fine-tune's LoRA adapters fused into its base model, as `mlx_lm.fuse` fuses them.

`mlx_lm.fuse` has no function to call, only `main()` reading the command line, so its few steps are
repeated here: load the model with the adapters, replace every module that can `fuse()` with its
fused self, and `save` model, config and tokenizer. Like `mlx_lm.fuse` without `--dequantize`, a
quantized base stays quantized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from mlx.utils import tree_unflatten
from mlx_lm.tokenizer_utils import TokenizerWrapper
from mlx_lm.utils import load, save

from mlxhost.job import JobError
from mlxhost.job.log import JobLog
from mlxhost.job.spec import model_directory
from mlxhost.job.stop import Stop
from mlxhost.wire.admin.jobs import JobProgress, LaunchedJob

__all__ = ["fuse"]

STEPS = 3  # load, fuse, save


def fuse(spec: LaunchedJob, partial: Path, log: JobLog, stop: Stop) -> None:
    adapter = Path(spec.adapter_path or "")
    model_directory(spec)
    if not (adapter / "adapter_config.json").is_file():
        raise JobError(f"no adapter_config.json in the adapter directory {adapter}")

    log.progress(JobProgress(iteration=0, total=STEPS))
    loaded = load(spec.model_path, adapter_path=str(adapter), return_config=True)
    model, tokenizer, config = cast("tuple[Any, TokenizerWrapper, dict[str, Any]]", loaded)
    log.progress(JobProgress(iteration=1, total=STEPS))

    fused = [(name, m.fuse(dequantize=False)) for name, m in model.named_modules() if hasattr(m, "fuse")]
    if not fused:
        raise JobError(f"the adapters in {adapter} add no LoRA layers to fuse")
    model.update_modules(tree_unflatten(fused))
    log.message(f"fused {len(fused)} LoRA layers")
    log.progress(JobProgress(iteration=2, total=STEPS))

    save(partial, spec.model_path, model, tokenizer, config, donate_model=False)
    log.progress(JobProgress(iteration=3, total=STEPS))
