"""The parent's Starlette app: sessions for the generation routes, health, and operator actions.

Every dialect's generation route (OpenAI chat and completions, OpenAI Responses, Anthropic
Messages) is the same `generate`: admission, a session, the relay; embeddings and rerank are
sessions too, routed to a model that serves them. Counting a Messages prompt's
tokens needs the model's worker (its tokenizer) but generates nothing, so it is relayed outside
admission and sessions. It imports no MLX: model work happens in the workers only.
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxhost.config import Settings
from mlxhost.host.jobs.runner import JobRunner
from mlxhost.host.routes.admin import admin_routes, host_state, standby_records
from mlxhost.host.routes.jobs import job_routes
from mlxhost.host.routes.metrics import CONTENT_TYPE, HostMetrics
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.serving.relay import SessionResponse, forward, refusal
from mlxhost.host.serving.sessions import SessionRegistry
from mlxhost.host.state import ParentState, parent_state
from mlxhost.host.workers.pool import ModelPool, UnknownModel
from mlxhost.host.workers.status import WorkerState
from mlxhost.catalog.spec import ModelSpec
from mlxhost.catalog.routing import TaskRefused, route
from mlxhost.runtime.body import read_body
from mlxhost.runtime.error_responses import EXCEPTION_HANDLERS
from mlxhost.runtime.guard import front_door, health_detail
from mlxhost.wire.admin.state import client_entries
from mlxhost.wire.embeddings import task_refused
from mlxhost.wire.errors import NotFound, ServiceUnavailable
from mlxhost.wire.inert import excerpt
from mlxhost.wire.openapi import openapi_document

__all__ = ["create_host_app"]

SMALL_BODY = 64 * 1024  # bytes: read even when the answer will be 429 (see generate)


def create_host_app(
    pool: ModelPool,
    settings: Settings,
    sessions: SessionRegistry | None = None,
    admin_token: str | None = None,
    api_keys: frozenset[str] = frozenset(),
    coordinator: ExecutionCoordinator | None = None,
    jobs: JobRunner | None = None,
) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", generate, methods=["POST"]),
            Route("/v1/completions", generate, methods=["POST"]),
            Route("/v1/responses", generate, methods=["POST"]),
            Route("/v1/messages", generate, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/embeddings", embed, methods=["POST"]),
            Route("/v1/rerank", rerank, methods=["POST"]),
            Route("/rerank", rerank, methods=["POST"]),
            Route("/v2/rerank", rerank, methods=["POST"]),  # Cohere's ClientV2
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/openapi.json", openapi, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            *admin_routes,
            *job_routes,
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        middleware=front_door(settings, api_keys, admin_token),
    )
    sessions = sessions or SessionRegistry(pool.events)
    parent = ParentState(
        pool,
        settings,
        sessions=sessions,
        events=sessions.events,
        admin_token=admin_token,
        coordinator=coordinator or ExecutionCoordinator(),
        jobs=jobs,
    )
    parent.metrics = HostMetrics(lambda: host_state(parent))
    sessions.on_close = parent.metrics.session_closed
    app.state.parent = parent
    return app


async def generate(request: Request) -> Any:
    return await _session(request, "generate")


async def embed(request: Request) -> Any:
    return await _session(request, "embed")


async def rerank(request: Request) -> Any:
    return await _session(request, "rerank")


async def _session(request: Request, task: str) -> Any:
    state = parent_state(request)
    if not state.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    settings = state.settings
    # When no model it could name has room, the answer is 429 whatever the body says: a large
    # one is refused before it is read and parsed for nothing. A small one is read first, so
    # that the connection can carry the client's next request.
    if not _small_body(request) and all(state.admission(spec).full() for spec in state.pool.specs):
        _turn_away(state, state.pool.default, body_read=False)
    body = await read_body(request, settings.max_body_bytes, settings.body_timeout)
    routing = _peek(body)
    spec = _resolve_for(state, routing.model, task)
    admission = state.admission(spec)
    if admission.full():
        _turn_away(state, spec, body_read=True)
    return SessionResponse(
        pool=state.pool,
        admission=admission,
        coordinator=state.coordinator,
        sessions=state.sessions,
        spec=spec,
        body=body,
        stream=routing.stream is True,
        path=request.url.path,
        headers=dict(request.headers),
        request_timeout=state.settings.request_timeout,
        idle_timeout=state.settings.idle_timeout,
        client_metadata=routing.client(),
        kind=task,
    )


async def count_tokens(request: Request) -> Response:
    state = parent_state(request)
    if not state.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    body = await read_body(request, state.settings.max_body_bytes, state.settings.body_timeout)
    spec = _resolve(state, _peek(body).model)
    return await forward(state.pool, spec, request.url.path, dict(request.headers), body)


def _resolve(state: ParentState, model: Any) -> ModelSpec:
    try:
        return state.pool.resolve(model)
    except UnknownModel as exc:
        raise NotFound(str(exc), param="model", code="model_not_found") from None


def _resolve_for(state: ParentState, model: Any, task: str) -> ModelSpec:
    try:
        return route(state.pool, model, task)
    except UnknownModel as exc:
        raise NotFound(str(exc), param="model", code="model_not_found") from None
    except TaskRefused as exc:
        raise task_refused(exc.model, exc.task, exc.tasks) from None


def _turn_away(state: ParentState, spec: ModelSpec, body_read: bool) -> NoReturn:
    # Refused at the door, before a session, its task and its events exist: under overload these
    # refusals are most of the traffic, and each costs the CPU the admitted streams run on.
    admission = state.admission(spec)
    admission.rejected += 1
    if state.metrics is not None:
        state.metrics.requests.labels(spec.id, "429").inc()
    error = refusal(spec.id, admission, state.sessions.events)
    if not body_read and error.headers is not None:
        # The body was never read, so the connection cannot carry another request.
        error.headers["connection"] = "close"
    raise error


def _small_body(request: Request) -> bool:
    declared = request.headers.get("content-length", "")
    return declared.isascii() and declared.isdigit() and int(declared) <= SMALL_BODY


class _Routing(BaseModel):
    """The fields routing needs, and what the client says of itself for the session's record;
    the worker validates the body in full."""

    model_config = ConfigDict(extra="ignore")
    model: Any = None
    stream: Any = None
    user: Any = None  # Chat Completions, Responses
    metadata: Any = None  # Anthropic's {"user_id"}; OpenAI's string pairs
    client_metadata: Any = None  # Codex's

    def client(self) -> dict[str, str] | None:
        pairs: dict[str, Any] = {}
        if isinstance(self.user, str):
            pairs["user"] = self.user
        for given in (self.metadata, self.client_metadata):
            if isinstance(given, dict):
                pairs.update((k, v) for k, v in given.items() if isinstance(v, (str, int, float, bool)))
        return client_entries(pairs) or None


_NO_ROUTING = _Routing()


def _peek(body: bytes) -> _Routing:
    # pydantic skips the fields it ignores without building them: a 4 MB body of messages costs
    # a fraction of what json.loads would spend on the event loop every stream shares.
    try:
        return _Routing.model_validate_json(body)
    except ValidationError:  # not JSON, or not an object: the worker answers it with a 400
        return _NO_ROUTING


def _model_card(request: Request, model_id: str) -> dict[str, object]:
    state = parent_state(request)
    card: dict[str, object] = {"id": model_id, "object": "model", "created": state.started, "owned_by": "mlxhost"}
    origin = state.pool.origins.get(model_id)
    if origin is not None:
        card["metadata"] = dict(origin)  # the job that made it
    return card


async def list_models(request: Request) -> Response:
    specs = parent_state(request).pool.specs
    return JSONResponse({"object": "list", "data": [_model_card(request, s.id) for s in specs]})


async def get_model(request: Request) -> Response:
    name = request.path_params["model"]
    if name not in {s.id for s in parent_state(request).pool.specs}:
        raise NotFound(f"the model '{excerpt(name)}' does not exist", param="model", code="model_not_found")
    return JSONResponse(_model_card(request, name))


async def health(request: Request) -> Response:
    state = parent_state(request)
    workers = [s.snapshot() for s in state.pool.supervisors()]
    models = state.pool.snapshot()
    serving = any(w.state == WorkerState.READY for w in workers)
    # A model not loaded starts on demand; one whose files are still being pulled cannot yet.
    can_load = any(not m.resident and m.download is None for m in models)
    downloading = any(m.download is not None and m.download.state == "downloading" for m in models)
    ok = state.accepting and (serving or can_load)
    status = "ok" if ok else ("stopping" if not state.accepting else "downloading" if downloading else "unavailable")
    if not health_detail(request.scope):
        return JSONResponse({"status": status}, status_code=200 if ok else 503)
    return JSONResponse(
        {
            "status": status,
            "workers": [w.to_json() for w in workers],
            "models": [m.to_json() for m in models],
            "admission": {model: stats.to_json() for model, stats in _admission_stats(state).items()},
            "standby": [s.to_json() for s in standby_records(state.pool)],
            # Serving goes on when the state directory cannot be written; jobs cannot.
            "state_dir_problem": getattr(state.jobs, "problem", None),
        },
        status_code=200 if ok else 503,
    )


def _admission_stats(state: ParentState) -> dict[str, Any]:
    return {model: admission.statistics() for model, admission in state.admissions.items()}


async def openapi(request: Request) -> Response:
    return JSONResponse(openapi_document())


async def metrics(request: Request) -> Response:
    state = parent_state(request)
    assert state.metrics is not None
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)
