"""The admin API's job routes: submit, list, show, cancel, and follow a job's log over SSE.

Admin routes (the front door checks the admin token on TCP, as for /admin/state): a dataset's
path is accepted here only, never on /v1.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxhost.host.jobs.runner import JobConflict, JobRunner, UnknownJob
from mlxhost.host.jobs.tail import job_event_stream
from mlxhost.host.state import parent_state
from mlxhost.runtime.body import read_body
from mlxhost.wire.admin.job_requests import parse_job_request
from mlxhost.wire.admin.jobs import JobRecord
from mlxhost.wire.errors import APIError, InvalidRequest, NotFound, ServiceUnavailable
from mlxhost.wire.inert import excerpt

__all__ = ["job_routes"]

MAX_JOB_BODY = 64 * 1024
MAX_EVENT_ID_DIGITS = 12


class Conflict(APIError):
    status_code = 409
    code = "job_ended"


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


async def submit(request: Request) -> Response:
    runner = _runner(request)
    state = parent_state(request)
    body = await read_body(request, MAX_JOB_BODY, state.settings.body_timeout)
    record = await runner.submit(parse_job_request(body))
    return JSONResponse(record.to_json(), status_code=202, headers={"location": f"/admin/jobs/{record.id}"})


async def list_jobs(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [r.to_json() for r in _runner(request).all()]})


async def show(request: Request) -> Response:
    return JSONResponse(_job(_runner(request), request).to_json())


async def cancel(request: Request) -> Response:
    runner = _runner(request)
    record = _job(runner, request)
    try:
        record = runner.cancel(record.id)
    except JobConflict as exc:
        raise Conflict(str(exc), param="job") from None
    return JSONResponse(record.to_json(), status_code=202)


async def events(request: Request) -> Response:
    runner = _runner(request)
    record = _job(runner, request)
    after = _resume_point(request)
    return job_event_stream(
        runner.log_path(record.id),
        lambda: runner.store.get(record.id),
        after,
        parent_state(request).settings.idle_timeout,
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
    Route("/admin/jobs", list_jobs, methods=["GET"]),
    Route("/admin/jobs/{job}", show, methods=["GET"]),
    Route("/admin/jobs/{job}/cancel", cancel, methods=["POST"]),
    Route("/admin/jobs/{job}/events", events, methods=["GET"]),
]
