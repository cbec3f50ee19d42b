"""`mlxhost jobs`: submit, list, show, follow and cancel a host's managed jobs (fine-tune, quantize, fuse).

Each command is one call of the admin API (see `AdminClient`) and an exit status a script can
trust: 0 when it did what was asked, 1 when the host said no to something that exists (a job that
failed, or is already over), 2 when the request itself could not be made (a bad argument the host
names, an unknown job, no host, a wrong token). `tail` exits 0 only if the job succeeded.

What the host sent is printed with its control characters escaped: a model name or an error
message goes straight to the operator's terminal. The formatting functions here are pure, so
that the tests read them without a host.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

import anyio
import httpx

from mlxhost.client.admin import AdminClient, AdminRefused, EventStreamCut, HostNotFound, Target, find_target
from mlxhost.client.human import duration, size
from mlxhost.wire.admin import BadRecord
from mlxhost.wire.admin.jobs import JobLogEvent, JobProgress, JobRecord, JobState
from mlxhost.wire.inert import escape_controls

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "TailPrinter",
    "outcome_line",
    "progress_line",
    "pull_on_host",
    "render_job",
    "render_jobs",
    "run_jobs",
]

EXIT_OK = 0
EXIT_FAILED = 1  # the job failed, was cancelled or interrupted; or it is already over
EXIT_USAGE = 2  # a bad request, an unknown job, or no host to ask (as argparse exits on bad flags)

BAR_WIDTH = 20
RESUME_TRIES = 5  # reconnections in a row before `tail` gives up on a host that went away
RESUME_FIRST_S = 0.5
RESUME_MAX_S = 4.0

# The `submit` flags that become the job's options, by their name on the wire.
OPTIONS = (
    "data", "iters", "batch_size", "learning_rate", "rank", "num_layers", "bits", "group_size", "adapter",
)  # fmt: skip

T = TypeVar("T")


class _Exit(Exception):
    """What a command prints on stderr, and the status it ends with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def run_jobs(action: str, url: str | None, unix: str | None, token: str | None, **args: Any) -> int:
    """`mlxhost jobs ACTION ...`: the exit status. `args` are the action's own flags."""
    try:
        target = find_target(url, unix, token)
    except HostNotFound as exc:
        print(f"mlxhost: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        match action:
            case "submit":
                return _submit(target, args)
            case "list":
                return _list(target, args["json"])
            case "show":
                return _show(target, args["id"], args["json"])
            case "tail":
                return _tail(target, args["id"], sys.stdout)
            case "cancel":
                return _cancel(target, args["id"])
        raise ValueError(f"unknown jobs action {action!r}")
    except _Exit as exc:
        print(f"mlxhost: {exc}", file=sys.stderr)
        return exc.status


def pull_on_host(
    repo: str,
    revision: str,
    url: str | None,
    unix: str | None,
    token: str | None,
    *,
    quiet: bool = False,
    quantize: int | None = None,
    dtype: str | None = None,
) -> int:
    """`mlxhost pull --url URL REPO`: the host pulls it as a job, and this follows the job to its end."""
    if dtype is not None:
        print("mlxhost: --dtype is for a pull on this machine; a host's pull takes --quantize", file=sys.stderr)
        return EXIT_USAGE
    try:
        target = find_target(url, unix, token)
    except HostNotFound as exc:
        print(f"mlxhost: {exc}", file=sys.stderr)
        return EXIT_USAGE
    model = repo if revision == "main" else f"{repo}@{revision}"
    try:
        record = _call(target, lambda client: client.pull_model(model, quantize))
        if not quiet:
            print(f"pull job {record.id} on {target.describe()} ({record.state})", file=sys.stderr)
            return _tail(target, record.id, sys.stderr)
        return _wait_quietly(target, record.id)
    except _Exit as exc:
        print(f"mlxhost: {exc}", file=sys.stderr)
        return exc.status


def _wait_quietly(target: Target, job_id: str) -> int:
    while True:
        record = _call(target, lambda client: client.job(job_id))
        if record.job_state.terminal:
            if record.job_state is not JobState.SUCCEEDED:
                print(f"mlxhost: job {job_id} {record.state}: {record.error}", file=sys.stderr)
            return EXIT_OK if record.job_state is JobState.SUCCEEDED else EXIT_FAILED
        time.sleep(0.5)


def _call(target: Target, request: Callable[[AdminClient], Awaitable[T]]) -> T:
    """One request to the host; what goes wrong as an `_Exit` that says what, and how to exit."""

    async def call() -> T:
        async with AdminClient(target) as client:
            return await request(client)

    try:
        return anyio.run(call)
    except AdminRefused as exc:
        raise _Exit(_refusal(exc), EXIT_FAILED if exc.status_code == 409 else EXIT_USAGE) from None
    except (httpx.TransportError, OSError) as exc:
        raise _Exit(f"cannot reach {target.describe()}: {exc}", EXIT_USAGE) from None
    except httpx.HTTPStatusError as exc:
        raise _Exit(_status_error(target, exc.response), EXIT_USAGE) from None
    except (BadRecord, ValueError) as exc:  # a JSON error is a ValueError too
        raise _Exit(f"{target.describe()} answered what this client cannot read: {exc}", EXIT_USAGE) from None


def _refusal(exc: AdminRefused) -> str:
    message = escape_controls(exc.message)
    if exc.param and exc.param not in message:
        message = f"{message} ({escape_controls(exc.param)})"
    return message


def _status_error(target: Target, response: httpx.Response) -> str:
    if response.status_code == 401:
        return f"{target.describe()} answered 401: the admin token is missing or wrong (--token)"
    # The host's error document says why (jobs off on this host, say): its message, not its JSON.
    why = AdminRefused.from_response(response).message
    return f"{target.describe()} answered {response.status_code}: {escape_controls(why)}"


# -- submit, list, show, cancel ------------------------------------------------------------------


def _submit(target: Target, args: Mapping[str, Any]) -> int:
    options = {name: args.get(name) for name in OPTIONS}
    if options["data"] is not None:
        # The host runs the job in its own directory: a relative path means the caller's.
        options["data"] = str(Path(options["data"]).expanduser().resolve())
    record = _call(target, lambda client: client.submit_job(args["kind"], args.get("model"), **options))
    print(json.dumps(record.to_json(), indent=2) if args.get("json") else record.id)
    return EXIT_OK


def _list(target: Target, as_json: bool) -> int:
    records = _call(target, lambda client: client.jobs())
    if as_json:
        print(json.dumps({"object": "list", "data": [r.to_json() for r in records]}, indent=2))
    else:
        print(render_jobs(records, time.time()))
    return EXIT_OK


def _show(target: Target, job_id: str, as_json: bool) -> int:
    record = _call(target, lambda client: client.job(job_id))
    print(json.dumps(record.to_json(), indent=2) if as_json else render_job(record, time.time()))
    return EXIT_OK


def _cancel(target: Target, job_id: str) -> int:
    record = _call(target, lambda client: client.cancel_job(job_id))
    if record.job_state.terminal:
        print(f"{_text(record.id)} {record.state}")
    else:  # a running job ends when its process does: `tail` shows when
        print(f"{_text(record.id)} cancelling")
    return EXIT_OK


# -- tail ----------------------------------------------------------------------------------------


def _tail(target: Target, job_id: str, out: TextIO) -> int:
    printer = TailPrinter(out, live=out.isatty(), width=shutil.get_terminal_size().columns)
    try:
        record = _call(target, lambda client: client.job(job_id))  # an unknown id says so at once
        printer.job = record
        last = _call(target, lambda client: _follow(client, job_id, printer))
        if last is not None:  # the record says what the job made, or why it stopped
            try:
                printer.job = _call(target, lambda client: client.job(job_id))
            except _Exit:
                pass  # the outcome line can do without it
    except KeyboardInterrupt:
        printer.interrupted()
        print(f"mlxhost: stopped following {job_id}; the job goes on", file=sys.stderr)
        return 130
    except _Exit:
        printer.interrupted()
        raise
    if last is None:
        raise _Exit(f"the log of {job_id} ended without an outcome", EXIT_FAILED)
    printer.finish(last)
    return EXIT_OK if last.type == JobState.SUCCEEDED else EXIT_FAILED


async def _follow(client: AdminClient, job_id: str, printer: TailPrinter) -> JobLogEvent | None:
    """Print the job's log as it comes, resuming after a cut; the terminal event, if one came."""
    after: int | None = None
    tries, delay = 0, RESUME_FIRST_S
    terminal: JobLogEvent | None = None
    while True:
        try:
            async for event in client.job_events(job_id, after=after):
                tries, delay = 0, RESUME_FIRST_S
                if event.terminal:
                    terminal = event
                else:
                    printer.show(event)
            return terminal
        except (EventStreamCut, httpx.TransportError):
            tries += 1
            if tries > RESUME_TRIES:
                raise
            after = client.last_log_line
            await anyio.sleep(delay)
            delay = min(delay * 2, RESUME_MAX_S)


@dataclass
class _Losses:
    train: float | None = None
    val: float | None = None


class TailPrinter:
    """Prints a job's log: on a terminal (`live`) progress rewrites one line in place, elsewhere
    each progress event is its own line. Other events are lines of their own; `finish` prints the
    last progress for good and the outcome."""

    def __init__(self, out: TextIO, live: bool, width: int = 80) -> None:
        self.out = out
        self.live = live
        self.width = max(20, width - 1)  # never the last column: some terminals wrap there
        self.job: JobRecord | None = None
        self.losses = _Losses()
        self._progress: str | None = None  # the live line now shown
        self._started_at: int | None = None

    def show(self, event: JobLogEvent) -> None:
        progress = event.progress()
        if progress is not None:
            # Reports carry the train loss and evaluations the val loss: keep the latest of each.
            if progress.train_loss is not None:
                self.losses.train = progress.train_loss
            if progress.val_loss is not None:
                self.losses.val = progress.val_loss
            line = progress_line(progress, self.losses.train, self.losses.val, bar=self.live)
            if self.live:
                self._progress = line[: self.width]
                self.out.write(f"\r{self._progress}\x1b[K")
                self.out.flush()
            else:
                self._line(line)
            return
        if event.type == "started":
            self._started_at = event.ts
        text = event_line(event)
        if text is not None:
            self._line(text)

    def finish(self, terminal: JobLogEvent) -> None:
        if self._progress is not None:
            self.out.write("\n")  # the last progress stays on the screen
            self._progress = None
        self.out.write(outcome_line(terminal, self.job, self._started_at) + "\n")
        self.out.flush()

    def interrupted(self) -> None:
        """Leave the live line as it is, and the cursor below it."""
        if self._progress is not None:
            self.out.write("\n")
            self.out.flush()
            self._progress = None

    def _line(self, text: str) -> None:
        if self._progress is not None:  # above the live line, which is then drawn again
            self.out.write(f"\r\x1b[K{text}\n{self._progress}")
        else:
            self.out.write(text + "\n")
        self.out.flush()


def progress_line(progress: JobProgress, train: float | None, val: float | None, bar: bool) -> str:
    """`iter 40/100 ████████░░░░ 40%  train 2.345  val 2.301  3.2 it/s` (the bar only if `bar`);
    a pull's in bytes: `312.4 MiB/2.1 GiB ████░░░░ 15%  40.1 MiB/s  model.safetensors`."""
    if progress.bytes_per_s is not None:
        percent = f"{progress.fraction * 100:.0f}%"
        line = f"{size(progress.iteration)}/{size(progress.total)} " + (
            f"{progress_bar(progress.fraction, BAR_WIDTH)} {percent}" if bar else f"({percent})"
        )
        line += f"  {size(progress.bytes_per_s)}/s"
        return line + (f"  {escape_controls(progress.file)}" if progress.file else "")
    parts = [f"iter {progress.iteration}/{progress.total}"]
    percent = f"{progress.fraction * 100:.0f}%"
    parts.append(f"{progress_bar(progress.fraction, BAR_WIDTH)} {percent}" if bar else f"({percent})")
    line = " ".join(parts)
    if train is not None:
        line += f"  train {train:.3f}"
    if val is not None:
        line += f"  val {val:.3f}"
    if progress.iterations_per_s is not None:
        line += f"  {progress.iterations_per_s:.2f} it/s"
    if progress.peak_memory_bytes is not None:
        line += f"  peak {size(progress.peak_memory_bytes)}"
    return line


def progress_bar(fraction: float, width: int) -> str:
    filled = max(0, min(width, round(width * fraction)))
    return "█" * filled + "░" * (width - filled)


def event_line(event: JobLogEvent) -> str | None:
    """A log event other than progress as one line; None for one with nothing to say."""
    if event.type == "started":
        return "started"
    if event.type == "message":
        text = event.data.get("text")
        return _text(str(text)) if text is not None else None
    if event.terminal:
        return outcome_line(event, None, None)
    return f"{_text(event.type)}: " + " ".join(f"{_text(k)}={_text(str(v))}" for k, v in event.data.items())


def outcome_line(terminal: JobLogEvent, job: JobRecord | None, started_at: int | None) -> str:
    """`succeeded in 12.3s: model qwen-lora-j1 (/path)`, or `failed after 3.0s: why`."""
    started = job.started_at if job is not None and job.started_at is not None else started_at
    took = ""
    if started is not None and terminal.ts:
        word = "in" if terminal.type == JobState.SUCCEEDED else "after"
        took = f" {word} {duration(max(0, terminal.ts - started) / 1000)}"
    if terminal.type == JobState.SUCCEEDED:
        result = job.result if job is not None else None
        if result is not None:
            return f"{terminal.type}{took}: model {_text(result.model)} ({_text(result.path)})"
        output = terminal.data.get("output")
        return f"{terminal.type}{took}" + (f": {_text(str(output))}" if output else "")
    error = terminal.data.get("error") or (job.error if job is not None else None)
    return f"{_text(terminal.type)}{took}" + (f": {_text(str(error))}" if error else "")


# -- tables --------------------------------------------------------------------------------------


def render_jobs(records: list[JobRecord], now: float) -> str:
    if not records:
        return "no jobs"
    rows = [
        [
            r.id, r.kind, r.model, r.state, _progress_cell(r), duration(_age(r, now)),
            r.result.model if r.result is not None else (r.error or ""),
        ]
        for r in records
    ]  # fmt: skip
    header = ["ID", "KIND", "MODEL", "STATE", "PROGRESS", "AGE", "RESULT"]
    rows = [[_text(str(c)) for c in row] for row in rows]
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=False)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in [header, *rows]
    )


