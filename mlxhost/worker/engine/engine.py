"""The engine: a model served by continuous batching, as the worker's routes use it.

The model is loaded, and every MLX operation runs, in one generation thread (batching.py), which
steps mlx-lm's BatchGenerator over all open sessions. Prompts are encoded in a tokenizer thread
(tokenizer.py), never on the event loop. The engine is the event loop's side of both: it opens
sessions, hands them to the generation thread, passes each session the output that thread hands
back, and says when everything is idle or a session has finished. It also holds the pause gate
that pause.py closes for a managed job: `close_gate`, `wait_quiet`, `open_gate`.

With a state directory and a disk bound, the prompt cache gets its disk tier (cache/disk.py)
once the model is loaded: the model's fingerprint names its folder, and a probe cache (one token
through the model) gives the signature every loaded cache must match.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mlx.core as mx
import mlx_lm
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import ConcatenateKVCache, KVCache, QuantizedKVCache, make_prompt_cache
from mlx_lm.utils import sharded_load

from mlxhost.worker.cache.disk import PromptStore
from mlxhost.worker.cache.files import cache_signature
from mlxhost.worker.cache.folder import (
    keep_signature,
    kept_signature,
    make_folder,
    model_fingerprint,
    store_folder,
)
from mlxhost.worker.cache.memory import PromptCache, PromptCacheStatistics
from mlxhost.worker.engine.batching import Batching, EngineFailed, Outputs
from mlxhost.worker.engine.generation import GenerationRequest, GenerationSession
from mlxhost.worker.engine.grammar_compiler import Grammars
from mlxhost.worker.engine.group import SEED, LeadingGenerator, Link, describe_ranks, follow
from mlxhost.worker.engine.tokenizer import Tokenizer, context_length

__all__ = [
    "Engine",
    "EngineFailed",
    "EngineOptions",
    "EngineStatistics",
    "EngineStopped",
    "make_generator",
    "serve_follower",
]

logger = logging.getLogger("mlxhost.engine")


@dataclass(frozen=True)
class EngineOptions:
    max_batch: int = 32
    prefill_batch: int = 8
    prefill_step: int = 2048
    prompt_cache_entries: int = 10
    prompt_cache_bytes: int = 1 << 30
    # The disk tier: at most this many bytes under <state_dir>/prompt-cache/ (0 or no state_dir:
    # memory only).
    prompt_cache_disk_bytes: int = 0
    state_dir: Path | None = None
    # Decoded text reaches the event loop at most this often (first tokens and endings at once).
    # Each hand-over wakes the loop, whose Python then holds the GIL the generation thread needs
    # between steps; readers send frames only every stream_interval anyway.
    publish_interval: float = 0.0
    adapter_path: str | None = None  # LoRA adapters (mlx-lm's adapter directory) loaded over the model
    # In a worker group (group.py): how the model is split across the ranks of MLX's distributed
    # group, "tensor" or "pipeline"; this engine is rank 0's. None: a single worker.
    sharding: str | None = None


@dataclass(frozen=True)
class EngineStatistics:
    active: int  # sessions in the batch (prefilling or decoding)
    waiting: int  # submitted, not yet in the batch
    steps: int
    prompt_tokens: int
    generated_tokens: int
    completed: int
    cancelled: int
    failed: int
    largest_batch: int  # most sequences decoded in one step so far
    last_cancel_lag_steps: int | None  # steps between cancel() and leaving the batch
    max_cancel_lag_steps: int | None


class EngineStopped(Exception):
    pass


class Engine:
    def __init__(self, model_path: Path, options: EngineOptions = EngineOptions()) -> None:
        self.model_path = model_path
        self.options = options
        # Known once the model is loaded (`open` yields the engine only then).
        self.context_length: int | None = None
        self.load_seconds = 0.0
        self.vocab_size = 0
        self.max_token_chars: int | None = None  # see Tokenizer.max_token_chars
        self.ranks: list[dict[str, Any]] = []  # a group's ranks (group.describe_ranks), once loaded
        self._tokenizer: Tokenizer | None = None
        self.grammars: Grammars  # compiles and caches output grammars; set at load
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle = anyio.Event()
        self._idle.set()
        self._finished = anyio.Event()
        self._sessions: set[GenerationSession] = set()  # open ones; touched on the loop only
        self._prompt_cache = prompt_cache_of(options)
        self._batching = Batching(self._prompt_cache, options.publish_interval, self._hand_over)
        self._batching.on_quiet = self._report_quiet
        self._quiet = anyio.Event()  # set once the thread is quiet for the current closing of the gate
        # Called on the event loop as each session ends, before its reader sees the end.
        self.on_finished: Callable[[GenerationSession], None] | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls, model_path: Path, options: EngineOptions = EngineOptions()
    ) -> AsyncIterator[Engine]:
        """Load the model in a new generation thread; stop the thread on exit."""
        engine = cls(model_path, options)
        engine._loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tg:
            await tg.start(engine._run_thread)
            try:
                yield engine
            finally:
                engine._stop()

    async def _run_thread(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        # A thread of our own rather than one from anyio's pool: MLX keeps per-thread state
        # (the thread's stream), which should end with the engine, not linger in an idle pool
        # thread until interpreter exit.
        loop = self._loop
        assert loop is not None
        ready = anyio.Event()  # set when the model is loaded, or when the thread ended early
        finished = anyio.Event()
        failure: list[BaseException] = []

        def ended() -> None:
            finished.set()
            ready.set()

        def main() -> None:
            try:
                self._thread_main(lambda: loop.call_soon_threadsafe(ready.set))
            except BaseException as exc:
                failure.append(exc)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is already closed
                    loop.call_soon_threadsafe(ended)

        threading.Thread(target=main, name="mlxhost-generation", daemon=True).start()
        try:
            await ready.wait()
            if not finished.is_set():
                task_status.started()
                await finished.wait()
        finally:
            self._stop()
            with anyio.CancelScope(shield=True):
                await finished.wait()
        if failure:
            raise failure[0]

    def _thread_main(self, started: Callable[[], object]) -> None:
        """The generation thread: load the model, then batch until the engine stops."""
        began = time.perf_counter()
        options = self.options
        if options.sharding is not None:
            model, loaded, self.ranks = load_shard(self.model_path, options.sharding)
        else:
            model, loaded = mlx_lm.load(str(self.model_path), adapter_path=options.adapter_path)[:2]
        tokenizer = self._tokenizer = Tokenizer(loaded)
        self.vocab_size = tokenizer.vocab_size
        logits = getattr(getattr(model, "args", None), "vocab_size", None)
        self._batching.vocab_size = logits if isinstance(logits, int) else tokenizer.vocab_size
        self.grammars = Grammars(loaded, self._batching.vocab_size)
        self.max_token_chars = tokenizer.max_token_chars
        self.context_length = context_length(model)
        tokenizer.warm()
        self.load_seconds = time.perf_counter() - began
        gc.freeze()  # the model's and tokenizer's objects, as the worker's imports (see its preload)
        generator: Any = make_generator(model, tokenizer.decoder.eos_token_ids, options)
        if options.sharding is not None:
            generator = LeadingGenerator(generator, Link(mx.distributed.init(), generator.stream))
        disk = self._open_disk_tier(model)
        try:
            self._batching.run(generator, tokenizer, started)
        finally:
            if disk is not None:
                disk.close()  # the queued writes finish first

    def _open_disk_tier(self, model: object) -> PromptStore | None:
        # A cache of this model after one token: its layer classes, shapes and dtypes.
        probe = make_prompt_cache(model)  # type: ignore[arg-type]
        plain = (KVCache, QuantizedKVCache, ConcatenateKVCache)
        self._batching.snapshots = any(not isinstance(layer, plain) for layer in probe)
        if self.options.sharding is not None:
            # A group keeps its prompt cache in memory only: each rank's files would hold its
            # own shard, and a rank's loader thread would take entries in when it pleased.
            return None
        options = self.options
        if not (self._prompt_cache.enabled and options.prompt_cache_disk_bytes > 0 and options.state_dir):
            return None
        if not self.model_path.is_dir():
            return None
        adapter = Path(options.adapter_path) if options.adapter_path else None
        try:
            fingerprint = model_fingerprint(self.model_path, adapter)
            folder = store_folder(options.state_dir, self.model_path, fingerprint)
            make_folder(folder, self.model_path, adapter, fingerprint)  # with the record of its model
            signature = kept_signature(folder)
            if signature is None:
                model(mx.array([[0]]), cache=probe)  # type: ignore[operator]
                mx.eval([layer.state for layer in probe])
                signature = cache_signature(probe)
                keep_signature(folder, signature)
            store = PromptStore(folder, options.prompt_cache_disk_bytes, signature)
        except OSError as exc:
            logger.warning("prompt cache: no disk tier: %s", exc)
            return None
        self._prompt_cache.disk = store
        return store

    # -- event loop side ---------------------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        assert self._tokenizer is not None, "the model is not loaded yet"
        return self._tokenizer

    async def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return await self.tokenizer.encode_chat(messages)

    async def encode(self, text: str) -> list[int]:
        return await self.tokenizer.encode(text)

    def busy_seconds(self) -> float:
        """How long the generation thread has been inside its current step (0: waiting for work)."""
        since = self._batching.busy_since
        return 0.0 if since is None else time.monotonic() - since

    def submit(self, request: GenerationRequest, tag: str | None = None) -> GenerationSession:
        if self._batching.stopping:
            raise EngineStopped("the engine is shutting down")
        session = GenerationSession(request, wake_engine=self._batching.wake.set, tag=tag)
        if not self._sessions:
            self._idle = anyio.Event()
        self._sessions.add(session)
        self._batching.admission.submit(session)
        return session

    @asynccontextmanager
    async def generate(
        self, request: GenerationRequest, tag: str | None = None
    ) -> AsyncIterator[GenerationSession]:
        """A session whose generation stops as soon as the block is left, however it is left."""
        session = self.submit(request, tag)
        try:
            yield session
        finally:
            session.cancel("client_disconnected", self._batching.counters.steps)
            session.close()

    @property
    def session_count(self) -> int:
        """Sessions submitted and not yet finished."""
        return len(self._sessions)

    def open_sessions(self) -> list[GenerationSession]:
        return list(self._sessions)

    def cancel_all(self, reason: str) -> None:
        for session in list(self._sessions):
            session.cancel(reason, self._batching.counters.steps)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_request_finished(self) -> None:
        await self._finished.wait()

    def statistics(self) -> EngineStatistics:
        c = self._batching.counters
        return EngineStatistics(
            active=len(self._batching.rows),
            waiting=self._batching.admission.waiting,
            steps=c.steps,
            prompt_tokens=c.prompt_tokens,
            generated_tokens=c.generated_tokens,
            completed=c.completed,
            cancelled=c.cancelled,
            failed=c.failed,
            largest_batch=c.largest_batch,
            last_cancel_lag_steps=c.cancel_lags[-1] if c.cancel_lags else None,
            max_cancel_lag_steps=max(c.cancel_lags) if c.cancel_lags else None,
        )

    def prompt_cache_statistics(self) -> PromptCacheStatistics:
        return self._prompt_cache.statistics()

    def memory(self) -> dict[str, int]:
        return {
            "active_bytes": mx.get_active_memory(),
            "cache_bytes": mx.get_cache_memory(),
            "peak_bytes": mx.get_peak_memory(),
        }

    # -- the pause gate (pause.py counts the leases that hold it) --------------------------------

    @property
    def paused(self) -> bool:
        return self._batching.paused

    def close_gate(self) -> None:
        """Take in no new session until `open_gate`; running ones finish, submitted ones wait."""
        batching = self._batching
        if batching.paused:
            return
        self._quiet = anyio.Event()
        batching.pause_number += 1
        batching.paused = True
        batching.wake.set()

    def open_gate(self) -> None:
        """Resume: the sessions that waited are taken in before the next step."""
        self._batching.paused = False
        self._batching.wake.set()

    async def wait_quiet(self) -> None:
        """With the gate closed: until no sequence is in the batch and MLX's cache is freed."""
        assert self._batching.paused, "the gate is open"
        await self._quiet.wait()

    def _report_quiet(self, number: int) -> None:
        # In the generation thread, like _hand_over.
        if self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._quieted, number)
        except RuntimeError:
            pass  # the event loop is closed

    def _quieted(self, number: int) -> None:
        batching = self._batching
        if batching.paused and number == batching.pause_number:
            self._quiet.set()

    def _stop(self) -> None:
        self._batching.stopping = True  # no new sessions; the thread ends once none is left
        self.cancel_all("shutdown")
        self._batching.wake.set()

    def _hand_over(self, outputs: Outputs) -> None:
        # In the generation thread, which never waits for the event loop (anyio's from_thread
        # would make it wait); the host runs on asyncio anyway, since Hypercorn serves on asyncio.
        if self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._deliver, outputs)
        except RuntimeError:
            pass  # the event loop is closed: nobody is left to read

    def _deliver(self, outputs: Outputs) -> None:
        finished = False
        for session, delta in outputs:
            session.deliver(delta)
            if delta.finish_reason is not None:
                self._sessions.discard(session)
                finished = True
                if self.on_finished is not None:
                    self.on_finished(session)
        if finished:
            self._finished.set()
            self._finished = anyio.Event()
        if not self._sessions:
            self._idle.set()


