"""The serving core: one model's engine behind the OpenAI routes, over Hypercorn.

It runs inside a worker process (on the worker's private Unix socket) and, with
`mlxhost serve --in-process`, directly in the host.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio

from mlxhost.config import Settings
from mlxhost.catalog.tasks import ModelKind
from mlxhost.runtime.listener import Listener, serve_in
from mlxhost.runtime.shutdown import Shutdown
from mlxhost.wire.layout import state_dir
from mlxhost.worker.api.serving import Serving
from mlxhost.worker.app import create_app
from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.engine.options import EngineOptions

__all__ = ["engine_options", "serve_model"]

logger = logging.getLogger("mlxhost")

Background = Callable[[Engine], Coroutine[Any, Any, None]]


# Seconds: a reader never waits for text longer than this. Readers send a frame only every
# stream_interval, so text handed over more often than every half of it only wakes the event loop,
# whose Python then takes the GIL and the core the generation thread needs: measured at 8 streams
# on the tiny model, 25 ms instead of 5 cut the worker's CPU per token by 11% and the parent's by
# 20%, for 1.16-1.2x the tokens/s. First tokens and endings are never held back.
PUBLISH_INTERVAL_MAX = 0.025


def engine_options(
    settings: Settings,
    adapter_path: str | None = None,
    sharding: str | None = None,
    kind: ModelKind = ModelKind(),
    draft_path: str | None = None,
) -> EngineOptions:
    """The engine a worker runs for `settings` (every rank of a group builds the same one)."""
    return EngineOptions(
        settings.max_batch,
        settings.prefill_batch,
        settings.prefill_step,
        kv_layout=settings.kv_layout,
        kv_bits=settings.kv_bits or None,  # 0: not quantized
        kv_group_size=settings.kv_group_size,
        speculate=settings.speculate,
        draft_tokens=settings.draft_tokens,
        prefill_chunk_seconds=settings.prefill_chunk_ms / 1000,
        prompt_cache_entries=settings.prompt_cache_size,
        prompt_cache_bytes=settings.prompt_cache_mb << 20,
        prompt_cache_disk_bytes=settings.prompt_cache_disk_mb << 20,
        state_dir=state_dir(settings),
        publish_interval=min(settings.stream_interval / 2, PUBLISH_INTERVAL_MAX),
        adapter_path=adapter_path,
        sharding=sharding,
        tasks=frozenset(kind.tasks),
        encoder=kind.encoder,
        draft_path=draft_path,
    )


async def serve_model(
    settings: Settings,
    model_path: Path,
    model_id: str,
    binds: list[str],
    shutdown: Shutdown,
    on_ready: Callable[[Engine, Listener], None],
    background: Background | None = None,
    adapter_path: str | None = None,
    sharding: str | None = None,
    kind: ModelKind = ModelKind(),
    draft_path: str | None = None,
) -> None:
    """Serve until `shutdown` is requested; running requests get `settings.shutdown_grace`."""
    options = engine_options(settings, adapter_path, sharding, kind, draft_path)
    async with Engine.open(model_path, options) as engine:
        app = create_app(engine, settings, model_id, kind)
        # Behind a parent, the parent is the one client: its admission bounds what it sends, and a
        # cap meant for the public (`--max-connections=3`) would turn its own requests away.
        cap = settings.max_connections if settings.in_process else None
        listener = Listener(binds, max_connections=cap)
        on_ready(engine, listener)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            if background is not None:
                tg.start_soon(background, engine)
            tg.start_soon(_drain_on_shutdown, app.state.serving, settings.shutdown_grace, shutdown, stop)
            serve_in(tg, listener, app, stop)


async def _drain_on_shutdown(service: Serving, grace: float, shutdown: Shutdown, stop: anyio.Event) -> None:
    await shutdown.requested.wait()
    logger.info(
        "%s: refusing new requests, letting running ones finish for up to %gs", shutdown.reason, grace
    )
    service.accepting = False
    engine = service.engine
    await shutdown.wait_grace(grace, engine.wait_idle)
    engine.cancel_all("shutdown")
    # Let the cancelled streams write their last chunk before Hypercorn closes them: its own
    # graceful_timeout would cut them without a word.
    with anyio.move_on_after(1.0):
        await engine.wait_idle()
        await anyio.sleep(0.05)
    stop.set()
