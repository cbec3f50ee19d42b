"""`mlxhost pull REPO --quantize BITS` (or `--dtype`) on this machine: the pulled checkpoint converted
into an MLX model of its own, by the same job process a host runs (`python -m mlxhost.job`, the
quantize kind, mlx-lm's `convert`), so that this command never imports MLX itself.

The model goes to `<state_dir>/models/<owner>--<name>-q<BITS>` (or `-<dtype>`), beside a
`source.json` naming the repo and commit it came from; `mlxhost serve --model PATH` serves it, and
`mlxhost models` lists it. The pulled checkpoint stays in the Hugging Face cache.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from mlxhost.runtime.children import python_module
from mlxhost.wire.admin.jobs import JobState, LaunchedJob, parse_log_line
from mlxhost.client.library import resolve_state_dir
from mlxhost.wire.layout import MODELS_DIR

__all__ = ["convert_here", "converted_name"]

DTYPE_SUFFIX = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def converted_name(repo: str, bits: int | None, dtype: str | None) -> str:
    suffix = f"q{bits}" if bits is not None else DTYPE_SUFFIX.get(dtype or "", dtype or "")
    return f"{repo.replace('/', '--')}-{suffix}"


def convert_here(
    repo: str, commit: str, snapshot: Path, bits: int | None, dtype: str | None, state_dir: str | None, *, quiet: bool
) -> int:
    """Convert `snapshot` (a pulled transformers checkpoint); the exit status, the model's folder on stdout."""
    models = resolve_state_dir(state_dir) / MODELS_DIR
    output = models / converted_name(repo, bits, dtype)
    if output.exists():
        print(f"mlxhost pull: {output} exists already: serve it (mlxhost serve --model {output}), or remove it first",
              file=sys.stderr)  # fmt: skip
        return 1
    models.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlxhost-convert-") as work:
        log = Path(work) / "log.jsonl"
        spec = LaunchedJob(
            version=LaunchedJob.VERSION, id="local", kind="quantize", model_path=str(snapshot), output=str(output),
            log=str(log), options={"bits": bits, "dtype": dtype, "group_size": 64},
        )  # fmt: skip
        spec_file = Path(work) / "spec.json"
        spec_file.write_text(json.dumps(spec.to_json()))
        if not quiet:
            what = f"{bits} bits" if bits is not None else dtype
            print(f"converting {repo} to {what} into {output}", file=sys.stderr, flush=True)
        # Its stdin stays open while it runs: the job reads its end as "the parent has gone".
        # mlx-lm prints to stdout: that goes to stderr, so that stdout is the model's folder alone.
        process = subprocess.Popen(
            python_module("mlxhost.job", str(spec_file)), stdin=subprocess.PIPE, stdout=sys.stderr
        )
        try:
            process.wait()
        except KeyboardInterrupt:
            process.terminate()
            process.wait()
            print("\nmlxhost pull: the conversion was interrupted; nothing of it is kept", file=sys.stderr)
            return 130
        finally:
            if process.stdin is not None:
                process.stdin.close()
        terminal = _terminal(log)
    if terminal is None or terminal[0] != JobState.SUCCEEDED.value:
        why = terminal[1] if terminal is not None else f"the job process exited with status {process.returncode}"
        print(f"mlxhost pull: converting {repo} failed: {why}", file=sys.stderr)
        return 1
    (output / "source.json").write_text(json.dumps({"repo": repo, "commit": commit, "bits": bits, "dtype": dtype}))
    if not quiet:
        print(f"converted: serve it with: mlxhost serve --model {output}", file=sys.stderr)
    print(str(output), flush=True)
    return 0


def _terminal(log: Path) -> tuple[str, str] | None:
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            event = parse_log_line(line)
        except ValueError:
            continue
        if event.terminal:
            return event.type, str(event.data.get("error", ""))
    return None