def render_job(record: JobRecord, now: float) -> str:
    lines = [f"job {_text(record.id)}: {record.kind} of {_text(record.model)}, {record.state}"]
    times = [f"created {duration(max(0.0, now - record.created_at / 1000))} ago"]
    if record.started_at is not None:
        end = record.ended_at / 1000 if record.ended_at is not None else now
        word = "ran" if record.ended_at is not None else "running"
        times.append(f"{word} {duration(max(0.0, end - record.started_at / 1000))}")
    if record.pid is not None:
        times.append(f"pid {record.pid}")
    lines.append("  " + ", ".join(times))
    if record.options:
        options = (f"{_text(k)}={_text(json.dumps(v))}" for k, v in record.options.items())
        lines.append("  options: " + " ".join(options))
    if (progress := record.progress) is not None:
        line = progress_line(progress, progress.train_loss, progress.val_loss, bar=False)
        lines.append(f"  progress: {line}")
    if (result := record.result) is not None:
        lines.append(f"  model: {_text(result.model)}")
        lines.append(f"  output: {_text(result.path)}")
    if record.error:
        lines.append(f"  error: {_text(record.error)}")
    return "\n".join(lines)


def _progress_cell(record: JobRecord) -> str:
    progress = record.progress
    if progress is None:
        return "-"
    return f"{progress.iteration}/{progress.total}"


def _age(record: JobRecord, now: float) -> float:
    """How long it ran, or has been running or waiting."""
    start = record.started_at if record.started_at is not None else record.created_at
    end = record.ended_at / 1000 if record.ended_at is not None else now
    return max(0.0, end - start / 1000)


def _text(value: str) -> str:
    return escape_controls(value)
