"""Following a job's log: every line, in order, then exactly one terminal event.

The job process appends to its log while the host reads it, so the last line may be half written:
it is kept back until its newline arrives. Once the store says the job has ended, what was written
between the last read and that moment is read too. The log may lack a terminal line (the process
was killed, or a host died under it and the next one marked it interrupted): the record supplies
one. A log with two (a job that wrote its own, then the host wrote one for it) gives only the first.

`tail` is the reader; `job_event_stream` is the SSE response around it (`retry:` first, an `id:`
per line so a client resumes with `Last-Event-ID`, then `event: end`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path

import anyio
from starlette.responses import StreamingResponse

from mlxhost.host.admin import WatchedStream
from mlxhost.wire.admin.jobs import INTERRUPTED_BY_EXIT, JobLogEvent, JobRecord, JobState, parse_log_line

__all__ = ["job_event_stream", "tail"]

POLL_INTERVAL = 0.2  # seconds between looks at a running job's log
HEARTBEAT = 10.0  # seconds of quiet before an SSE comment
RETRY_MS = 1500
READ_CHUNK = 1 << 16


async def tail(
    log: Path,
    record: Callable[[], JobRecord | None],
    *,
    after: int = 0,
    follow: bool = True,
    quiet: float | None = None,
) -> AsyncGenerator[tuple[int, JobLogEvent] | None, None]:
    """(line number, event) for each log line after line `after`, then the terminal event.

    `record` reads the job's current record from the store. With `follow`, it waits for more lines
    while the job runs; without, it stops at the end of what is written (and yields no made-up
    terminal event for a job still running). With `quiet`, it yields None after that many seconds
    without an event (a stream's cue for a heartbeat): waiting is done here, never by cancelling
    the generator from outside, which would end it.
    """
    quiet_since = anyio.current_time()
    offset = 0
    pending = b""
    number = 0
    terminal_seen = False

    def events(data: bytes, final: bool) -> list[tuple[int, JobLogEvent]]:
        nonlocal pending, number, terminal_seen
        found: list[tuple[int, JobLogEvent]] = []
        *lines, pending = (pending + data).split(b"\n")
        if final and pending.strip():
            lines.append(pending)  # the job has ended: a last line without newline is all there is
            pending = b""
        for line in lines:
            if not line.strip():
                continue
            number += 1
            try:
                event = parse_log_line(line)
            except ValueError:
                continue  # a corrupt line (a torn write): counted, so numbers stay stable, not sent
            if event.terminal:
                if terminal_seen:
                    continue
                terminal_seen = True
            if number > after:
                found.append((number, event))
        return found

    while True:
        data = await anyio.to_thread.run_sync(_read_from, log, offset)
        offset += len(data)
        for item in events(data, final=False):
            quiet_since = anyio.current_time()
            yield item
        current = record()
        ended = current is None or current.job_state.terminal
        if ended or not follow:
            if ended:
                rest = await anyio.to_thread.run_sync(_read_from, log, offset)
                offset += len(rest)
                for item in events(rest, final=True):
                    yield item
                if not terminal_seen and current is not None:
                    number += 1
                    terminal_seen = True
                    if number > after:
                        yield number, terminal_from(current)
            return
        if quiet is not None and anyio.current_time() - quiet_since >= quiet:
            quiet_since = anyio.current_time()
            yield None
        await anyio.sleep(POLL_INTERVAL)


def terminal_from(record: JobRecord) -> JobLogEvent:
    """The terminal event a job's record implies, for a log that lacks one."""
    state = record.job_state
    ts = record.ended_at or record.created_at
    if state is JobState.SUCCEEDED:
        return JobLogEvent("succeeded", ts, {"output": record.result.path if record.result else None})
    error = record.error or (INTERRUPTED_BY_EXIT if state is JobState.INTERRUPTED else f"job {state.value}")
    return JobLogEvent(state.value, ts, {"error": error})


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as file:
            file.seek(offset)
            chunks = []
            while chunk := file.read(READ_CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
    except FileNotFoundError:
        return b""  # not started yet: its log does not exist


def job_event_stream(
    log: Path, record: Callable[[], JobRecord | None], after: int, idle_timeout: float
) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        yield f"retry: {RETRY_MS}\n\n".encode()
        events = tail(log, record, after=after, quiet=HEARTBEAT)
        try:
            async for item in events:
                if item is None:
                    yield b": heartbeat\n\n"
                    continue
                number, event = item
                yield f"id: {number}\ndata: {json.dumps(event.to_json())}\n\n".encode()
        finally:
            await events.aclose()
        yield b"event: end\ndata: {}\n\n"

    return WatchedStream(
        frames(), idle_timeout, media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )
