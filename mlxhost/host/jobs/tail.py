"""Following a job's log: every line, in order, then exactly one terminal event.

The job process appends to its log while the host reads it, so the last line may be half written:
it is kept back until its newline arrives. Once the store says the job has ended, what was written
between the last read and that moment is read too. The log may lack a terminal line (the process
was killed, or a host died under it and the next one marked it interrupted): the record supplies
one. A log with two (a job that wrote its own, then the host wrote one for it) gives only the first.

A finished job's log may be tens of megabytes: it is read and parsed a chunk (`READ_CHUNK`) at a
time in a worker thread, never on the event loop every stream shares, and never whole. A tail
holds one chunk's events at a time; the next chunk is read only when the consumer asks (a slow
SSE client's socket pushes back through the response's send). All tails share `READERS` worker
threads (parsing holds the GIL the event loop needs too), so replays wait their turn rather than
take the thread pool; `TailSlots` caps how many SSE tails a host serves at once.

`tail` is the reader; `job_event_stream` is the SSE response around it (runtime/sse.py: an `id:`
per line so a client resumes with `Last-Event-ID`, then `event: end` with the reason `done`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path

import anyio
from starlette.types import Receive, Scope, Send

from mlxhost.runtime.sse import End, EventStream, Frames
from mlxhost.wire.admin.jobs import INTERRUPTED_BY_EXIT, JobLogEvent, JobRecord, JobState, parse_log_line
from mlxhost.wire.errors import AdmissionRefused
from mlxhost.wire.sse import END_DONE, HEARTBEAT_S, event_frame

__all__ = ["TailSlots", "job_event_stream", "tail", "tail_batches"]

POLL_INTERVAL = 0.2  # seconds between looks at a running job's log
READ_CHUNK = 256 * 1024  # bytes of log read and parsed per worker-thread call
MAX_LINE = 1 << 20  # bytes: a longer line is skipped (numbered, not sent), never held whole
READERS = anyio.CapacityLimiter(2)  # worker threads all tails share: each holds the GIL as it parses
SLOTS_RETRY_AFTER_S = 5

Event = tuple[int, JobLogEvent]


class TailSlots:
    """At most `limit` SSE tails at once; past it, `take` refuses with 429."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0

    def take(self) -> Callable[[], None]:
        """A slot, and the call that gives it back (once, however often it is called)."""
        if self.taken >= self.limit:
            raise AdmissionRefused(
                f"{self.taken} job log tails are open, the most this host serves at once ({self.limit}); "
                "close one or try again later",
                code="too_many_tails",
                headers={"retry-after": str(SLOTS_RETRY_AFTER_S)},
            )
        self.taken += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if not given_back:
                given_back = True
                self.taken -= 1

        return give_back


class _LogReader:
    """Where a tail is in a log, and the line it has begun; each call from one worker thread at a time."""

    def __init__(self, log: Path, after: int) -> None:
        self.log = log
        self.after = after
        self.offset = 0
        self.pending = b""
        self.skipping = False  # inside a line longer than MAX_LINE: dropped up to its newline
        self.number = 0
        self.terminal_seen = False

    def next_chunk(self, final: bool) -> tuple[list[Event], bool]:
        """The events of the next chunk, and whether it was a whole one (there may be more).

        `final`: the job has ended, so a last line without its newline, at the end, is all there is.
        """
        data = _read_chunk(self.log, self.offset)
        self.offset += len(data)
        more = len(data) == READ_CHUNK
        *lines, self.pending = (self.pending + data).split(b"\n")
        if self.skipping and lines:
            self.skipping = False
            lines[0] = b"{"  # the rest of the long line: counted once, as a corrupt line
        if final and not more and self.pending.strip() and not self.skipping:
            lines.append(self.pending)
            self.pending = b""
        if len(self.pending) > MAX_LINE:
            self.pending, self.skipping = b"", True
        found: list[Event] = []
        for line in lines:
            if not line.strip():
                continue
            self.number += 1
            try:
                event = parse_log_line(line)
            except ValueError:
                continue  # a corrupt line (a torn write): counted, so numbers stay stable, not sent
            if event.terminal:
                if self.terminal_seen:
                    continue
                self.terminal_seen = True
            if self.number > self.after:
                found.append((self.number, event))
        return found, more

    def ended(self, record: JobRecord) -> list[Event]:
        """The terminal event the record implies, when the log had none."""
        if self.terminal_seen:
            return []
        self.number += 1
        self.terminal_seen = True
        return [(self.number, terminal_from(record))] if self.number > self.after else []


