"""`mlxhost serve`: the parent host by default, or the serving core in this process (--in-process).

Nothing here imports MLX: in the default mode the parent never loads it.
"""

from __future__ import annotations

import logging

from .config import ModelSpec, Settings
from .shutdown import Shutdown

__all__ = ["READY_PREFIX", "StartupError", "model_specs", "serve"]

logger = logging.getLogger("mlxhost")

READY_PREFIX = "mlxhost ready:"
DEMO_MODEL_ID = "mlxhost-demo"


class StartupError(Exception):
    pass


def model_specs(settings: Settings) -> tuple[ModelSpec, ...]:
    """The configured models, or the demo model when none is."""
    if settings.model:
        return settings.model
    from .demo import ensure_demo_model

    path = ensure_demo_model()
    logger.warning(
        "no --model given: serving the built-in demo model (random weights, so its output is "
        "gibberish) from %s. To serve a real model: mlxhost serve --model /path/to/mlx-model "
        "(or a Hugging Face repo id already in the local cache).",
        path,
    )
    return (ModelSpec(settings.model_id or DEMO_MODEL_ID, str(path)),)


def binds(settings: Settings) -> list[str]:
    addresses = [] if settings.no_tcp else [f"{settings.host}:{settings.port}"]
    if settings.unix:
        addresses.append(f"unix:{settings.unix}")
    return addresses


async def serve(settings: Settings) -> None:
    if settings.in_process:
        await serve_in_process(settings)
    else:
        from .host.serve import serve_host

        await serve_host(settings)
    logger.info("stopped")


async def serve_in_process(settings: Settings) -> None:
    from .http import BindError, Listener
    from .worker.engine import Engine
    from .worker.model_source import resolve_model
    from .worker.serve import serve_model

    from .api.guard import api_keys, warn_if_exposed
    from .config import ConfigError

    try:
        keys = api_keys(settings)  # read now: a bad key file stops startup before the model loads
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    warn_if_exposed(settings, keys)
    spec = model_specs(settings)[0]
    path = resolve_model(spec.path)
    logger.info("loading %s from %s (in-process)", spec.id, path)
    shutdown = Shutdown()

    def on_ready(engine: Engine, listener: Listener) -> None:
        logger.info(
            "%s model %s (loaded in %.2fs) on %s",
            READY_PREFIX,
            spec.id,
            engine.load_seconds,
            " and ".join(listener.addresses),
        )

    async def background(engine: Engine) -> None:
        await shutdown.watch_signals()

    try:
        await serve_model(settings, path, spec.id, binds(settings), shutdown, on_ready, background)
    except* BindError as group:
        raise StartupError(str(group.exceptions[0])) from None
