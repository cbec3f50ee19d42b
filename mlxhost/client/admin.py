"""A client of the host's admin API, for `mlxhost status`, `mlxhost jobs` and the `mlxhost tui` dashboard.

It finds a local host by itself (see `mlxhost.client.discovery`), or takes a URL or a Unix socket
and a token. Server-sent events are parsed by httpx-sse. `snapshot` and `watch` read the state and
the events as the records of `mlxhost.wire.admin`; `state` and `events` give the JSON as it came.
The job methods (`submit_job`, `jobs`, `job`, `cancel_job`, `job_events`) speak the records of
`mlxhost.wire.admin.jobs`, and raise `AdminRefused` when the host says no (a 4xx with its reason).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import aconnect_sse

from mlxhost.client.discovery import find_host
from mlxhost.wire.admin import AdminEvent, HostState, parse_event
from mlxhost.wire.admin.jobs import JobLogEvent, JobRecord, parse_log_line
from mlxhost.wire.sse import READ_TIMEOUT_S

__all__ = ["AdminClient", "AdminRefused", "EventStreamCut", "HostNotFound", "Target", "find_target"]


class HostNotFound(Exception):
    pass


class AdminRefused(Exception):
    """The host answered an admin request with a client error (4xx): its message, and the field it names."""

    def __init__(
        self, status_code: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.param = param
        self.code = code

    @classmethod
    def from_response(cls, response: httpx.Response) -> AdminRefused:
        """The error the host sent (`{"error": {"message", "param", "code"}}`), or its text as it came."""
        try:
            error = response.json().get("error")
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, Mapping) and isinstance(error.get("message"), str):
            param, code = error.get("param"), error.get("code")
            return cls(
                response.status_code, error["message"],
                param if isinstance(param, str) else None, code if isinstance(code, str) else None,
            )  # fmt: skip
        return cls(response.status_code, response.text.strip() or response.reason_phrase)


def _checked(response: httpx.Response) -> httpx.Response:
    """`response` if it succeeded; `AdminRefused` for a client error; `HTTPStatusError` for the rest."""
    # 401 is the token's fault, not the request's: callers report it as they do for the state.
    if 400 <= response.status_code < 500 and response.status_code != 401:
        raise AdminRefused.from_response(response)
    response.raise_for_status()
    return response


@dataclass(frozen=True)
class Target:
    url: str | None = None
    unix: str | None = None
    token: str | None = None

    def describe(self) -> str:
        return self.url or f"unix:{self.unix}"


def find_target(url: str | None = None, unix: str | None = None, token: str | None = None) -> Target:
    """Where the host is and its token: the flags given, else the local host's own record."""
    token = token or os.environ.get("MLXHOST_ADMIN_TOKEN")
    local = find_host()
    if url is None and unix is None:
        if local is None:
            raise HostNotFound(
                "no local mlxhost is running (none announced itself); give --url or --unix"
            )
        # The Unix socket needs no token, but the local record always has one.
        if local.get("unix"):
            return Target(None, local["unix"], token or local.get("token"))
        return Target(local.get("url"), None, token or local.get("token"))
    if token is None and local is not None and (url is None or url.rstrip("/") == local.get("url")):
        token = local.get("token")
    return Target(url.rstrip("/") if url else None, unix, token)


class EventStreamCut(httpx.ReadError):
    """The event stream stopped without the host's `event: end`: the connection was cut."""


