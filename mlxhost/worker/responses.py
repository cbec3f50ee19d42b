"""POST /v1/responses: not served yet (issue 12, part 4)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mlxhost.wire.errors import NotFound


async def responses(request: Request) -> Response:
    raise NotFound("the Responses API is not served yet", code="not_found")
