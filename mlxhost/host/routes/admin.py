"""The admin API: state, events, metrics and operator actions.

On the Unix socket the admin routes are open: the socket is 0600, so only its owner connects. On
TCP they need the admin token (`Authorization: Bearer ...`), which the host generates at start
and writes 0600 into its runtime directory, unless `admin_token` sets one.

The documents are the records of `mlxhost.wire.admin`, turned into JSON here, at the edge.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxhost.host.events import Published
from mlxhost.host.serving.sessions import CancelReason
from mlxhost.host.state import ParentState, parent_state
from mlxhost.host.workers.pool import ModelPool
from mlxhost.catalog.spec import ModelSpec
from mlxhost.runtime.sse import End, EventStream, Frames
from mlxhost.wire.admin import (
    HostRecord,
    HostState,
    SessionsRecord,
    StandbyRecord,
    StreamLagged,
)
from mlxhost.wire.errors import InvalidRequest, NotFound
from mlxhost.wire.inert import excerpt
from mlxhost.wire.sse import END_HOST_STOPPING, END_LAGGED, HEARTBEAT_S

__all__ = ["admin_routes", "host_state", "sessions_record", "standby_records"]

MAX_SEQ_DIGITS = 20  # an event number fits in 64 bits


def host_state(parent: ParentState) -> HostState:
    """One consistent snapshot: built without a pause, it includes exactly the events up to `seq`."""
    return HostState(
        seq=parent.events.last_seq,
        host=HostRecord(
            pid=os.getpid(),
            started=parent.started,
            uptime_s=round(time.time() - parent.started, 3),
            accepting=parent.accepting,
        ),
        workers=tuple(s.snapshot() for s in parent.pool.supervisors()),
        models=tuple(parent.pool.snapshot()),
        sessions=sessions_record(parent),
        admission={model: a.statistics() for model, a in parent.admissions.items()},
        execution=parent.coordinator.record(),
        jobs=tuple(parent.jobs.recent()) if parent.jobs is not None else (),
        standby=standby_records(parent.pool),
    )


def standby_records(pool: ModelPool) -> tuple[StandbyRecord, ...]:
    """The warm standby interpreters, and the memory each one costs."""
    return tuple(pool.standby.snapshot()) if pool.standby is not None else ()


def sessions_record(parent: Any) -> SessionsRecord:
    sessions = parent.sessions
    return SessionsRecord(
        opened=sessions.opened,
        closed=sessions.closed,
        live=tuple(s.snapshot() for s in sessions.live()),
        recent=tuple(s.snapshot() for s in sessions.recent()),
    )


async def state(request: Request) -> Response:
    return JSONResponse(host_state(parent_state(request)).to_json())


def _resume_point(request: Request) -> int | None:
    """The `Last-Event-ID` header (or `?after=`): plain ASCII digits, or a 400 naming it."""
    header = request.headers.get("last-event-id")
    name, value = ("Last-Event-ID", header) if header is not None else ("after", request.query_params.get("after"))
    if not value:
        return None
    # Not `str.isdigit()`: it takes "١" and "²", which `int` then reads or refuses.
    if len(value) > MAX_SEQ_DIGITS or not value.isascii() or not value.isdigit():
        raise InvalidRequest(
            f"{name} must be an event number (ASCII digits), not '{excerpt(value)}'", param=name
        )
    return int(value)


async def events(request: Request) -> Response:
    parent = parent_state(request)
    subscription = parent.events.subscribe(_resume_point(request))

    async def frames() -> Frames:
        try:
            while True:
                published: Published | None = None
                with anyio.move_on_after(HEARTBEAT_S):
                    try:
                        published = await subscription.receive()
                    except anyio.EndOfStream:
                        break
                if published is None:
                    yield None  # quiet: a heartbeat
                    continue
                yield published.frame
                if published.event["type"] == StreamLagged.TYPE:
                    yield End(END_LAGGED)
                    return
            # The hub ended the subscription: the host is stopping. Saying so lets a client
            # tell this end from a cut connection.
            yield End(END_HOST_STOPPING)
        finally:
            await subscription.aclose()

    return EventStream(frames(), idle_timeout=parent.settings.idle_timeout)


async def list_sessions(request: Request) -> Response:
    return JSONResponse(sessions_record(parent_state(request)).to_json())


async def cancel_session(request: Request) -> Response:
    session = parent_state(request).sessions.get(request.path_params["session"])
    if session is None or not session.cancel(CancelReason.REQUESTED):
        raise NotFound(
            f"no live session '{excerpt(request.path_params['session'])}'", param="session", code="session_not_found"
        )
    return JSONResponse({"session": session.snapshot().to_json()}, status_code=202)


async def restart_worker(request: Request) -> Response:
    """Restart a model's worker; with drain (the default) after its running sessions finish."""
    parent = parent_state(request)
    name = request.path_params["worker"]
    spec = next((s for s in parent.pool.specs if name in s.names), None)
    if spec is None:
        raise NotFound(f"no worker '{excerpt(name)}'", param="worker", code="worker_not_found")
    drain = request.query_params.get("drain", "true").lower() not in ("false", "0", "no")
    with anyio.fail_after(parent.settings.drain_timeout + parent.settings.load_timeout):
        if drain:
            # New sessions wait in the queue meanwhile; none is refused for the restart.
            async with parent.admission(spec).exclusive():
                supervisor = await _restart(parent.pool, spec, drain=True)
        else:
            supervisor = await _restart(parent.pool, spec, drain=False)
    return JSONResponse({"worker": supervisor.snapshot().to_json()})


async def _restart(pool: ModelPool, spec: ModelSpec, drain: bool) -> Any:
    before = pool.supervisor(spec.id)
    old_pid = before.pid if before is not None else None
    supervisor = await pool.restart(spec.id, drain)
    await supervisor.wait_replaced(old_pid)
    return supervisor


admin_routes = [
    Route("/admin/state", state, methods=["GET"]),
    Route("/admin/events", events, methods=["GET"]),
    Route("/admin/sessions", list_sessions, methods=["GET"]),
    Route("/admin/sessions/{session}/cancel", cancel_session, methods=["POST"]),
    Route("/admin/workers/{worker}/restart", restart_worker, methods=["POST"]),
]