def make_generator(model: Any, eos_token_ids: Sequence[int], options: EngineOptions) -> BatchGenerator:
    """The BatchGenerator an engine steps; every rank of a group builds the same one."""
    return BatchGenerator(
        model,
        stop_tokens=[[t] for t in eos_token_ids],
        completion_batch_size=options.max_batch,
        prefill_batch_size=options.prefill_batch,
        prefill_step_size=options.prefill_step,
    )


def load_shard(model_path: Path, sharding: str) -> tuple[Any, Any, list[dict[str, Any]]]:
    """This rank's shard of the model, the tokenizer, and every rank (once all have loaded)."""
    group = mx.distributed.init(strict=True)
    if sharding == "tensor":
        model, tokenizer = sharded_load(str(model_path), tensor_group=group)
    elif sharding == "pipeline":
        model, tokenizer = sharded_load(str(model_path), pipeline_group=group)
    else:
        raise ValueError(f"sharding must be 'tensor' or 'pipeline', not {sharding!r}")
    mx.random.seed(SEED)  # every rank samples alike (see group.py)
    return model, tokenizer, describe_ranks(group)


def serve_follower(model_path: Path, options: EngineOptions, on_loaded: Callable[[], object]) -> None:
    """A follower rank of a group: load its shard, then make rank 0's calls until it closes."""
    assert options.sharding is not None
    model, loaded, _ = load_shard(model_path, options.sharding)
    tokenizer = Tokenizer(loaded)
    logits = getattr(getattr(model, "args", None), "vocab_size", None)
    vocab_size = logits if isinstance(logits, int) else tokenizer.vocab_size
    generator = make_generator(model, tokenizer.decoder.eos_token_ids, options)
    on_loaded()
    follow(generator, Link(mx.distributed.init(), generator.stream), vocab_size, prompt_cache_of(options))


def prompt_cache_of(options: EngineOptions) -> PromptCache:
    """The memory tier an engine keeps; every rank of a group keeps the same (see group.py)."""
    # A pipelined group keeps none: its ranks' shards of an entry differ in size (group.py).
    entries = 0 if options.sharding == "pipeline" else options.prompt_cache_entries
    return PromptCache(entries, options.prompt_cache_bytes)
