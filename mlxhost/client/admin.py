"""A client of the host's admin API, for `mlxhost status` and the `mlxhost tui` dashboard.

It finds a local host by itself (see `mlxhost.client.discovery`), or takes a URL or a Unix socket
and a token. Server-sent events are parsed by httpx-sse. `snapshot` and `watch` read the state and
the events as the records of `mlxhost.wire.admin`; `state` and `events` give the JSON as it came.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from mlxhost.client.discovery import find_host
from mlxhost.wire.admin import AdminEvent, HostState, parse_event

__all__ = ["AdminClient", "EventStreamCut", "HostNotFound", "Target", "find_target"]


class HostNotFound(Exception):
    pass


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
        headers = {"authorization": f"Bearer {target.token}"} if target.token else {}
        # httpx honours HTTP(S)_PROXY and ALL_PROXY by default: a proxy set for the outside world
        # must not carry the admin token (or the host's state) to it, nor fail to reach us.
        trust_env = not _is_local(target)
        if target.unix:
            transport = httpx.AsyncHTTPTransport(uds=target.unix)
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
            # The host sends a heartbeat every 10 s: a silence of 30 s is a dead connection.
            self._http, "GET", "/admin/events", headers=headers, timeout=httpx.Timeout(5.0, read=30.0)
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
