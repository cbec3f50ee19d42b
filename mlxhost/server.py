"""`mlxhost serve`: load the model, serve the app over Hypercorn on TCP and/or a Unix socket.

Shutdown order matters: on SIGTERM/SIGINT new requests get 503, running ones may finish for
`shutdown_grace` seconds, then the rest are cancelled with reason `shutdown` (their streams end
with an error chunk saying so), and only then is Hypercorn told to stop, because its own
graceful_timeout would cut the streams without a word. A second signal cancels at once.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
from dataclasses import dataclass
from pathlib import Path

import anyio
from hypercorn.asyncio.run import worker_serve
from hypercorn.config import Config as HypercornConfig
from hypercorn.utils import wrap_app

from .api.app import create_app
from .api.completions import Serving
from .config import Settings
from .demo import ensure_demo_model
from .worker.engine import Engine, EngineOptions
from .worker.model_source import resolve_model

__all__ = ["StartupError", "serve"]

logger = logging.getLogger("mlxhost")

READY_PREFIX = "mlxhost ready:"
DEMO_MODEL_ID = "mlxhost-demo"


class StartupError(Exception):
    pass


@dataclass(frozen=True)
class ModelChoice:
    path: Path
    id: str


def choose_model(settings: Settings) -> ModelChoice:
    if settings.model is None:
        path = ensure_demo_model()
        logger.warning(
            "no --model given: serving the built-in demo model (random weights, so its output is "
            "gibberish) from %s. To serve a real model: mlxhost serve --model /path/to/mlx-model "
            "(or a Hugging Face repo id already in the local cache).",
            path,
        )
        return ModelChoice(path, settings.model_id or DEMO_MODEL_ID)
    path = resolve_model(settings.model)
    is_local = Path(settings.model).expanduser().is_dir()
    return ModelChoice(path, settings.model_id or (path.name if is_local else settings.model))


def hypercorn_config(settings: Settings) -> HypercornConfig:
    config = HypercornConfig()
    config.bind = [] if settings.no_tcp else [f"{settings.host}:{settings.port}"]
    if settings.unix:
        config.bind.append(f"unix:{settings.unix}")
    # The socket is created 0600 in one step: no moment where others could connect.
    config.umask = 0o177
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = 3.0
    return config


async def serve(settings: Settings) -> None:
    choice = choose_model(settings)
    options = EngineOptions(settings.max_batch, settings.prefill_batch, settings.prefill_step)
    logger.info("loading %s from %s", choice.id, choice.path)
    async with Engine.open(choice.path, options) as engine:
        app = create_app(engine, settings, choice.id)
        config = hypercorn_config(settings)
        try:
            sockets = config.create_sockets()
        except OSError as exc:
            raise StartupError(f"cannot listen on {', '.join(config.bind)}: {exc.strerror}") from None
        try:
            addresses = [_describe(sock.getsockname()) for sock in sockets.insecure_sockets]
            logger.info(
                "%s model %s (loaded in %.2fs) on %s",
                READY_PREFIX,
                choice.id,
                engine.load_seconds,
                " and ".join(addresses),
            )
            stop = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, app.state.serving, settings.shutdown_grace, stop)
                await worker_serve(
                    wrap_app(app, config.wsgi_max_body_size, "asgi"),
                    config,
                    sockets=sockets,
                    shutdown_trigger=stop.wait,
                )
                tg.cancel_scope.cancel()
        finally:
            if settings.unix:
                _remove_socket(Path(settings.unix))
    logger.info("stopped")


async def _stop_on_signal(service: Serving, grace: float, stop: anyio.Event) -> None:
    engine = service.engine
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            logger.info(
                "%s: refusing new requests, letting running ones finish for up to %.0fs",
                signal.Signals(signum).name,
                grace,
            )
            service.accepting = False
            break
        async with anyio.create_task_group() as tg:

            async def force() -> None:
                async for signum in signals:
                    logger.warning("%s again: stopping now", signal.Signals(signum).name)
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(force)
            with anyio.move_on_after(grace):
                await engine.wait_idle()
            tg.cancel_scope.cancel()
        engine.cancel_all("shutdown")
        # Let the cancelled streams write their last chunk before Hypercorn closes them.
        with anyio.move_on_after(1.0):
            await engine.wait_idle()
            await anyio.sleep(0.05)
        stop.set()


def _describe(name: object) -> str:
    if isinstance(name, str):
        return f"unix:{name}"
    host, port = name[0], name[1]  # type: ignore[index]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _remove_socket(path: Path) -> None:
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
