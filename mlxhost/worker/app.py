"""The Starlette app: OpenAI-compatible routes for one engine, health, and the OpenAPI document.

In a worker it also takes the parent's pause leases (`POST /admin/lease`, pause.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

import psutil
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxhost.config import Settings
from mlxhost.catalog.tasks import ModelKind
from mlxhost.runtime.error_responses import EXCEPTION_HANDLERS, error_response
from mlxhost.runtime.guard import api_keys, front_door, health_detail
from mlxhost.wire.dialect import Dialect
from mlxhost.wire.errors import NotFound
from mlxhost.wire.inert import excerpt
from mlxhost.wire.openapi import openapi_document
from mlxhost.worker.api.chat import chat_completions
from mlxhost.worker.api.completions import completions
from mlxhost.worker.api.embeddings import embeddings
from mlxhost.worker.api.messages import count_tokens, messages
from mlxhost.worker.api.pooling import not_served
from mlxhost.worker.api.rerank import rerank
from mlxhost.worker.api.responses import responses
from mlxhost.worker.api.serving import Serving, serving, shutting_down
from mlxhost.worker.engine.engine import Engine, EngineStopped
from mlxhost.worker.pause import LEASE_PATH, Pauses, lease

__all__ = ["create_app"]

logger = logging.getLogger("mlxhost.worker")

Endpoint = Callable[[Request], Awaitable[Response]]


def create_app(engine: Engine, settings: Settings, model_id: str, kind: ModelKind = ModelKind()) -> Starlette:
    # Only on a worker's private socket, which only its parent can reach: in-process this app is
    # the public one, where anyone could pause the model.
    private = [] if settings.in_process else [Route(LEASE_PATH, lease, methods=["POST"])]

    def serves(task: str, route: Endpoint) -> Endpoint:
        return route if task in kind.tasks else not_served(task)

    app = Starlette(
        routes=[
            *private,
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/v1/chat/completions", serves("generate", chat_completions), methods=["POST"]),
            Route("/v1/completions", serves("generate", completions), methods=["POST"]),
            Route("/v1/responses", serves("generate", responses), methods=["POST"]),
            Route("/v1/messages", serves("generate", messages), methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/embeddings", serves("embed", embeddings), methods=["POST"]),
            Route("/v1/rerank", serves("rerank", rerank), methods=["POST"]),
            Route("/rerank", serves("rerank", rerank), methods=["POST"]),
            Route("/v2/rerank", serves("rerank", rerank), methods=["POST"]),  # Cohere's ClientV2
            Route("/health", health, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers={**EXCEPTION_HANDLERS, EngineStopped: engine_stopped},
        # In-process this app is the public one and passes the same front door as the parent's;
        # in a worker it is reached only through the parent, over a private socket.
        middleware=front_door(settings, api_keys(settings)) if settings.in_process else None,
    )
    app.state.serving = Serving(engine, settings, model_id, kind)
    app.state.pauses = Pauses(engine)
    app.state.started = int(time.time())
    return app


def _model_card(request: Request) -> dict[str, Any]:
    return {
        "id": serving(request).model_id,
        "object": "model",
        "created": request.app.state.started,
        "owned_by": "mlxhost",
    }


async def list_models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [_model_card(request)]})


async def get_model(request: Request) -> Response:
    name = request.path_params["model"]
    if name != serving(request).model_id:
        raise NotFound(f"the model '{excerpt(name)}' does not exist", param="model", code="model_not_found")
    return JSONResponse(_model_card(request))


async def health(request: Request) -> Response:
    """200 while serving; 503 while draining ("stopping") or hung ("stalled").

    A worker busy with long prompts still answers here at once (its event loop never waits on a
    request), so a slow answer means a stopped process. A generation thread that spends longer
    than `stall_timeout` in one step is hung even though the loop still answers: the 503 makes
    the parent kill and replace the worker.
    """
    service = serving(request)
    engine = service.engine
    busy = engine.busy_seconds()
    healthy = service.accepting
    status = "ok" if healthy else "stopping"
    if busy > service.settings.stall_timeout:
        healthy, status = False, "stalled"
    if not health_detail(request.scope):  # --in-process, asked on TCP without a key
        return JSONResponse({"status": status}, status_code=200 if healthy else 503)
    return JSONResponse(
        {
            "status": status,
            "paused": engine.paused,  # held for a managed job (pause.py): alive, taking in nothing new
            "step_seconds": round(busy, 3),  # in the generation thread's current step
            "model": service.model_id,
            "context_length": engine.context_length,
            "load_seconds": round(engine.load_seconds, 3),
            "engine": asdict(engine.statistics()),
            "batch": engine.kv_layout.describe(),  # per-row KV, or padded and why
            "tasks": list(service.kind.tasks),
            "pooled": asdict(engine.pooled_statistics()),  # embedding and rerank passes
            "prompt_cache": asdict(engine.prompt_cache_statistics()),
            "memory": {**engine.memory(), "rss_bytes": psutil.Process().memory_info().rss},
        },
        status_code=200 if healthy else 503,
    )


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def engine_stopped(request: Request, exc: Exception) -> Response:
    return error_response(shutting_down(), Dialect.of_path(request.url.path))
