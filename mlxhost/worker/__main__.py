"""`python -m mlxhost.worker`: serve one model on a private Unix socket for the parent.

See `mlxhost.wire.launch` for what goes over stdin and stdout. Everything a worker needs is
imported before the launch record is read, then the standby line says so: a parent may keep such
a process waiting (`mlxhost.host.workers.standby`), and a crashed worker's successor then costs the model's
load, not the seconds a fresh interpreter spends importing MLX, mlx-lm and transformers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import psutil

from mlxhost.config import ConfigError, Settings
from mlxhost.config_sources import settings_from_options
from mlxhost.runtime import eventloop
from mlxhost.runtime.shutdown import Shutdown, exit_now
from mlxhost.wire.launch import (
    EXIT_BAD_LAUNCH,
    HOST_PID,
    BadLaunchRecord,
    LaunchRecord,
    MemoryReading,
    ReadyLine,
    SessionProgress,
    SpeculationReading,
    StandbyLine,
)
from mlxhost.wire.layout import ADMIN_TOKEN_FILE

if TYPE_CHECKING:
    from mlxhost.worker.engine.engine import Engine
    from mlxhost.worker.engine.generation import GenerationSession
    from mlxhost.worker.engine.pooled_work import PooledWork

MEMORY_INTERVAL = 1.0
SPECULATION_INTERVAL = 1.0  # a long stream's drafts are told while it runs, not only at its end
PROGRESS_INTERVAL = 0.25
PARENT_GONE = "parent gone (stdin closed)"
PID_POLL = 1.0  # seconds
STDIN_FILENO = 0  # the pipe from the parent, even where sys.stdin was replaced (tests' wrappers)
RSS_GRANULARITY = 1 << 20  # RSS wobbles by pages; report it when it moves by a MiB or more
# What `mlx_lm.load` would still import on its own, for most models, once the serving stack is in.
# The model's own module (mlx_lm.models.<type>) and its tokenizer's are left to the load.
LOAD_IMPORTS = (
    "mlx_lm.models.activations",
    "mlx_lm.models.rope_utils",
    "mlx_lm.tool_parsers.json_tools",
    "transformers.utils.type_validators",
    "transformers.video_utils",
    # anyio imports its event loop backend, and these parts of itself, only when first used.
    "anyio._backends._asyncio",
    "anyio._core._signals",
    "anyio._core._sockets",
    "anyio._core._streams",
    "anyio.streams.stapled",
    "encodings.unicode_escape",
    "uvloop",  # the event loop (mlxhost.runtime.eventloop), when installed: 70 ms to import
)

logger = logging.getLogger("mlxhost.worker")


def main() -> None:
    preload()
    try:
        print(StandbyLine(os.getpid()).encode(), flush=True)
    except BrokenPipeError:  # the parent went while this process imported
        os._exit(0)
    line = sys.stdin.buffer.readline()
    if not line:
        # The parent went (or dropped this standby) before it needed a worker: nothing was made,
        # nothing is wrong, and nobody reads a reason.
        sys.exit(0)
    try:
        record = LaunchRecord.decode(line)
        settings = settings_from_options(record.options.given())
    except (BadLaunchRecord, ConfigError) as exc:
        print(f"mlxhost worker: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_LAUNCH)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    rank = int(os.environ.get("MLX_RANK", "0"))
    if record.sharding is not None and rank != 0:
        # A follower rank of a group: no socket, no reports; rank 0 speaks for the group.
        from mlxhost.worker.engine.loading import serve_follower
        from mlxhost.worker.serve import engine_options

        serve_follower(Path(record.model_path), engine_options(settings, sharding=record.sharding), lambda: None)
        exit_now(0)
    watch = ParentWatch()
    # mlx.launch, between a group's rank 0 and the host, never closes the ranks' stdin: rank 0
    # watches the host's pid instead.
    watch.start(int(os.environ[HOST_PID]) if record.sharding is not None and HOST_PID in os.environ else None)
    eventloop.run(_run, record, settings, watch)
    exit_now(0)


def preload() -> None:
    """Import what serving will need, before the launch record says which model to serve."""
    # mlx.core, mlx_lm and transformers' tokenizer machinery, the engine, the app: seconds.
    import mlxhost.worker.serve  # noqa: F401

    for name in LOAD_IMPORTS:
        with contextlib.suppress(ImportError):  # another library version may not have it
            importlib.import_module(name)
    # The imports leave hundreds of thousands of objects that live as long as the process. Out of
    # the collector's sight, they cost no full collection later: one of those landing on the
    # first request after a crash cost it about 25 ms.
    gc.collect()
    gc.freeze()


class ParentWatch:
    """End of stdin means the parent has gone; this notices it from the moment the worker starts.

    A blocking read returns only at end of file. It runs in a daemon thread of its own: a pool
    thread still blocked in read() would keep the process from exiting. Before the worker is
    ready, nobody waits for it and `mlx_lm.load` cannot be interrupted, so the process just ends;
    it has made nothing yet (its socket comes with readiness) and so removes nothing. Once ready,
    the parent's going starts a drain like SIGTERM.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # readiness and the end of stdin: one or the other first
        self._on_gone: Callable[[], None] | None = None

    def start(self, host_pid: int | None = None) -> None:
        """Watch stdin; or, given `host_pid`, that process (polled every PID_POLL seconds)."""
        target = self._read_until_eof if host_pid is None else functools.partial(self._poll, host_pid)
        threading.Thread(target=target, name="mlxhost-parent-watch", daemon=True).start()

    def _poll(self, pid: int) -> None:
        while True:
            time.sleep(PID_POLL)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass  # alive, another user's: not the host that started this group, but alive
        self._gone()

    def ready(self, announce: Callable[[], None], on_gone: Callable[[], None]) -> None:
        """Announce readiness, unless the parent has gone; from then on its going calls `on_gone`."""
        with self._lock:
            announce()
            self._on_gone = on_gone

    def _read_until_eof(self) -> None:
        # os.read on the descriptor, not sys.stdin: a thread parked in a buffered read holds the
        # buffer's lock, and the interpreter aborts when it finds that lock taken at exit.
        while os.read(STDIN_FILENO, 4096):
            pass
        self._gone()

    def _gone(self) -> None:
        with self._lock:
            on_gone = self._on_gone
            if on_gone is None:
                print(f"mlxhost worker: {PARENT_GONE} while loading; exiting", file=sys.stderr, flush=True)
                os._exit(0)
        on_gone()


