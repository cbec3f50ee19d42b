"""`mlxhost serve` as the parent: a pool of supervised workers behind one HTTP front.

The parent never imports MLX; a crashed worker costs only its own model's requests.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import anyio

from mlxhost.client.discovery import announce, withdraw
from mlxhost.config import ConfigError, Settings, binds
from mlxhost.errors import NotDownloaded, StartupError
from mlxhost.host.downloads import start_pulls
from mlxhost.host.app import create_host_app
from mlxhost.host.events import EventHub
from mlxhost.host.jobs.runner import JobRunner
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.serving.sessions import CancelReason, SessionRegistry
from mlxhost.host.state import ParentState
from mlxhost.host.workers.pool import ModelPool
from mlxhost.catalog.tasks import encoder_problem
from mlxhost.catalog.sources import is_offline, model_kind, model_specs, resolve_model
from mlxhost.catalog.spec import ModelSpec
from mlxhost.catalog.ranks import InvalidGroup, check_sharding
from mlxhost.runtime.guard import api_keys, warn_if_exposed
from mlxhost.runtime.listener import BindError, Listener, serve_in
from mlxhost.runtime.ready import report_ready
from mlxhost.runtime.shutdown import Shutdown
from mlxhost.runtime.state_dir import prepare_state_dir
from mlxhost.wire.admin import HostStarted, HostStopping
from mlxhost.wire.layout import ADMIN_TOKEN_FILE, HOST_READY

__all__ = ["make_runtime_dir", "serve_host"]

logger = logging.getLogger("mlxhost")


def write_admin_token(runtime_dir: Path, token: str) -> Path:
    path = runtime_dir / ADMIN_TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token)
    return path


def new_token() -> str:
    # Hex, never a leading '-': a token is passed on command lines, where '-x...' reads as a flag.
    return secrets.token_hex(24)


def make_runtime_dir(settings: Settings) -> Path:
    """A private (0700) directory for worker sockets; the host removes it on exit."""
    base = settings.runtime_dir or os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(tempfile.mkdtemp(prefix="mlxhost-", dir=base))


async def serve_host(settings: Settings) -> None:
    try:
        keys = api_keys(settings)
    except ConfigError as exc:
        raise StartupError(str(exc)) from None
    warn_if_exposed(settings, keys)
    specs = model_specs(settings)
    paths, to_pull = _model_paths(specs, settings)
    for spec in specs:  # a draft model missing is said now, not at each of the worker's starts
        if spec.draft is not None:
            resolve_model(spec.draft)
    for spec in specs:
        if spec in to_pull:
            continue  # its files say what it is once they are here
        kind = model_kind(spec)
        if (problem := encoder_problem(kind)) is not None:
            raise StartupError(f"model '{spec.id}' cannot be served: {problem}")
        if spec.group is not None and kind.tasks != ("generate",):
            raise StartupError(f"model '{spec.id}': embeddings and reranking are not served by a group yet")
        if spec.group is not None:
            try:
                await check_sharding(paths[spec.id], spec.group)
            except InvalidGroup as exc:
                raise StartupError(f"model '{spec.id}': {exc}") from None
    prepare_state_dir(settings)
    try:
        listener = Listener(binds(settings), max_connections=settings.max_connections)
    except BindError as exc:
        raise StartupError(str(exc)) from None
    runtime_dir = make_runtime_dir(settings)
    token_file = write_admin_token(runtime_dir, settings.admin_token or new_token())
    shutdown = Shutdown()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(shutdown.watch_signals)
            events = EventHub()
            sessions = SessionRegistry(events)
            coordinator = ExecutionCoordinator()
            async with (
                ModelPool.open(
                    settings,
                    specs,
                    paths,
                    runtime_dir,
                    events,
                    sessions.progress,
                    spawn_gate=coordinator.wait_no_exclusive,
                ) as pool,
                JobRunner.open(settings, pool, coordinator, events) as jobs,
            ):
                await start_pulls(to_pull, pool, jobs, tg)
                app = create_host_app(
                    pool, settings, sessions, token_file.read_text(), keys, coordinator=coordinator, jobs=jobs
                )
                events.publish(HostStarted(pid=os.getpid(), models=tuple(s.id for s in specs)))
                async with anyio.create_task_group() as preloading:
                    # A signal during a slow first load stops waiting for it.
                    preloading.start_soon(_cancel_on, shutdown.requested, preloading.cancel_scope)
                    await pool.preload()
                    preloading.cancel_scope.cancel()
                url = next((a for a in listener.addresses if a.startswith("http")), None)
                announce(url, settings.unix, token_file)
                logger.info(
                    "%s %s on %s",
                    HOST_READY,
                    ", ".join(s.id for s in specs),
                    " and ".join(listener.addresses),
                )
                report_ready([s.id for s in specs], listener.addresses)
                stop = anyio.Event()
                async with anyio.create_task_group() as serving:
                    serving.start_soon(_drain_on_shutdown, app.state.parent, pool, shutdown, stop)
                    serve_in(serving, listener, app, stop)
            tg.cancel_scope.cancel()
    finally:
        withdraw()
        shutil.rmtree(runtime_dir, ignore_errors=True)


def _model_paths(specs: tuple[ModelSpec, ...], settings: Settings) -> tuple[dict[str, Path], list[ModelSpec]]:
    """Each model's directory, and the models whose repos this host must pull first."""
    paths: dict[str, Path] = {}
    to_pull: list[ModelSpec] = []
    for spec in specs:
        try:
            paths[spec.id] = resolve_model(spec.path)
        except NotDownloaded:
            if is_offline(settings):
                raise
            if spec.group is not None:
                raise StartupError(
                    f"model '{spec.id}': a group of ranks serves a model on disk; pull it first "
                    f"(mlxhost pull {spec.path})"
                ) from None
            paths[spec.id] = Path(spec.path)  # until its files arrive
            to_pull.append(spec)
    return paths, to_pull


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _drain_on_shutdown(parent: ParentState, pool: ModelPool, shutdown: Shutdown, stop: anyio.Event) -> None:
    await shutdown.requested.wait()
    grace = parent.settings.shutdown_grace
    logger.info(
        "%s: refusing new requests, letting running ones finish for up to %gs", shutdown.reason, grace
    )
    parent.accepting = False
    parent.events.publish(HostStopping(reason=shutdown.reason, grace_s=grace))
    await shutdown.wait_grace(grace, parent.sessions.wait_empty)
    # Cancelled sessions end their streams with an error chunk saying why: let them write it
    # before Hypercorn closes the connections.
    parent.sessions.cancel_all(CancelReason.SHUTDOWN)
    parent.coordinator.close()  # sessions waiting behind a job leave the line
    with anyio.move_on_after(2.0):
        await parent.sessions.wait_empty()
    async with anyio.create_task_group() as tg:

        async def force() -> None:
            await shutdown.forced.wait()
            for supervisor in pool.supervisors():
                supervisor.kill()  # its live process only: never a pid that may have been reused

        tg.start_soon(force)
        async with anyio.create_task_group() as stopping:
            for supervisor in pool.supervisors():
                stopping.start_soon(supervisor.stop, False)
        tg.cancel_scope.cancel()
    # Open admin event streams would otherwise hold Hypercorn's shutdown for its graceful_timeout.
    parent.events.close()
    stop.set()
