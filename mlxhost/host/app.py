"""The parent's Starlette app: sessions for the generation routes, health, and operator actions.

It imports no MLX: model work happens in the workers only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..api.body import read_body
from ..api.errors import EXCEPTION_HANDLERS, NotFound, ServiceUnavailable
from ..api.openapi import openapi_document
from ..config import ModelSpec, Settings
from .admin import admin_routes, host_state, require_token
from .admission import Admission
from .events import EventHub
from .metrics import CONTENT_TYPE, HostMetrics
from .pool import ModelPool, UnknownModel
from .relay import SessionResponse, refusal
from .sessions import SessionRegistry
from .worker_status import WorkerState

__all__ = ["Host", "create_host_app"]


@dataclass
class Host:
    pool: ModelPool
    settings: Settings
    started: int = field(default_factory=lambda: int(time.time()))
    sessions: SessionRegistry = field(default_factory=SessionRegistry)
    events: EventHub = field(default_factory=EventHub)
    admissions: dict[str, Admission] = field(default_factory=dict)
    admin_token: str | None = None
    metrics: HostMetrics | None = None
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
    pool: ModelPool,
    settings: Settings,
    sessions: SessionRegistry | None = None,
    admin_token: str | None = None,
) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", generate, methods=["POST"]),
            Route("/v1/completions", generate, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            *admin_routes,
        ],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    sessions = sessions or SessionRegistry(pool.events)
    host = Host(pool, settings, sessions=sessions, events=sessions.events, admin_token=admin_token)
    host.metrics = HostMetrics(lambda: host_state(host))
    sessions.on_close = host.metrics.session_closed
    app.state.host = host
    return app


async def generate(request: Request) -> Any:
    state = host(request)
    require_token(request, state.settings.api_key, "this API")
    if not state.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    body = await read_body(request, state.settings.max_body_bytes)
    fields = _peek(body)
    try:
        spec = state.pool.resolve(fields.get("model"))
    except UnknownModel as exc:
        raise NotFound(str(exc), param="model", code="model_not_found") from None
    admission = state.admission(spec)
    if admission.turn_away():
        # Refused at the door, before a session, its task and its events exist: under overload
        # these refusals are most of the traffic, and each costs the CPU the admitted streams run on.
        if state.metrics is not None:
            state.metrics.requests.labels(spec.id, "429").inc()
        raise refusal(spec.id, admission, state.sessions.events)
    return SessionResponse(
        pool=state.pool,
        admission=admission,
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
    except (ValueError, RecursionError):  # the worker answers the bad body with a 400
        return {}
    return data if isinstance(data, dict) else {}


def _model_card(request: Request, model_id: str) -> dict[str, object]:
    return {"id": model_id, "object": "model", "created": host(request).started, "owned_by": "mlxhost"}


async def list_models(request: Request) -> Response:
    require_token(request, host(request).settings.api_key, "this API")
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


async def metrics(request: Request) -> Response:
    state = host(request)
    assert state.metrics is not None
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
