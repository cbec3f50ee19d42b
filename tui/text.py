"""The console's words and glyphs: an event as one line of the log, a clock time, a sparkline, a
gauge bar, a job's losses, a download's progress. Pure functions of what the model holds; the
widgets put them on the screen."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from mlxhost.client.human import duration, size
from mlxhost.client.status import sizes, transfer
from mlxhost.wire.admin import (
    AdminEvent,
    AdmissionRejected,
    ExecutionChanged,
    HostStarted,
    HostStopping,
    JobFinished,
    JobProgressed,
    JobQueued,
    JobStarted,
    ModelDownload,
    ModelEvicted,
    SessionClosed,
    SessionOpened,
    SessionProgressed,
    StreamLagged,
    StreamReset,
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRestarting,
    WorkerSpawned,
)

if TYPE_CHECKING:
    from mlxhost_tui.parts import DownloadRow, JobRow, SessionRow

__all__ = ["bar", "clock_time", "describe", "download_progress", "losses", "pulled", "sparkline"]

BLOCKS = "▁▂▃▄▅▆▇█"


def describe(event: AdminEvent, row: SessionRow | None = None) -> str:
    """One line of the event log; `row`, the row of the session a session event is about,
    says what a closed embed or rerank session did (its event counts only generated tokens)."""
    match event:
        case HostStarted(pid=pid, models=models):
            return f"host started, pid {pid}, models {', '.join(models)}"
        case HostStopping(reason=reason, grace_s=grace_s):
            return f"host stopping ({reason}, grace {grace_s}s)"
        case WorkerSpawned(worker=worker, pid=pid):
            return f"{worker}: spawned pid {pid}"
        case WorkerReady(worker=worker, pid=pid, ready_ms=ready_ms):
            return f"{worker}: ready, pid {pid}, in {ready_ms} ms"
        case WorkerExited(worker=worker, exit=exit):
            if exit.pid is None:  # it was never started
                return f"{worker}: could not be started: {exit.reason or 'unknown'}"
            how = f"signal {exit.signal}" if exit.signal else f"exit code {exit.code}"
            why = f": {exit.reason}" if exit.reason else ""
            return f"{worker}: pid {exit.pid} exited, {how} after {duration(exit.uptime_s or 0)}{why}"
        case WorkerRestarting(worker=worker, attempt=attempt, max=limit, delay_ms=delay_ms):
            delay = f", in {delay_ms} ms" if delay_ms else ""
            return f"{worker}: restarting (attempt {attempt} of {limit}{delay})"
        case WorkerExhausted(worker=worker, reason=reason):
            why = f": {reason}" if reason else "; keeps exiting"
            return f"{worker}: not restarted again{why} (r restarts it)"
        case WorkerMemory(worker=worker, memory=reading):
            return f"{worker}: memory {size(reading.active_bytes + reading.cache_bytes)}"
        case ModelEvicted(model=model, reason=reason):
            return f"{model}: unloaded ({reason})"
        case ModelDownload(model=model, repo=repo, state=state, total_bytes=total, error=error):
            # Only its start and end reach the log (ConsoleModel._download_news): its row shows the rest.
            source = "" if repo == model else f" {repo}"
            weight = f", {size(total)}" if total else ""
            if state == "downloading":
                return f"{model}: downloading{source}{weight}"
            if state == "done":
                return f"{model}: downloaded{source}{weight}"
            of = f" of {repo}" if source else ""
            return f"{model}: download{of} {state}" + (f": {error}" if error else "")
        case SessionOpened(session=sid, model=model, stream=stream, kind=kind):
            how = " (stream)" if stream else ""
            return f"{sid} opened on {model}{how if kind == 'generate' else f' ({kind})'}"
        case SessionProgressed(session=sid, tokens=tokens, tokens_per_s=rate, inputs=inputs):
            if inputs:
                return f"{sid}: {inputs} inputs"
            return f"{sid}: {tokens} tokens, {rate} tok/s"
        case SessionClosed(session=sid, tokens=tokens, age_ms=age_ms, outcome=outcome):
            detail = outcome.finish_reason or outcome.reason or outcome.code or ""
            if outcome.message:
                detail = f"{detail}: {outcome.message}"
            did = f"{tokens} tokens"
            if row is not None and row.pooled:
                did = f"{row.inputs} inputs"  # its event counts generated tokens: none
            why = f" ({detail})" if detail else ""
            line = f"{sid} {outcome.kind}{why}, {did} in {duration(age_ms / 1000)}"
            if outcome.drafted_tokens:
                line += f", {outcome.accepted_tokens or 0} of {outcome.drafted_tokens} drafts accepted"
            return f"{line}; skipped {', '.join(outcome.ignored)}" if outcome.ignored else line
        case AdmissionRejected(session=session, model=model, active=active, queued=queued):
            return f"{session or 'a request'} rejected by {model}: {active} running, {queued} waiting"
        case JobQueued(job=job, kind=kind, model=model):
            return f"{job}: {kind} of {model} queued"
        case JobStarted(job=job, pid=pid):
            return f"{job}: started, pid {pid}"
        case JobProgressed(job=job, iteration=iteration, total=total, train_loss=train, val_loss=val):
            return f"{job}: {iteration}/{total}" + losses(train, val)
        case JobFinished(job=job, state=state, error=error, model=model):
            if model:
                return f"{job}: {state}, serves as {model}"
            return f"{job}: {state}" + (f": {error}" if error else "")
        case ExecutionChanged(owner=owner, change="waiting"):
            return f"{owner}: waits for the running sessions to finish"
        case ExecutionChanged(owner=owner, change="held", paused=paused):
            return f"{owner}: runs alone" + (f", {', '.join(paused)} paused" if paused else "")
        case ExecutionChanged(owner=owner, change="released"):
            return f"{owner}: released; the workers serve again"
        case StreamReset():
            return "missed too many events; re-reading the state"
        case StreamLagged():
            return "dropped by the host for reading too slowly; reconnecting"
    # A type this console does not know: its fields as they came.
    return " ".join(f"{k}={v}" for k, v in event.payload().items())


def download_progress(download: DownloadRow) -> str:
    """`45% 1.2/2.3 GiB 40.0 MiB/s`; a finished download, all of it, whatever the last tick said."""
    if download.state == "done" and download.total_bytes:
        return transfer(download.total_bytes, download.total_bytes)
    return transfer(download.done_bytes, download.total_bytes, download.bytes_per_s)


def pulled(job: JobRow) -> str:
    """Where a pull job is, in bytes: `312.4 MiB/2.1 GiB`, as its log says it."""
    return sizes(job.iteration, job.total) if job.total > 0 else size(job.iteration)


def losses(train: float | None, val: float | None) -> str:
    """`, train loss 2.345, val loss 2.301`, with what is known."""
    text = f", train loss {train:.3f}" if train is not None else ""
    return text + (f", val loss {val:.3f}" if val is not None else "")


def clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def sparkline(values: Iterable[float], width: int) -> str:
    """The last `width` values as block characters, scaled between their least and greatest."""
    recent = list(values)[-width:]
    if not recent:
        return ""
    low, high = min(recent), max(recent)
    if high == low:
        return BLOCKS[0] * len(recent)
    top = len(BLOCKS) - 1
    return "".join(BLOCKS[round((v - low) / (high - low) * top)] for v in recent)


def bar(value: int, limit: int | None, width: int) -> str:
    """A gauge: `value` of `limit` as filled and empty cells."""
    if not limit:
        return "·" * width
    filled = min(width, round(width * value / limit))
    if value and not filled:
        filled = 1
    return "█" * filled + "░" * (width - filled)
