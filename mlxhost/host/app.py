"""The parent's Starlette app: route each request to its model's worker, and report health.

It imports no MLX: model work happens in the workers only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..api.body import read_body
from ..api.errors import EXCEPTION_HANDLERS, NotFound, ServiceUnavailable
from ..api.openapi import openapi_document
from ..config import Settings
from .pool import ModelPool, UnknownModel
from .proxy import forward, peek_model
from .supervisor import WorkerState, WorkerUnavailable

__all__ = ["Host", "create_host_app"]


@dataclass
class Host:
    pool: ModelPool
    settings: Settings
    started: int
    accepting: bool = True


def host(request: Request) -> Host:
    return request.app.state.host  # type: ignore[no-any-return]


def create_host_app(pool: ModelPool, settings: Settings) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", generate, methods=["POST"]),
            Route("/v1/completions", generate, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/admin/workers/{worker}/restart", restart_worker, methods=["POST"]),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.state.host = Host(pool, settings, int(time.time()))
    return app


async def generate(request: Request) -> Response:
    state = host(request)
    if not state.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    body = await read_body(request, state.settings.max_body_bytes)
    try:
        spec = state.pool.resolve(peek_model(body))
    except UnknownModel as exc:
        raise NotFound(str(exc), param="model", code="model_not_found") from None
    try:
        supervisor = await state.pool.acquire(spec)
    except WorkerUnavailable as exc:
        headers = {"retry-after": f"{exc.retry_after:.0f}"} if exc.retry_after else None
        raise ServiceUnavailable(exc.message, code=exc.code, headers=headers) from None
    except TimeoutError:
        raise ServiceUnavailable(
            f"the model '{spec.id}' did not load within {state.settings.load_timeout:g}s",
            code="model_load_timeout",
            headers={"retry-after": "5"},
        ) from None
    return await forward(request, supervisor, body)


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
    serving = state.accepting and any(w["state"] == WorkerState.READY for w in workers)
    # A model that is not loaded yet can still serve: it starts on demand.
    can_load = state.accepting and any(
        not w.get("resident") for w in state.pool.snapshot()
    )
    ok = serving or can_load
    return JSONResponse(
        {
            "status": "ok" if ok else ("stopping" if not state.accepting else "unavailable"),
            "workers": workers,
            "models": state.pool.snapshot(),
        },
        status_code=200 if ok else 503,
    )


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def restart_worker(request: Request) -> Response:
    name = request.path_params["worker"]
    try:
        supervisor = await host(request).pool.restart(name)
    except UnknownModel as exc:
        raise NotFound(str(exc), param="worker", code="worker_not_found") from None
    except (WorkerUnavailable, TimeoutError) as exc:
        raise ServiceUnavailable(str(exc), code="restart_failed") from None
    return JSONResponse({"worker": supervisor.snapshot()}, status_code=202)