async def _run(record: LaunchRecord, settings: Settings, watch: ParentWatch) -> None:
    from mlxhost.catalog.tasks import detect
    from mlxhost.worker.serve import serve_model

    shutdown = Shutdown()
    loop = asyncio.get_running_loop()
    parent_gone = anyio.Event()

    def on_parent_gone() -> None:  # called in the watch thread
        with contextlib.suppress(RuntimeError):  # the loop already ended
            loop.call_soon_threadsafe(parent_gone.set)

    def on_ready(engine: Engine, listener: object) -> None:
        ready = ReadyLine(
            os.getpid(), record.socket, record.model_id, record.version, engine.load_seconds, engine.ranks
        )
        watch.ready(lambda: print(ready.encode(), flush=True), on_parent_gone)

    async def background(engine: Engine) -> None:
        engine.on_finished = _report_final
        engine.on_pooled = _report_pooled
        async with anyio.create_task_group() as tg:
            tg.start_soon(shutdown.watch_signals)
            tg.start_soon(_watch_parent, parent_gone, shutdown)
            tg.start_soon(_report_memory, engine)
            tg.start_soon(_report_speculation, engine)
            tg.start_soon(_report_progress, engine)

    from mlxhost.worker.engine.loading import DraftMismatch

    refused = None
    try:
        await serve_model(
            settings,
            Path(record.model_path),
            record.model_id,
            [f"unix:{record.socket}"],
            shutdown,
            on_ready,
            background,
            adapter_path=record.adapter_path,
            draft_path=record.draft_path,
            sharding=record.sharding,
            kind=detect(Path(record.model_path)).with_tasks(tuple(record.tasks)),
        )
    except* DraftMismatch as group:
        refused = group.exceptions[0]
    if refused is not None:
        # A draft model of another tokenizer fails every start alike: said once, not tried again.
        print(f"mlxhost worker: {refused}", file=sys.stderr, flush=True)
        sys.exit(EXIT_BAD_LAUNCH)
    if shutdown.reason == PARENT_GONE:
        # Nobody is left to remove the parent's runtime directory; the last worker out does
        # (rmdir fails, harmlessly, while other workers' sockets are still in it).
        runtime_dir = Path(record.socket).parent
        with contextlib.suppress(OSError):
            (runtime_dir / ADMIN_TOKEN_FILE).unlink()
        with contextlib.suppress(OSError):
            runtime_dir.rmdir()


