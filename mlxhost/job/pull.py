"""`pull`: a model's files from the Hugging Face Hub into the local cache (`mlxhost.catalog.hub`).

The files go where every pull puts them, the Hugging Face cache, not into the job's folder: a
cancelled or interrupted pull leaves its `.incomplete` parts there, and the next pull of the repo
(a job, `mlxhost pull`, `hf download`) sends only the rest. The job's output is a `source.json`
naming the snapshot it made, which the host serves at once. Progress counts bytes, about twice a
second. This kind imports no MLX: a pull costs the serving workers nothing but the network.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from mlxhost.catalog import hub
from mlxhost.job import JobError
from mlxhost.job.log import JobLog
from mlxhost.job.stop import Stop
from mlxhost.wire.admin.jobs import JobProgress, LaunchedJob

__all__ = ["SOURCE_FILE", "pull"]

SOURCE_FILE = "source.json"  # in the output: {"repo", "revision", "commit", "path"}
# A pull moves bytes at a core's worth of CPU (TLS, hashing, writes) while the workers decode
# beside it: it yields the CPU to them, and takes what they leave.
NICENESS = 10
PROGRESS_EVERY = 0.5  # seconds between progress lines


def pull(spec: LaunchedJob, partial: Path, log: JobLog, stop: Stop) -> None:
    os.nice(NICENESS)
    repo = str(spec.options.get("repo") or spec.model_path)
    revision = str(spec.options.get("revision") or "main")
    cancel = threading.Event()
    last = 0.0

    def planned(plan: hub.PullPlan) -> None:
        log.message(
            f"pulling {repo}@{plan.commit[:12]}: {len(plan.files)} files, {plan.total} bytes "
            f"({plan.present} already in the cache)"
        )
        log.progress(JobProgress(iteration=plan.present, total=plan.total, bytes_per_s=0.0))

    def progress(p: hub.PullProgress) -> None:
        nonlocal last
        now = time.monotonic()
        if p.finished_file is None and now - last < PROGRESS_EVERY:
            return
        last = now
        log.progress(JobProgress(iteration=p.done, total=p.total, bytes_per_s=round(p.rate, 1), file=p.file))

    try:
        found, folder = hub.pull(repo, revision, progress, planned, cancel)
    except hub.PullError as exc:
        raise JobError(str(exc)) from None
    finally:
        cancel.set()  # a Stopped raised in this thread: every transfer ends at its next chunk
    partial.mkdir(parents=True)
    source = {"repo": repo, "revision": revision, "commit": found.commit, "path": str(folder)}
    (partial / SOURCE_FILE).write_text(json.dumps(source))
    log.progress(JobProgress(iteration=found.total, total=found.total, bytes_per_s=0.0))
