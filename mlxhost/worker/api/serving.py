"""What every route of the worker stands on, whatever its dialect: the `Serving` state kept on the
app, reading a body while the worker still takes requests, and the error a generation stopped by
shutdown ends with.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
from starlette.requests import Request

from mlxhost.config import Settings
from mlxhost.catalog.tasks import ModelKind
from mlxhost.runtime.body import read_body as read_limited_body
from mlxhost.wire.errors import ServiceUnavailable
from mlxhost.worker.engine.engine import Engine

__all__ = [
    "FRAMES_PER_SECOND",
    "Serving",
    "cancel_on_disconnect",
    "frame_interval",
    "read_body",
    "serving",
    "shutting_down",
]

# Frames a second across all of a worker's streams, past which each stream's frames come further
# apart than `stream_interval`. A frame costs the same CPU however many tokens it carries: JSON
# and HTTP framing here, the parent's relay, the client's parse, on the cores MLX computes on. At
# 16 streams of 20 frames a second that work took 6% of the tiny model's throughput on 2 cores
# (scripts/bench --closed-loop-only); at 10 a second per stream each still reads as live.
FRAMES_PER_SECOND = 160


@dataclass
class Serving:
    """What the routes need, kept on `app.state.serving`."""

    engine: Engine
    settings: Settings
    model_id: str
    kind: ModelKind = field(default_factory=ModelKind)  # what it serves, and how it pools
    accepting: bool = True

    def frame_interval(self) -> float:
        """The shortest gap between two frames of a stream now."""
        return frame_interval(self.settings.stream_interval, self.engine.session_count)


def frame_interval(stream_interval: float, sessions: int) -> float:
    """`stream_interval`, or longer while `sessions` share the worker: see FRAMES_PER_SECOND."""
    if stream_interval == 0:
        return 0.0  # a frame per token, as the operator asked
    return max(stream_interval, sessions / FRAMES_PER_SECOND)


def serving(request: Request) -> Serving:
    return request.app.state.serving  # type: ignore[no-any-return]


async def read_body(request: Request, service: Serving) -> bytes:
    if not service.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    settings = service.settings
    return await read_limited_body(request, settings.max_body_bytes, settings.body_timeout)


async def cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    """Cancel `scope` when the client leaves a request whose body was read (a whole answer's)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def shutting_down() -> ServiceUnavailable:
    return ServiceUnavailable("the server is shutting down; the generation was stopped", code="shutting_down")
