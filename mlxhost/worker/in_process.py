"""`mlxhost serve --in-process`: one model served from this process, with no parent.

The worker's own app answers on the public addresses, behind the same front door as the parent's.
"""

from __future__ import annotations

import logging

import anyio.to_thread

from mlxhost.catalog.hub import pull_logged
from mlxhost.catalog.sources import is_offline, model_specs, resolve_model
from mlxhost.catalog.tasks import detect, encoder_problem
from mlxhost.config import ConfigError, Settings, binds
from mlxhost.errors import NotDownloaded, StartupError
from mlxhost.runtime.guard import api_keys, warn_if_exposed
from mlxhost.runtime.listener import BindError, Listener
from mlxhost.runtime.ready import report_ready
from mlxhost.runtime.shutdown import Shutdown
from mlxhost.runtime.state_dir import prepare_state_dir
from mlxhost.wire.layout import HOST_READY
from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.serve import serve_model

__all__ = ["serve_in_process"]

logger = logging.getLogger("mlxhost")


async def serve_in_process(settings: Settings) -> None:
    try:
        keys = api_keys(settings)  # read now: a bad key file stops startup before the model loads
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    warn_if_exposed(settings, keys)
    prepare_state_dir(settings)  # its prompt caches are kept there
    spec = model_specs(settings)[0]
    try:
        path = resolve_model(spec.path)
    except NotDownloaded:
        if is_offline(settings):
            raise
        # One model and no host around it: pull it first (logged as it goes), then load it.
        path = await anyio.to_thread.run_sync(pull_logged, spec.path)
    kind = detect(path).with_tasks(spec.task)
    if (problem := encoder_problem(kind)) is not None:
        raise StartupError(f"model '{spec.id}' cannot be served: {problem}")
    logger.info("loading %s from %s (in-process)", spec.id, path)
    shutdown = Shutdown()

    def on_ready(engine: Engine, listener: Listener) -> None:
        logger.info(
            "%s model %s (loaded in %.2fs) on %s",
            HOST_READY,
            spec.id,
            engine.load_seconds,
            " and ".join(listener.addresses),
        )
        report_ready([spec.id], listener.addresses, engine.load_seconds)

    async def background(engine: Engine) -> None:
        await shutdown.watch_signals()

    try:
        await serve_model(
            settings,
            path,
            spec.id,
            binds(settings),
            shutdown,
            on_ready,
            background,
            adapter_path=spec.adapter,
            kind=kind,
            draft_path=None if spec.draft is None else str(resolve_model(spec.draft)),
        )
    except* BindError as group:
        raise StartupError(str(group.exceptions[0])) from None
