"""The parent's Starlette app: sessions for the generation routes, health, and operator actions.

It imports no MLX: model work happens in the workers only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..api.body import read_body
from ..api.errors import EXCEPTION_HANDLERS, NotFound, ServiceUnavailable
from ..api.openapi import openapi_document
from ..config import ModelSpec, Settings
from .admission import Admission
from .events import EventHub
from .pool import ModelPool, UnknownModel
from .relay import SessionResponse
from .sessions import CancelReason, SessionRegistry
from .supervisor import WorkerState

__all__ = ["Host", "create_host_app"]


@dataclass
class Host:
    pool: ModelPool
    settings: Settings
    started: int = field(default_factory=lambda: int(time.time()))
    sessions: SessionRegistry = field(default_factory=SessionRegistry)
    events: EventHub = field(default_factory=EventHub)
    admissions: dict[str, Admission] = field(default_factory=dict)
    accepting: bool = True

    def admission(self, spec: ModelSpec) -> Admission:
        admission = self.admissions.get(spec.id)
        if admission is None:
            admission = Admission(
                spec.max_active or self.settings.max_active,
                self.settings.max_queued if spec.max_queued is None else spec.max_queued,
            )
            self.admissions[spec.id] = admission
        return admission


def host(request: Request) -> Host:
    return request.app.state.host  # type: ignore[no-any-return]


def create_host_app(
    pool: ModelPool, settings: Settings, sessions: SessionRegistry | None = None
) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", generate, methods=["POST"]),
            Route("/v1/completions", generate, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/admin/sessions", list_sessions, methods=["GET"]),
            Route("/admin/sessions/{session}/cancel", cancel_session, methods=["POST"]),
            Route("/admin/workers/{worker}/restart", restart_worker, methods=["POST"]),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    sessions = sessions or SessionRegistry(pool.events)
    app.state.host = Host(pool, settings, sessions=sessions, events=sessions.events)
    return app


async def generate(request: Request) -> Any:
    state = host(request)
    if not state.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    body = await read_body(request, state.settings.max_body_bytes)
    fields = _peek(body)
    try:
        spec = state.pool.resolve(fields.get("model"))
    except UnknownModel as exc:
        raise NotFound(str(exc), param="model", code="model_not_found") from None
    return SessionResponse(
        pool=state.pool,
        admission=state.admission(spec),
        sessions=state.sessions,
        spec=spec,
        body=body,
        stream=fields.get("stream") is True,
        path=request.url.path,
        headers=dict(request.headers),
        request_timeout=state.settings.request_timeout,
        idle_timeout=state.settings.idle_timeout,
    )


def _peek(body: bytes) -> dict[str, Any]:
    """The fields routing needs; the worker validates the body in full."""
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _model_card(request: Request, model_id: str) -> dict[str, object]:
    return {"id": model_id, "object": "model", "created": host(request).started, "owned_by": "mlxhost"}


async def list_models(request: Request) -> Response:
    specs = host(request).pool.specs
    return JSONResponse({"object": "list", "data": [_model_card(request, s.id) for s in specs]})


async def get_model(request: Request) -> Response:
    name = request.path_params["model"]
    if name not in {s.id for s in host(request).pool.specs}:
        raise NotFound(f"the model '{name}' does not exist", param="model", code="model_not_found")
    return JSONResponse(_model_card(request, name))


async def health(request: Request) -> Response:
    state = host(request)
    workers = [s.snapshot() for s in state.pool.supervisors()]
    models = state.pool.snapshot()
    serving = any(w["state"] == WorkerState.READY for w in workers)
    can_load = any(not m["resident"] for m in models)  # a model not loaded starts on demand
    ok = state.accepting and (serving or can_load)
    return JSONResponse(
        {
            "status": "ok" if ok else ("stopping" if not state.accepting else "unavailable"),
            "workers": workers,
            "models": models,
            "admission": {model: stats.__dict__ for model, stats in _admission_stats(state).items()},
        },
        status_code=200 if ok else 503,
    )


def _admission_stats(state: Host) -> dict[str, Any]:
    return {model: admission.statistics() for model, admission in state.admissions.items()}


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def list_sessions(request: Request) -> Response:
    sessions = host(request).sessions
    return JSONResponse(
        {
            "opened": sessions.opened,
            "closed": sessions.closed,
            "live": [s.snapshot() for s in sessions.live()],
            "recent": [s.snapshot() for s in sessions.recent()],
        }
    )


async def cancel_session(request: Request) -> Response:
    session = host(request).sessions.get(request.path_params["session"])
    if session is None or not session.cancel(CancelReason.REQUESTED):
        raise NotFound(
            f"no live session '{request.path_params['session']}'", param="session", code="session_not_found"
        )
    return JSONResponse({"session": session.snapshot()}, status_code=202)


async def restart_worker(request: Request) -> Response:
    """Restart a model's worker; with drain (the default) after its running sessions finish."""
    state = host(request)
    name = request.path_params["worker"]
    spec = next((s for s in state.pool.specs if name in s.names), None)
    if spec is None:
        raise NotFound(f"no worker '{name}'", param="worker", code="worker_not_found")
    drain = request.query_params.get("drain", "true").lower() not in ("false", "0", "no")
    with anyio.fail_after(state.settings.drain_timeout + state.settings.load_timeout):
        if drain:
            # New sessions wait in the queue meanwhile; none is refused for the restart.
            async with state.admission(spec).exclusive():
                supervisor = await _restart(state.pool, spec)
        else:
            supervisor = await _restart(state.pool, spec)
    return JSONResponse({"worker": supervisor.snapshot()})


async def _restart(pool: ModelPool, spec: ModelSpec) -> Any:
    before = pool.supervisor(spec.id)
    old_pid = before.pid if before is not None else None
    supervisor = await pool.restart(spec.id)
    await supervisor.wait_replaced(old_pid)
    return supervisor
