"""`python -m mlxhost.job SPEC.json`: run the job the spec describes, then exit with its status.

See `mlxhost.job` for the contract with the parent.
"""

from __future__ import annotations

import os
import sys

from mlxhost.job import EXIT_BAD_SPEC
from mlxhost.job.log import JobLog
from mlxhost.job.run import run_job
from mlxhost.job.spec import BadSpec, load_spec
from mlxhost.job.stop import Stop
from mlxhost.runtime.shutdown import exit_now
from mlxhost.wire.admin.jobs import JobKind, JobState

USAGE = "usage: python -m mlxhost.job SPEC.json"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(USAGE, file=sys.stderr)
        return EXIT_BAD_SPEC
    try:
        spec = load_spec(argv[0])
    except BadSpec as exc:
        print(f"mlxhost job: {exc}", file=sys.stderr)
        if exc.log is not None:
            try:
                log = JobLog(exc.log)
                log.write(JobState.FAILED.value, error=str(exc))
                log.close()
            except OSError:
                pass  # the parent writes the terminal line when the job could not
        return EXIT_BAD_SPEC
    if spec.kind != JobKind.PULL:
        # A job works on local directories the parent resolved; a missing one must fail here, not
        # turn into a download from the Hugging Face hub (which mlx-lm's loader falls back to).
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        log = JobLog(spec.log)
    except OSError as exc:
        print(f"mlxhost job: cannot open the log {spec.log}: {exc}", file=sys.stderr)
        return EXIT_BAD_SPEC
    return run_job(spec, log, Stop())


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Leave without interpreter teardown once MLX is loaded (see exit_now); the log is written.
    exit_now(code)
