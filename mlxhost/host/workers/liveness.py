"""Is a ready worker alive? Its `/health`, asked every `health_interval` seconds, says so.

A worker that does not answer within `health_timeout` (stopped, or its event loop wedged), that
answers 503 `"status": "stalled"` (its generation thread stuck in one step), or that answers any
other error, is hung. A worker that answers 503 `"status": "stopping"` is draining what it runs:
slow to go, not hung. One that cannot be reached at all is hung only once that has lasted
`health_timeout`: a worker done draining closes its socket a moment before its process ends.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx

from mlxhost.wire.inert import excerpt

__all__ = ["Unreachable", "wait_hung", "why_hung"]


async def wait_hung(socket: Path, interval: float, timeout: float) -> str:
    """Return once the worker on `socket` counts as hung, saying why; never, with no `interval`."""
    if not interval:
        await anyio.sleep_forever()
    # Plain HTTP on a Unix socket: no TLS, so no SSL context. httpx builds one with the CA bundle
    # unless told not to, which held the event loop ~50 ms at every worker start, just as the
    # requests that waited for the worker were to be relayed to it.
    transport = httpx.AsyncHTTPTransport(uds=str(socket), verify=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://worker") as probe:
        unreachable_since: float | None = None
        while True:
            await anyio.sleep(interval)
            try:
                why = await why_hung(probe, timeout)
            except Unreachable as exc:
                # The caller also waits on the process: one on its way out ends this watch first.
                now = anyio.current_time()
                unreachable_since = unreachable_since if unreachable_since is not None else now
                if now - unreachable_since < timeout:
                    continue
                why = f"{exc} for {timeout:g}s"
            else:
                unreachable_since = None
            if why is not None:
                return why


class Unreachable(Exception):
    """The health check could not reach the worker: hung, or just ending."""


async def why_hung(probe: httpx.AsyncClient, timeout: float) -> str | None:
    """One health check: why the worker counts as hung, or None while it is alive.

    Raises `Unreachable` when the check could not be made at all, which alone does not tell a
    hung worker from one that is exiting.
    """
    try:
        with anyio.fail_after(timeout):
            response = await probe.get("/health")
    except TimeoutError:
        return f"no answer to a health check within {timeout:g}s"
    except httpx.HTTPError as exc:
        raise Unreachable(f"its health check failed ({type(exc).__name__})") from exc
    if response.is_success:
        return None
    try:
        status = response.json().get("status")
    except (ValueError, AttributeError):
        status = None
    if response.status_code == 503 and status == "stopping":
        return None
    said = f" ({excerpt(status)})" if isinstance(status, str) else ""
    return f"its health check answered {response.status_code}{said}"
