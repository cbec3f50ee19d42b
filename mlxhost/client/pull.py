"""`mlxhost pull REPO[@REVISION]`: a model from the Hugging Face Hub into the local cache, with progress.

On a terminal a progress bar (tqdm's: total bytes, rate, time left, the file being fetched); into
a pipe one plain line per file as it ends; `--quiet` prints only errors. The snapshot's folder goes
to stdout at the end, so that a script can take it (`mlxhost serve --model "$(mlxhost pull R)"`).

`--url`/`--unix` ask a running host to pull instead (`POST /admin/models/pull`, a job of that
host): the host downloads, this command follows the job's progress, and the model is served by
that host at once. Ctrl-C there leaves the host's pull running (`mlxhost jobs cancel ID` stops it).

Exit statuses: 0 pulled, 1 the pull failed (the message names the repo and what to do), 2 a bad
argument, 130 interrupted (what arrived is kept: the same command resumes).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from mlxhost.catalog import hub
from mlxhost.catalog.hub import PullError, PullPlan, PullProgress
from mlxhost.client.human import duration, size

__all__ = ["ProgressView", "run_pull"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ProgressView:
    """What a pull shows: a bar on a terminal, a line per file elsewhere, nothing when quiet."""

    def __init__(self, stream: TextIO, *, quiet: bool = False, terminal: bool | None = None) -> None:
        self.stream = stream
        self.quiet = quiet
        self.terminal = stream.isatty() if terminal is None else terminal
        self._bar: Any = None
        self._lock = threading.Lock()
        self._files: dict[str, int] = {}

    def planned(self, plan: PullPlan) -> None:
        self._files = {f.name: f.size for f in plan.files}
        if self.quiet:
            return
        what = f"{plan.repo}@{plan.commit[:12]}: {len(plan.files)} files, {size(plan.total)}"
        if plan.present:
            what += f" ({size(plan.present)} already here)"
        print(f"pulling {what}", file=self.stream, flush=True)
        if self.terminal:
            from tqdm import tqdm

            # The terminal's width now (a terminal of unknown size, as some ptys are, gets 80).
            width = shutil.get_terminal_size((80, 24)).columns or 80
            self._bar = tqdm(
                total=plan.total, initial=plan.present, unit="B", unit_scale=True, unit_divisor=1024,
                file=self.stream, ncols=width, leave=True, mininterval=0.2,
            )  # fmt: skip

    def update(self, progress: PullProgress) -> None:
        if self.quiet:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.set_description_str(_short(progress.file or ""), refresh=False)
                self._bar.update(progress.done - self._bar.n)
            elif progress.finished_file is not None:
                name = progress.finished_file
                print(
                    f"  {name}  {size(self._files.get(name, 0))}  ({progress.files_done}/{progress.files_total})",
                    file=self.stream,
                    flush=True,
                )

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None


def _short(name: str, width: int = 32) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def run_pull(
    reference: str,
    *,
    quiet: bool = False,
    url: str | None = None,
    unix: str | None = None,
    token: str | None = None,
    quantize: int | None = None,
    dtype: str | None = None,
    state_dir: str | None = None,
) -> int:
    """The command: pull here (or on the host `url`/`unix` names); an exit status."""
    try:
        repo, revision = hub.parse_reference(reference)
    except ValueError as exc:
        print(f"mlxhost pull: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if url is not None or unix is not None:
        from mlxhost.client.jobs import pull_on_host

        return pull_on_host(repo, revision, url, unix, token, quiet=quiet, quantize=quantize, dtype=dtype)
    view = ProgressView(sys.stderr, quiet=quiet)
    stop = threading.Event()
    started = time.monotonic()
    try:
        plan, folder = hub.pull(repo, revision, view.update, view.planned, stop)
    except KeyboardInterrupt:
        stop.set()
        view.close()
        print(
            "\nmlxhost pull: interrupted; what arrived is kept: run the same command to resume", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    except PullError as exc:
        view.close()
        print(f"mlxhost pull: {exc}", file=sys.stderr)
        return EXIT_FAILED
    view.close()
    converting = quantize is not None or dtype is not None
    if not quiet:
        took = time.monotonic() - started
        hint = "" if converting else f"; serve it with: mlxhost serve --model {repo}"
        print(f"pulled {repo}@{plan.commit[:12]} ({size(plan.total)}) in {duration(took)}{hint}", file=sys.stderr)
    if converting:
        from mlxhost.client.convert import convert_here

        return convert_here(repo, plan.commit, folder, quantize, dtype, state_dir, quiet=quiet)
    print(str(Path(folder)), flush=True)
    return EXIT_OK
