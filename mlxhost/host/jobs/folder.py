"""One job's folder under the state directory, as the runner reads and finishes it.

<state_dir>/jobs/<id>/spec.json      what the job process was told (a LaunchedJob)
                      log.jsonl      what it said (JobLogEvent lines), and the host's last word
                      stderr.log     its own output, for when it dies without a word
                      output/        its result; made as output.partial, renamed on success
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from mlxhost.wire.admin.jobs import PARTIAL_SUFFIX, JobLogEvent, JobProgress, parse_log_line
from mlxhost.wire.inert import MESSAGE_CHARS, excerpt

__all__ = ["JobFolder", "fold_progress"]

STDERR_TAIL_BYTES = 4096


@dataclass(frozen=True)
class JobFolder:
    path: Path

    @property
    def spec(self) -> Path:
        return self.path / "spec.json"

    @property
    def log(self) -> Path:
        return self.path / "log.jsonl"

    @property
    def stderr(self) -> Path:
        return self.path / "stderr.log"

    @property
    def output(self) -> Path:
        return self.path / "output"

    def read_log(self) -> tuple[JobLogEvent | None, JobProgress | None]:
        """The log's first terminal line (None: it has none), and its progress folded."""
        try:
            text = self.log.read_bytes()
        except FileNotFoundError:
            return None, None
        progress: JobProgress | None = None
        for line in text.splitlines():
            try:
                event = parse_log_line(line)
            except ValueError:
                continue
            if event.terminal:
                return event, progress
            progress = fold_progress(progress, event)
        return None, progress

    def append(self, event: JobLogEvent) -> None:
        """The host's line, for a job that could not write its own terminal line."""
        with self.log.open("ab") as log:
            if log.tell() and not _ends_with_newline(self.log):
                log.write(b"\n")  # a torn last line stays torn, not glued to ours
            log.write(event.line().encode())

    def last_words(self, count: int = 3) -> str:
        """The last lines the process wrote to stderr, as one short inert line."""
        try:
            with self.stderr.open("rb") as file:
                file.seek(max(0, self.stderr.stat().st_size - STDERR_TAIL_BYTES))
                text = file.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return excerpt(" | ".join(lines[-count:]), MESSAGE_CHARS)

    def discard_output(self) -> None:
        """Nothing half-made stays: the output and its partial."""
        for path in (self.output, self.output.with_name(self.output.name + PARTIAL_SUFFIX)):
            shutil.rmtree(path, ignore_errors=True)

    def delete(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def fold_progress(latest: JobProgress | None, event: JobLogEvent) -> JobProgress | None:
    """The job's progress after `event`: its progress line, with what the last one knew kept."""
    progress = event.progress()
    if progress is None:
        return latest
    if latest is not None:
        # A validation line may carry only val_loss, a training line only train_loss: keep both.
        if progress.train_loss is None:
            progress = dataclasses.replace(progress, train_loss=latest.train_loss)
        if progress.val_loss is None:
            progress = dataclasses.replace(progress, val_loss=latest.val_loss)
    return progress


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as file:
        file.seek(-1, os.SEEK_END)
        return file.read(1) == b"\n"
