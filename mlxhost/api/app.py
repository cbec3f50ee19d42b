"""The Starlette app: OpenAI-compatible routes for one engine, health, and the OpenAPI document."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

import psutil
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import Settings
from ..worker.engine import Engine, EngineStopped
from .completions import Serving, chat_completions, completions, serving, shutting_down
from .errors import EXCEPTION_HANDLERS, NotFound
from .openapi import openapi_document

__all__ = ["create_app"]

logger = logging.getLogger("mlxhost.api")


def create_app(engine: Engine, settings: Settings, model_id: str) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
        ],
        exception_handlers={**EXCEPTION_HANDLERS, EngineStopped: engine_stopped},
    )
    app.state.serving = Serving(engine, settings, model_id)
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
        raise NotFound(f"the model '{name}' does not exist", param="model", code="model_not_found")
    return JSONResponse(_model_card(request))


async def health(request: Request) -> Response:
    service = serving(request)
    engine = service.engine
    status = "ok" if service.accepting else "stopping"
    return JSONResponse(
        {
            "status": status,
            "model": service.model_id,
            "context_length": engine.context_length,
            "load_seconds": round(engine.load_seconds, 3),
            "engine": asdict(engine.statistics()),
            "prompt_cache": asdict(engine.prompt_cache_statistics()),
            "memory": {**engine.memory(), "rss_bytes": psutil.Process().memory_info().rss},
        },
        status_code=200 if service.accepting else 503,
    )


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def engine_stopped(request: Request, exc: Exception) -> Response:
    return shutting_down().response()