async def _watch_parent(gone: anyio.Event, shutdown: Shutdown) -> None:
    await gone.wait()
    shutdown.request(PARENT_GONE)


async def _report_memory(engine: object) -> None:
    from mlxhost.worker.engine.engine import Engine

    assert isinstance(engine, Engine)
    process = psutil.Process()
    last: tuple[int, ...] | None = None
    while True:
        memory = engine.memory()
        reading = MemoryReading(rss_bytes=process.memory_info().rss, **memory)
        key = (reading.active_bytes, reading.cache_bytes, reading.peak_bytes, reading.rss_bytes // RSS_GRANULARITY)
        if key != last:
            print(reading.encode(), flush=True)
            last = key
        with anyio.move_on_after(MEMORY_INTERVAL):
            await engine.wait_request_finished()


async def _report_speculation(engine: Engine) -> None:
    """Tell the host the engine's draft totals when they change (never, while nothing drafts)."""
    last = SpeculationReading(0, 0, 0, 0)
    while True:
        with anyio.move_on_after(SPECULATION_INTERVAL):
            await engine.wait_request_finished()
        stats = engine.statistics()
        reading = SpeculationReading(
            stats.drafted_tokens, stats.accepted_tokens, stats.verifications, stats.verified_tokens
        )
        if reading != last:
            print(reading.encode(), flush=True)
            last = reading


def _report_final(session: GenerationSession) -> None:
    # The engine calls this as it delivers a session's last delta, after the generation thread
    # has removed the sequence from its batch: `done` tells the host that memory is free.
    if session.tag:
        rate = session.tokens / max(time.monotonic() - session.created, 1e-3)
        prompt = len(session.request.prompt)
        final = session.finish  # the last delta: it carries the session's draft totals
        drafted, accepted = (final.drafted_tokens, final.accepted_tokens) if final else (0, 0)
        report = SessionProgress(
            session.tag, session.tokens, round(rate, 1), prompt, done=True,
            drafted_tokens=drafted, accepted_tokens=accepted,
        )  # fmt: skip
        print(report.encode(), flush=True)


def _report_pooled(work: PooledWork) -> None:
    # As _report_final, for an embed or rerank request: the thread holds none of its inputs.
    if work.tag:
        rate = work.tokens / max(time.monotonic() - work.created, 1e-3)
        report = SessionProgress(work.tag, 0, round(rate, 1), work.tokens, done=True, inputs=work.done)
        print(report.encode(), flush=True)


async def _report_progress(engine: Engine) -> None:
    """Tell the host how far each of its sessions got, a few times a second at most."""
    reported: dict[int, int] = {}
    while True:
        await anyio.sleep(PROGRESS_INTERVAL)
        now = time.monotonic()
        live = {}
        for session in engine.open_sessions():
            live[session.id] = session.tokens
            if session.tag and session.tokens != reported.get(session.id):
                rate = session.tokens / max(now - session.created, 1e-3)
                report = SessionProgress(
                    session.tag, session.tokens, round(rate, 1), len(session.request.prompt)
                )
                print(report.encode(), flush=True)
        reported = {k: v for k, v in live.items()}


if __name__ == "__main__":
    main()
