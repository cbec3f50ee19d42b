"""The event loop the host and its workers run on: uvloop where it is installed.

At 16 streams the parent relays about 160 frames a second, and profiles of it show no single hot
spot: most of its CPU goes to the asyncio machinery around each frame (the loop, the transports,
the streams Hypercorn and the relay use). uvloop is that same asyncio API on libuv; under the
same load it took the parent's CPU per relayed token down by 15-20% (`scripts/bench
--closed-loop-only`, and the per-process CPU it reports). On a small machine every core the host
does not take is MLX's. anyio and Hypercorn run on either loop, so nothing else depends on which.

`MLXHOST_EVENT_LOOP=asyncio` picks the standard loop (to rule uvloop out when debugging); a worker
inherits the choice with the host's environment.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

__all__ = ["EVENT_LOOP", "loop_name", "run"]

EVENT_LOOP = "MLXHOST_EVENT_LOOP"  # "uvloop" (the default where installed) or "asyncio"

T = TypeVar("T")


def loop_name() -> str:
    """The loop `run` uses here: "uvloop" if it is installed and not turned off, else "asyncio"."""
    if os.environ.get(EVENT_LOOP, "uvloop") == "asyncio":
        return "asyncio"
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`anyio.run(func, *args)` on asyncio, with uvloop as its loop where `loop_name` says so."""
    return anyio.run(func, *args, backend="asyncio", backend_options={"use_uvloop": loop_name() == "uvloop"})