async def tail_batches(
    log: Path,
    record: Callable[[], JobRecord | None],
    *,
    after: int = 0,
    follow: bool = True,
    quiet: float | None = None,
) -> AsyncGenerator[list[Event] | None, None]:
    """The events of each log line after line `after`, a chunk's worth at a time, then the terminal event.

    `record` reads the job's current record from the store. With `follow`, it waits for more lines
    while the job runs; without, it stops at the end of what is written (and yields no made-up
    terminal event for a job still running). With `quiet`, it yields None after that many seconds
    without an event (a stream's cue for a heartbeat): waiting is done here, never by cancelling
    the generator from outside, which would end it.
    """
    quiet_since = anyio.current_time()
    reader = _LogReader(log, after)

    async def read(final: bool) -> AsyncIterator[list[Event]]:
        more = True
        while more:
            batch, more = await anyio.to_thread.run_sync(reader.next_chunk, final, limiter=READERS)
            if batch:
                yield batch

    while True:
        async for batch in read(final=False):
            quiet_since = anyio.current_time()
            yield batch
        current = record()
        ended = current is None or current.job_state.terminal
        if ended or not follow:
            if ended:
                async for batch in read(final=True):
                    yield batch
                if current is not None and (last := reader.ended(current)):
                    yield last
            return
        if quiet is not None and anyio.current_time() - quiet_since >= quiet:
            quiet_since = anyio.current_time()
            yield None
        await anyio.sleep(POLL_INTERVAL)


async def tail(
    log: Path,
    record: Callable[[], JobRecord | None],
    *,
    after: int = 0,
    follow: bool = True,
    quiet: float | None = None,
) -> AsyncGenerator[Event | None, None]:
    """`tail_batches`, one (line number, event) at a time."""
    batches = tail_batches(log, record, after=after, follow=follow, quiet=quiet)
    try:
        async for batch in batches:
            if batch is None:
                yield None
                continue
            for item in batch:
                yield item
    finally:
        await batches.aclose()


def terminal_from(record: JobRecord) -> JobLogEvent:
    """The terminal event a job's record implies, for a log that lacks one."""
    state = record.job_state
    ts = record.ended_at or record.created_at
    if state is JobState.SUCCEEDED:
        return JobLogEvent("succeeded", ts, {"output": record.result.path if record.result else None})
    error = record.error or (INTERRUPTED_BY_EXIT if state is JobState.INTERRUPTED else f"job {state.value}")
    return JobLogEvent(state.value, ts, {"error": error})


def _read_chunk(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as file:
            file.seek(offset)
            return file.read(READ_CHUNK)
    except FileNotFoundError:
        return b""  # not started yet: its log does not exist


def _frames(batch: list[Event]) -> bytes:
    return b"".join(event_frame(json.dumps(event.to_json()), n) for n, event in batch)


class _TailResponse(EventStream):
    """Gives its tail slot back however the response ends, even before its body starts."""

    def __init__(self, frames: Frames, idle_timeout: float, give_back: Callable[[], None]) -> None:
        super().__init__(frames, idle_timeout)
        self._give_back = give_back

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._give_back()


def job_event_stream(
    log: Path,
    record: Callable[[], JobRecord | None],
    after: int,
    idle_timeout: float,
    give_back: Callable[[], None] = lambda: None,
) -> EventStream:
    """The SSE response; `give_back` is called once it has ended (its tail slot)."""

    async def frames() -> Frames:
        batches = tail_batches(log, record, after=after, quiet=HEARTBEAT_S)
        try:
            async for batch in batches:
                if batch is None:
                    yield None  # quiet: a heartbeat
                    continue
                # A chunk's frames are encoded off the loop too, and sent as one write.
                yield await anyio.to_thread.run_sync(_frames, batch, limiter=READERS)
        finally:
            await batches.aclose()
        yield End(END_DONE)

    return _TailResponse(frames(), idle_timeout, give_back)