def _is_local(target: Target) -> bool:
    if target.unix:
        return True
    host = httpx.URL(target.url or "").host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AdminClient:
    def __init__(self, target: Target, timeout: float = 5.0) -> None:
        self.target = target
        self.end_reason: str | None = None  # what the host said when it last ended the event stream
        self.last_log_line: int | None = None  # the id of the last job log event read: where to resume
        headers = {"authorization": f"Bearer {target.token}"} if target.token else {}
        # httpx honours HTTP(S)_PROXY and ALL_PROXY by default: a proxy set for the outside world
        # must not carry the admin token (or the host's state) to it, nor fail to reach us.
        trust_env = not _is_local(target)
        if target.unix:
            transport = httpx.AsyncHTTPTransport(uds=target.unix, verify=False)  # no TLS here: no CA bundle to load
            self._http = httpx.AsyncClient(
                base_url="http://mlxhost", transport=transport, headers=headers, timeout=timeout,
                trust_env=False,
            )  # fmt: skip
        else:
            self._http = httpx.AsyncClient(
                base_url=target.url or "", headers=headers, timeout=timeout, trust_env=trust_env
            )

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def state(self) -> dict[str, Any]:
        response = await self._http.get("/admin/state")
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    async def snapshot(self) -> HostState:
        """The host's state, as a record; `BadRecord` (a ValueError) if it is not one."""
        return HostState.from_json(await self.state())

    async def health(self) -> tuple[int, dict[str, Any]]:
        response = await self._http.get("/health")
        return response.status_code, response.json()

    async def cancel_session(self, session_id: str) -> int:
        return (await self._http.post(f"/admin/sessions/{session_id}/cancel")).status_code

    async def restart_worker(self, worker_id: str, drain: bool = True) -> int:
        response = await self._http.post(
            f"/admin/workers/{worker_id}/restart",
            params={"drain": "true" if drain else "false"},
            timeout=None,
        )
        return response.status_code

    async def events(self, after: int | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """Events after `after`, as they happen, until the host ends the stream.

        The host ends it with `event: end` (it is stopping, or this reader lagged): the iteration
        then stops, and `end_reason` says why. A stream that stops without it was cut, and raises
        `EventStreamCut`.
        """
        self.end_reason = None
        headers = {"last-event-id": str(after)} if after is not None else {}
        async with aconnect_sse(
            # The host is never quiet for longer than a heartbeat: a longer silence is a dead connection.
            self._http, "GET", "/admin/events", headers=headers, timeout=httpx.Timeout(5.0, read=READ_TIMEOUT_S)
        ) as source:
            source.response.raise_for_status()
            async for sse in source.aiter_sse():
                if sse.event == "end":
                    self.end_reason = str(json.loads(sse.data or "{}").get("reason") or "ended")
                    return
                if sse.data:
                    yield json.loads(sse.data)
            request = source.response.request
            raise EventStreamCut("the event stream stopped without the host's `event: end`", request=request)

    async def watch(self, after: int | None = None) -> AsyncGenerator[AdminEvent, None]:
        """`events`, as records: a type this client does not know comes as an `UnknownEvent`."""
        async with contextlib.aclosing(self.events(after)) as events:  # closes the stream with us
            async for event in events:
                yield parse_event(event)

    # -- managed jobs ------------------------------------------------------------------------

    async def submit_job(self, kind: str, model: str | None = None, **options: Any) -> JobRecord:
        """Queue a job (POST /admin/jobs); options left as None are left to the host's defaults."""
        body = {"kind": kind, **({"model": model} if model is not None else {})}
        body |= {name: value for name, value in options.items() if value is not None}
        return JobRecord.from_json(_checked(await self._http.post("/admin/jobs", json=body)).json())

    async def pull_model(self, model: str, quantize: int | None = None) -> JobRecord:
        """Ask the host to pull `model` (owner/name[@revision]) as a job (POST /admin/models/pull);
        the job already pulling it, if there is one."""
        body: dict[str, Any] = {"model": model, **({"quantize": quantize} if quantize is not None else {})}
        return JobRecord.from_json(_checked(await self._http.post("/admin/models/pull", json=body)).json())

    async def jobs(self) -> list[JobRecord]:
        """The jobs the host keeps, newest first."""
        listing = _checked(await self._http.get("/admin/jobs")).json()
        return [JobRecord.from_json(job) for job in listing["data"]]

    async def job(self, job_id: str) -> JobRecord:
        return JobRecord.from_json(_checked(await self._http.get(f"/admin/jobs/{_segment(job_id)}")).json())

    async def cancel_job(self, job_id: str) -> JobRecord:
        """Ask the host to cancel a job: a queued one is cancelled at once, a running one once its
        process ends (the record may still say running). `AdminRefused` 409 if it is already over."""
        response = await self._http.post(f"/admin/jobs/{_segment(job_id)}/cancel")
        return JobRecord.from_json(_checked(response).json())

    async def job_events(self, job_id: str, after: int | None = None) -> AsyncGenerator[JobLogEvent, None]:
        """A job's log, from the line after `after`, as it is written, until the host ends it.

        The host sends every line, exactly one terminal event, then `event: end`: the iteration
        then stops. `last_log_line` is the id of the last event read, to resume after a cut
        (`EventStreamCut`, or any transport error) with `after=client.last_log_line`.
        """
        self.last_log_line = after
        headers = {"last-event-id": str(after)} if after is not None else {}
        async with aconnect_sse(
            # The host sends heartbeats while the log is quiet: a long silence is a dead connection.
            self._http, "GET", f"/admin/jobs/{_segment(job_id)}/events", headers=headers,
            timeout=httpx.Timeout(5.0, read=READ_TIMEOUT_S),
        ) as source:  # fmt: skip
            if source.response.is_error:
                await source.response.aread()
                _checked(source.response)
            async for sse in source.aiter_sse():
                if sse.event == "end":
                    return
                if not sse.data:
                    continue
                event = parse_log_line(sse.data)
                if sse.id and sse.id.isdigit():
                    self.last_log_line = int(sse.id)
                yield event
            request = source.response.request
            raise EventStreamCut("the job log stopped without the host's `event: end`", request=request)


def _segment(job_id: str) -> str:
    """A job id as one path segment: an id typed by a user cannot reach another route."""
    return quote(job_id, safe="")
