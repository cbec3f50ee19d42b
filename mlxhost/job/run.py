"""One job from start to end: `started`, the kind's work into `<output>.partial`, the rename, and
exactly one terminal line, whatever happened in between.

    succeeded    the partial directory renamed to the output            exit 0
    failed       the error, on one line; the traceback on stderr        exit 1
    cancelled    SIGTERM or SIGINT                                      exit 3
    interrupted  the end of stdin: the parent has gone                  exit 4

Whatever did not succeed leaves nothing behind: the partial directory is removed.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
import traceback
from pathlib import Path
from typing import Protocol

from mlxhost.job import EXIT_FAILED, EXIT_SUCCEEDED, PARTIAL_SUFFIX, JobError
from mlxhost.job.log import JobLog
from mlxhost.job.stop import Stop, Stopped
from mlxhost.wire.admin.jobs import JobState, LaunchedJob
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

__all__ = ["Work", "partial_path", "run_job"]


class Work(Protocol):
    """A kind's work: make the result in `partial`, which does not exist yet."""

    def __call__(self, spec: LaunchedJob, partial: Path, log: JobLog, stop: Stop) -> None: ...


# Imported only when a job of that kind runs: they import mlx-lm, which takes seconds.
KINDS = {
    "finetune": ("mlxhost.job.finetune", "finetune"),
    "quantize": ("mlxhost.job.quantize", "quantize"),
    "fuse": ("mlxhost.job.fuse", "fuse"),
    "pull": ("mlxhost.job.pull", "pull"),
}


def partial_path(output: str | Path) -> Path:
    output = Path(output)
    return output.with_name(output.name + PARTIAL_SUFFIX)


def run_job(spec: LaunchedJob, log: JobLog, stop: Stop) -> int:
    """Run `spec` to its end and return the exit status; the log gets exactly one terminal line."""
    output = Path(spec.output)
    partial = partial_path(output)
    try:
        stop.install()
        log.started(spec.kind)
        if output.exists():
            raise JobError(f"the output {output} already exists")
        shutil.rmtree(partial, ignore_errors=True)  # a killed earlier attempt's leftovers
        partial.parent.mkdir(parents=True, exist_ok=True)
        module, name = KINDS[spec.kind]
        # Importing MLX initialises native extensions, which an exception raised by the signal
        # handler in their midst breaks (nanobind aborts the process): a stop waits for the end.
        with stop.polled():
            work: Work = getattr(importlib.import_module(module), name)
        work(spec, partial, log, stop)
        stop.finish()
        os.rename(partial, output)
    except BaseException as exc:
        stop.finish()
        shutil.rmtree(partial, ignore_errors=True)
        if not isinstance(exc, Stopped) and stop.requested is not None:
            # Raised inside code that wraps what it catches (importing a C extension turns it
            # into an ImportError): the stop is still what ended the job.
            exc = stop.requested
        if isinstance(exc, Stopped):
            log.write(exc.state.value, error=exc.error)
            return exc.exit_code
        if not isinstance(exc, Exception):
            raise  # SystemExit and the like: not ours to describe
        if not isinstance(exc, JobError):
            traceback.print_exc(file=sys.stderr)  # the parent keeps stderr: the details are there
        log.write(JobState.FAILED.value, error=describe(exc))
        return EXIT_FAILED
    log.write(JobState.SUCCEEDED.value, output=str(output))
    return EXIT_SUCCEEDED


def describe(exc: Exception) -> str:
    """An error on one short line: ours as they are, others with their type (a bare KeyError says
    little)."""
    text = re.sub(r"\s+", " ", str(exc)).strip()
    if not isinstance(exc, JobError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return excerpt(text, MESSAGE_CHARS)
