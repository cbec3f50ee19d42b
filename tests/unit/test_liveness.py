"""The liveness verdict on one health check: a draining worker is slow to go, not hung."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from mlxhost.host.workers.liveness import Unreachable, wait_hung, why_hung


@pytest.mark.parametrize(
    ("status", "body", "hung"),
    [
        (200, {"status": "ok"}, None),
        (503, {"status": "stopping"}, None),  # draining: slow to go, not hung
        (503, {"status": "stalled"}, "its health check answered 503 (stalled)"),
        (500, "oops", "its health check answered 500"),
        (None, None, "no answer to a health check within 0.2s"),
    ],
)
def test_the_liveness_check_tells_a_draining_worker_from_a_hung_one(
    status: int | None, body: object, hung: str | None
) -> None:
    async def health(request: httpx.Request) -> httpx.Response:
        if status is None:
            await anyio.sleep(30)  # frozen
        if isinstance(body, dict):
            return httpx.Response(status or 200, json=body)
        return httpx.Response(status or 200, text=str(body))

    async def main() -> str | None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(health), base_url="http://worker") as probe:
            return await why_hung(probe, 0.2)

    assert anyio.run(main) == hung


def test_an_unreachable_worker_is_hung_only_once_that_lasts(tmp_path: Path) -> None:
    # A worker done draining closes its socket a moment before its process ends: no verdict yet.
    async def main() -> tuple[str, float]:
        started = anyio.current_time()
        why = await wait_hung(tmp_path / "gone.sock", interval=0.05, timeout=0.5)
        return why, anyio.current_time() - started

    why, waited = anyio.run(main)
    assert why == "its health check failed (ConnectError) for 0.5s"
    assert waited >= 0.5


def test_a_failed_check_is_unreachable_not_a_verdict() -> None:
    async def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async def main() -> str | None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(refuse), base_url="http://worker") as probe:
            return await why_hung(probe, 0.2)

    with pytest.raises(Unreachable, match="ConnectError"):
        anyio.run(main)
