"""Server-sent events as the host writes them and its clients read them: one framing for every stream.

Every stream (`/admin/events`, a job's `/admin/jobs/{id}/events`) opens with `retry:`, sends an
`id:` with each event a client may resume after (`Last-Event-ID`), a comment at least every
`HEARTBEAT_S` while quiet, and ends on purpose with `event: end` and the reason. A client that
hears nothing for `READ_TIMEOUT_S` was cut off; one whose stream stops without `event: end` too.
The writing side is `mlxhost.runtime.sse`.
"""

from __future__ import annotations

import json

__all__ = [
    "END_DONE",
    "END_HOST_STOPPING",
    "END_LAGGED",
    "HEARTBEAT_FRAME",
    "HEARTBEAT_S",
    "READ_TIMEOUT_S",
    "RETRY_FRAME",
    "RETRY_MS",
    "end_frame",
    "event_frame",
]

HEARTBEAT_S = 10.0  # the longest a stream is quiet: a comment is sent then
READ_TIMEOUT_S = 3 * HEARTBEAT_S  # three heartbeats missed: the connection is dead
RETRY_MS = 2000  # how long a browser's EventSource waits before it reconnects

# Why the host ended a stream on purpose: the reason in its last frame, `event: end`.
END_DONE = "done"  # a job's log is whole: its terminal event was sent
END_HOST_STOPPING = "host_stopping"
END_LAGGED = "lagged"  # the reader fell too far behind; it may resume from its last id

RETRY_FRAME = f"retry: {RETRY_MS}\n\n".encode()
HEARTBEAT_FRAME = b": heartbeat\n\n"


def end_frame(reason: str) -> bytes:
    """The last frame of a stream the host ends on purpose."""
    return f"event: end\ndata: {json.dumps({'reason': reason})}\n\n".encode()


def event_frame(data: str, event_id: int | None = None) -> bytes:
    """One event; `data` is one line of JSON (json.dumps writes no newline)."""
    return (f"id: {event_id}\n" if event_id is not None else "").encode() + f"data: {data}\n\n".encode()
