"""The model pool: which models are configured, which are resident, and which to load or unload.

A request names a model: its id or an exact alias first, then the aliases that are patterns
(`claude-*`), tried in configuration order, so the first model whose pattern matches takes the
name; a missing name means the default (first) model, and an unknown one the default as well, or
404 with `strict_models`. Patterns only route: /v1/models and every other list of names give the
exact ones. A model that is not resident is
started on demand, one cold start at a time. Residency is bounded by `max_resident` and by
`memory_budget`, counted from the workers' own memory readings (the weights' size until the
first reading). To make room, the least recently used idle worker is drained and stopped; a
worker with requests in flight, or waited for, is never chosen. A ready model unused for its idle
TTL is unloaded.

Models can join while the host runs: a managed job's output (`register`), served like any other.
A configured model whose files are still being pulled from the hub is pending (`wait_for`): it is
listed, a request for it is told it is downloading (503, retry later), and it loads once its files
`arrived` (or keeps telling why its pull failed).
No worker starts while a job holds the exclusive execution lease (`spawn_gate`).

Once the preloaded models are up, the pool keeps `standby_workers` warm interpreters
(`mlxhost.host.workers.standby`): a worker's respawn or a cold start takes one, and costs the model's load
rather than a fresh interpreter's imports. They are closed after the workers, as the pool closes.

A worker chosen to go leaves the pool at once, before it has stopped: no request is routed to it
from then on, and requests for its model start a fresh worker. Taking a worker and counting a
request in flight on it happen with no checkpoint in between (`acquire`, then `Supervisor.lease`),
so a worker the pool finds idle has nobody about to use it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.workers.standby import StandbyPool
from mlxhost.host.workers.status import WorkerState, WorkerUnavailable
from mlxhost.host.workers.supervisor import Supervisor
from mlxhost.catalog.spec import ModelSpec
from mlxhost.catalog.sources import refresh_kinds
from mlxhost.wire.admin import ModelEvicted, ModelRecord
from mlxhost.wire.admin.state import DownloadRecord
from mlxhost.wire.inert import excerpt
from mlxhost.wire.launch import SessionProgress

__all__ = ["ModelPool", "UnknownModel"]

logger = logging.getLogger("mlxhost.pool")

IDLE_CHECK_INTERVAL = 1.0


class UnknownModel(Exception):
    pass


class ModelPool:
    def __init__(
        self,
        settings: Settings,
        specs: tuple[ModelSpec, ...],
        paths: dict[str, Path],
        runtime_dir: Path,
        task_group: anyio.abc.TaskGroup,
        events: EventHub | None = None,
        on_progress: Callable[[SessionProgress], None] | None = None,
        spawn_gate: Callable[[], Awaitable[None]] | None = None,
        standby: StandbyPool | None = None,
    ) -> None:
        self.events = events or EventHub()
        self._on_progress = on_progress
        self._spawn_gate = spawn_gate
        self.standby = standby
        self.settings = settings
        self.specs = specs
        self.default = specs[0]
        self.origins: dict[str, Mapping[str, str]] = {}  # a registered model's metadata (its job)
        self._paths = paths
        self._runtime_dir = runtime_dir
        self._tg = task_group
        self._names = {name: spec for spec in specs for name in spec.names}
        self._pending: dict[str, DownloadRecord] = {}  # model id → its serve-time pull
        self._arrived: dict[str, anyio.Event] = {}
        self._resident: dict[str, Supervisor] = {}
        self._cold_start = anyio.Lock()
        self._socket_ids = iter(range(1, 1 << 30))
        self._closed = False
        self.evictions = 0

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        settings: Settings,
        specs: tuple[ModelSpec, ...],
        paths: dict[str, Path],
        runtime_dir: Path,
        events: EventHub | None = None,
        on_progress: Callable[[SessionProgress], None] | None = None,
        spawn_gate: Callable[[], Awaitable[None]] | None = None,
    ) -> AsyncIterator[ModelPool]:
        # The standbys close after the workers (whose output may still run through their pumps).
        async with (
            StandbyPool.open(settings, spawn_gate, start=False) as standby,
            anyio.create_task_group() as tg,
        ):
            pool = cls(settings, specs, paths, runtime_dir, tg, events, on_progress, spawn_gate, standby)
            tg.start_soon(pool._unload_idle)
            try:
                yield pool
            finally:
                with anyio.CancelScope(shield=True):
                    await pool.close()
                tg.cancel_scope.cancel()

    def resolve(self, name: object) -> ModelSpec:
        if not isinstance(name, str) or not name:
            return self.default
        spec = self._names.get(name) or next((s for s in self.specs if s.matches(name)), None)
        if spec is not None:
            return spec
        if self.settings.strict_models:
            patterns = [p for s in self.specs for p in s.patterns]
            raise UnknownModel(
                f"the model '{excerpt(name)}' does not exist; this host serves "
                + ", ".join(repr(s.id) for s in self.specs)
                + (f", and names matching {', '.join(repr(p) for p in patterns)}" if patterns else "")
            )
        return self.default

    def resolve_exact(self, name: str) -> ModelSpec | None:
        """The model called `name` (id or exact alias), never a pattern's or the default in its place."""
        return self._names.get(name)

    def path_of(self, model_id: str) -> Path:
        return self._paths[model_id]

    def register(self, spec: ModelSpec, path: Path, origin: Mapping[str, str]) -> None:
        """Serve one more model from now on (a job's output); its exact names must be new.

        A pattern never blocks it: a name that a pattern took until now goes to the new model.
        """
        if any(name in self._names for name in spec.names):
            raise ValueError(f"the model name '{spec.id}' is taken")
        self.specs = (*self.specs, spec)
        self._paths[spec.id] = path
        self._names.update({name: spec for name in spec.names})
        self.origins[spec.id] = origin

    def unregister(self, model_id: str) -> None:
        """Stop serving a registered model (its job was deleted); a resident worker is drained and stopped."""
        spec = self._names.get(model_id)
        if spec is None or model_id not in self.origins:
            return
        self.specs = tuple(s for s in self.specs if s is not spec)
        for name in spec.names:
            self._names.pop(name, None)
        self.origins.pop(model_id, None)
        supervisor = self._resident.get(model_id)
        if supervisor is not None:
            self._retire(supervisor, "deleted")
            self._tg.start_soon(supervisor.stop, True)

    def wait_for(self, model_id: str, download: DownloadRecord) -> None:
        """`model_id`'s files are being pulled: requests are told so until they `arrived`."""
        self._pending[model_id] = download
        self._arrived.setdefault(model_id, anyio.Event())

    def is_pending(self, model_id: str) -> bool:
        return model_id in self._pending

    def pending(self, model_id: str) -> DownloadRecord | None:
        return self._pending.get(model_id)

    def pending_for(self, repo: str) -> list[str]:
        """The pending models whose files are `repo`'s."""
        return [model_id for model_id, download in self._pending.items() if download.repo.partition("@")[0] == repo]

    def arrived(self, model_id: str, path: Path) -> None:
        """The pulled files of a pending model are at `path`: it serves from now on."""
        self._paths[model_id] = path
        self._pending.pop(model_id, None)
        refresh_kinds()  # what it serves is read from its files, which are there now
        event = self._arrived.pop(model_id, None)
        if event is not None:
            event.set()

    async def wait_arrived(self, model_id: str) -> None:
        event = self._arrived.get(model_id)
        if event is not None:
            await event.wait()

    def supervisors(self) -> list[Supervisor]:
        return list(self._resident.values())

    def supervisor(self, model_id: str) -> Supervisor | None:
        return self._resident.get(model_id)

    async def preload(self) -> None:
        """Start the models marked to preload (by default the default model) and wait for them."""
        wanted = [s for s in self.specs if s.preload or (s.preload is None and s is self.default)]
        # One still downloading loads when its files arrive (see `preload_when_arrived`).
        wanted = [s for s in wanted if s.id not in self._pending]
        for spec in wanted[: self.settings.max_resident]:
            try:
                with anyio.fail_after(self.settings.load_timeout + 1):
                    await self.acquire(spec)
            except (WorkerUnavailable, TimeoutError) as exc:
                logger.error("model %s did not load at start: %s", spec.id, exc)
        if self.standby is not None:
            self.standby.start()  # now, not while the first workers import the same libraries

    async def preload_when_arrived(self, model_id: str) -> None:
        """Load a pending model that preloads as soon as its files are in."""
        await self.wait_arrived(model_id)
        spec = self._names.get(model_id)
        if spec is None or self._closed or not (spec.preload or (spec.preload is None and spec is self.default)):
            return
        try:
            with anyio.fail_after(self.settings.load_timeout + 1):
                await self.acquire(spec)
        except (WorkerUnavailable, TimeoutError) as exc:
            logger.error("model %s did not load after its pull: %s", spec.id, exc)

    async def acquire(self, spec: ModelSpec) -> Supervisor:
        """A ready worker for `spec`, starting it if it is not resident.

        It returns without a checkpoint once the worker is ready: lease it at once.
        """
        download = self._pending.get(spec.id)
        if download is not None:
            raise _downloading(spec.id, download)
        while True:
            supervisor = self._resident.get(spec.id)
            try:
                if supervisor is None or supervisor.state is WorkerState.CLOSED:
                    async with self._cold_start:  # one cold start at a time
                        supervisor = self._resident.get(spec.id)
                        if supervisor is None or supervisor.state is WorkerState.CLOSED:
                            supervisor = await self._start(spec)
                        with anyio.fail_after(self.settings.load_timeout):
                            await supervisor.wait_ready()
                else:
                    with anyio.fail_after(self.settings.load_timeout):
                        await supervisor.wait_ready()
            except WorkerUnavailable:
                if supervisor is not None and supervisor.retired and not self._closed:
                    continue  # evicted or unloaded while this request waited for it: load it afresh
                raise
            supervisor.requests.last_used = time.monotonic()
            return supervisor

    async def restart(self, model_id: str, drain: bool = True) -> Supervisor:
        supervisor = self._resident.get(model_id)
        if supervisor is None:
            spec = self._names.get(model_id)
            if spec is None:
                raise UnknownModel(f"no worker '{excerpt(model_id)}'")
            return await self.acquire(spec)
        await supervisor.restart(drain)
        return supervisor

    async def close(self) -> None:
        self._closed = True
        async with anyio.create_task_group() as tg:
            for supervisor in list(self._resident.values()):
                tg.start_soon(supervisor.stop, False)

    def snapshot(self) -> list[ModelRecord]:
        return [
            ModelRecord(
                id=spec.id,
                aliases=spec.names[1:],  # exact names: a pattern names no model
                path=str(self._paths[spec.id]),
                resident=spec.id in self._resident,
                default=spec is self.default,
                download=self._pending.get(spec.id),
            )
            for spec in self.specs
        ]

    async def _start(self, spec: ModelSpec) -> Supervisor:
        if self._closed:
            raise WorkerUnavailable("the server is shutting down", code="shutting_down")
        await self._make_room(spec)
        supervisor = Supervisor(
            spec,
            self._paths[spec.id],
            self.settings,
            self._runtime_dir / f"w{next(self._socket_ids)}.sock",
            self.events,
            self._on_progress,
            spawn_gate=self._spawn_gate,
            standby=self.standby,
        )
        self._resident[spec.id] = supervisor
        await self._tg.start(self._supervise, supervisor)
        return supervisor

    def _retire(self, supervisor: Supervisor, reason: str) -> None:
        """Out of the pool now, and unroutable; its drain and stop follow."""
        self.events.publish(ModelEvicted(model=supervisor.id, reason=reason))
        if self._resident.get(supervisor.id) is supervisor:
            del self._resident[supervisor.id]
        supervisor.retire(drain=True)

    async def _supervise(self, supervisor: Supervisor, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            await supervisor.run(task_status=task_status)
        finally:
            if self._resident.get(supervisor.id) is supervisor:
                del self._resident[supervisor.id]

    async def _make_room(self, spec: ModelSpec) -> None:
        while True:
            count_over = len(self._resident) + 1 > self.settings.max_resident
            budget = self.settings.memory_budget
            needed = self._expected_bytes(spec)
            memory_over = budget > 0 and self._used_bytes() + needed > budget
            if not (count_over or memory_over):
                return
            idle = [s for s in self._resident.values() if not (s.requests.in_flight or s.requests.waiting)]
            if not idle:
                why = "max_resident" if count_over else "memory_budget"
                raise WorkerUnavailable(
                    f"no room to load '{spec.id}': every loaded model has requests in flight "
                    f"({why} reached); try again shortly",
                    code="no_capacity",
                    retry_after=2.0,
                )
            victim = min(idle, key=lambda s: s.requests.last_used)
            logger.info(
                "unloading %s (least recently used) to make room for %s (%s)",
                victim.id, spec.id, "max_resident" if count_over else "memory_budget",
            )
            self.evictions += 1
            self._retire(victim, "max_resident" if count_over else "memory_budget")
            await victim.stop(drain=True)  # its memory is free before the next one loads

    def _used_bytes(self) -> int:
        total = 0
        for supervisor in self._resident.values():
            reading = supervisor.memory
            if reading is not None:
                total += reading.active_bytes + reading.cache_bytes
            else:
                total += self._expected_bytes(supervisor.spec)
        return total

    def _expected_bytes(self, spec: ModelSpec) -> int:
        return sum(f.stat().st_size for f in self._paths[spec.id].glob("*.safetensors"))

    async def _unload_idle(self) -> None:
        while True:
            await anyio.sleep(IDLE_CHECK_INTERVAL)
            now = time.monotonic()
            for supervisor in list(self._resident.values()):
                ttl = supervisor.spec.idle_ttl
                ttl = self.settings.idle_ttl if ttl is None else ttl
                # Only a ready worker is idle: one still loading has its first request waiting.
                ready = supervisor.state is WorkerState.READY
                requests = supervisor.requests
                if ttl and ready and requests.in_flight == 0 and now - requests.last_used > ttl:
                    logger.info("unloading %s: unused for %gs", supervisor.id, ttl)
                    self._retire(supervisor, "idle_ttl")
                    self._tg.start_soon(supervisor.stop, True)


def _downloading(model_id: str, download: DownloadRecord) -> WorkerUnavailable:
    if download.state == "failed":
        return WorkerUnavailable(
            f"the model '{model_id}' could not be pulled from the hub: {download.error}",
            code="model_download_failed",
        )
    done = f"{download.done_bytes / download.total_bytes:.0%} of " if download.total_bytes else ""
    size = f"{download.total_bytes / 1e9:.2f} GB" if download.total_bytes else "its files"
    return WorkerUnavailable(
        f"the model '{model_id}' is still downloading ({done}{size} from {download.repo}); try again shortly",
        code="model_downloading",
        retry_after=5.0,
    )
