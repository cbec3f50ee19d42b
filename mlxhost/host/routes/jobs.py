"""The admin API's job routes: submit, list, show, cancel, and follow a job's log over SSE.

Admin routes (the front door checks the admin token on TCP, as for /admin/state): a dataset's
path is accepted here only, never on /v1.

A store that cannot be read answers 503, a submission the state directory cannot take 507 (full)
or 503, each naming the state directory: never a 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxhost.host.jobs.runner import CannotRecord, JobConflict, JobRunner, UnknownJob
from mlxhost.host.jobs.store import StoreFailed
from mlxhost.host.jobs.tail import job_event_stream
from mlxhost.host.state import parent_state
from mlxhost.runtime.body import read_body
from mlxhost.wire.admin.job_requests import parse_job_request, parse_pull_request
from mlxhost.wire.admin.jobs import JobRecord
from mlxhost.wire.errors import APIError, InvalidRequest, NotFound, ServiceUnavailable
from mlxhost.wire.inert import excerpt

__all__ = ["job_routes"]

MAX_JOB_BODY = 64 * 1024
MAX_EVENT_ID_DIGITS = 12


class Conflict(APIError):
    status_code = 409
    code = "job_ended"


class InsufficientStorage(APIError):
    status_code = 507
    type = "service_unavailable"
    code = "state_dir_full"


STORE_RETRY_AFTER_S = 30


def _store_errors(route: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    @wraps(route)
    async def guarded(request: Request) -> Response:
        try:
            return await route(request)
        except CannotRecord as exc:
            error = InsufficientStorage if exc.full else ServiceUnavailable
            code = "state_dir_full" if exc.full else "state_dir_unwritable"
            raise error(str(exc), code=code, headers={"retry-after": str(STORE_RETRY_AFTER_S)}) from None
        except StoreFailed as exc:
            raise ServiceUnavailable(
                f"jobs cannot be read: {exc}", code="job_store_unavailable", headers={"retry-after": "5"}
            ) from None

    return guarded


def _runner(request: Request) -> JobRunner:
    runner = parent_state(request).jobs
    if runner is None:
        raise ServiceUnavailable(
            "jobs are off on this host: another mlxhost owns its state directory (start it with --state-dir)",
            code="jobs_unavailable",
        )
    return runner


def _job(runner: JobRunner, request: Request) -> JobRecord:
    job_id = request.path_params["job"]
    try:
        return runner.get(job_id)
    except UnknownJob:
        raise NotFound(f"no job '{excerpt(job_id)}'", param="job", code="job_not_found") from None


@_store_errors
async def submit(request: Request) -> Response:
    runner = _runner(request)
    state = parent_state(request)
    body = await read_body(request, MAX_JOB_BODY, state.settings.body_timeout)
    record = await runner.submit(parse_job_request(body))
    return JSONResponse(record.to_json(), status_code=202, headers={"location": f"/admin/jobs/{record.id}"})


@_store_errors
async def pull_model(request: Request) -> Response:
    """POST /admin/models/pull: a pull job (the same line, store and tail as every job); a pull of
    a repo already being pulled answers with that job."""
    runner = _runner(request)
    state = parent_state(request)
    body = await read_body(request, MAX_JOB_BODY, state.settings.body_timeout)
    record = await runner.submit(parse_pull_request(body))
    return JSONResponse(record.to_json(), status_code=202, headers={"location": f"/admin/jobs/{record.id}"})


@_store_errors
async def list_jobs(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [r.to_json() for r in _runner(request).all()]})


@_store_errors
async def show(request: Request) -> Response:
    return JSONResponse(_job(_runner(request), request).to_json())


@_store_errors
async def cancel(request: Request) -> Response:
    runner = _runner(request)
    record = _job(runner, request)
    try:
        record = runner.cancel(record.id)
    except JobConflict as exc:
        raise Conflict(str(exc), param="job") from None
    return JSONResponse(record.to_json(), status_code=202)


@_store_errors
async def events(request: Request) -> Response:
    runner = _runner(request)
    record = _job(runner, request)
    after = _resume_point(request)
    give_back = runner.tails.take()  # 429 past the cap
    return job_event_stream(
        runner.log_path(record.id),
        lambda: runner.peek(record.id),
        after,
        parent_state(request).settings.idle_timeout,
        give_back,
    )


def _resume_point(request: Request) -> int:
    header = request.headers.get("last-event-id")
    name, value = (
        ("Last-Event-ID", header) if header is not None else ("after", request.query_params.get("after"))
    )
    if not value:
        return 0
    if len(value) > MAX_EVENT_ID_DIGITS or not value.isascii() or not value.isdigit():
        raise InvalidRequest(
            f"{name} must be a log line number (ASCII digits), not '{excerpt(value)}'", param=name
        )
    return int(value)


job_routes = [
    Route("/admin/jobs", submit, methods=["POST"]),
    Route("/admin/models/pull", pull_model, methods=["POST"]),
    Route("/admin/jobs", list_jobs, methods=["GET"]),
    Route("/admin/jobs/{job}", show, methods=["GET"]),
    Route("/admin/jobs/{job}/cancel", cancel, methods=["POST"]),
    Route("/admin/jobs/{job}/events", events, methods=["GET"]),
]
