"""The engine: a model served by continuous batching, as the worker's routes use it.

The model is loaded, and every MLX operation runs, in one generation thread (batching.py), which
steps mlx-lm's BatchGenerator over all open sessions. Prompts are encoded in a tokenizer thread
(tokenizer.py), never on the event loop. The engine is the event loop's side of both: it opens
sessions, hands them to the generation thread, passes each session the output that thread hands
back, and says when everything is idle or a session has finished. It also holds the pause gate
that pause.py closes for a managed job: `close_gate`, `wait_quiet`, `open_gate`.

The generation thread loads the model first (loading.py), with the prompt cache's disk tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxhost.worker.cache.memory import PromptCacheStatistics
from mlxhost.worker.engine.batching import Batching, EngineStatistics, Outputs
from mlxhost.worker.engine.encoders import NoGeneration, load_encoder
from mlxhost.worker.engine.generation import GenerationRequest, GenerationSession
from mlxhost.worker.engine.grammar_compiler import Grammars
from mlxhost.worker.engine.group import LeadingGenerator, Link
from mlxhost.worker.engine.loading import (
    KVLayout,
    load_draft,
    load_model,
    logits_width,
    make_generator,
    open_disk_tier,
    prompt_cache_of,
    wants_snapshots,
)
from mlxhost.worker.engine.options import EngineOptions
from mlxhost.worker.engine.pooled import DecoderPooler, PooledCounters
from mlxhost.worker.engine.pooled_work import PooledWork
from mlxhost.worker.engine.tokenizer import Tokenizer, context_length

__all__ = ["Engine", "EngineStatistics", "EngineStopped"]


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
        self.kv_layout = KVLayout(False, "not loaded yet")  # the batch's, once loaded
        self.hidden_size = 0  # an embedding's width, for a model that pools
        self._tokenizer: Tokenizer | None = None
        self.grammars: Grammars  # compiles and caches output grammars; set at load
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle = anyio.Event()
        self._idle.set()
        self._finished = anyio.Event()
        self._sessions: set[GenerationSession] = set()  # open ones; touched on the loop only
        self._prompt_cache = prompt_cache_of(options)
        self._batching = Batching(
            self._prompt_cache,
            options.publish_interval,
            self._hand_over,
            (options.pooled_batch_tokens, options.pooled_batch_rows, options.prefill_chunk_seconds),
        )
        self._works: set[PooledWork] = set()  # embedding and rerank requests open; on the loop only
        self._batching.on_quiet = self._report_quiet
        self._quiet = anyio.Event()  # set once the thread is quiet for the current closing of the gate
        # Called on the event loop as each session ends, before its reader sees the end.
        self.on_finished: Callable[[GenerationSession], None] | None = None
        # The same for embedding and rerank requests, once the thread holds none of their inputs.
        self.on_pooled: Callable[[PooledWork], None] | None = None

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
        if self.options.encoder:
            self._serve_encoder(started)
            return
        began = time.perf_counter()
        options = self.options
        model, loaded, self.ranks = load_model(self.model_path, options)
        tokenizer = self._tokenizer = Tokenizer(loaded)
        self.vocab_size = tokenizer.vocab_size
        self._batching.vocab_size = logits_width(model, tokenizer)
        self.grammars = Grammars(loaded, self._batching.vocab_size)
        self.max_token_chars = tokenizer.max_token_chars
        self.context_length = context_length(model)
        if options.tasks & {"embed", "rerank"}:
            pooler = DecoderPooler(model)  # NotPoolable ends the load, saying why
            self.hidden_size = int(model.args.hidden_size)
            self._batching.pooled.pooler = pooler
        draft = load_draft(options, loaded)  # DraftMismatch ends the load, saying why
        tokenizer.warm()
        self.load_seconds = time.perf_counter() - began
        gc.freeze()  # the model's and tokenizer's objects, as the worker's imports (see its preload)
        generator, self.kv_layout = make_generator(model, tokenizer.decoder.eos_token_ids, options, draft)
        # A cache of this model's rows: its layer classes (and, after one token, shapes and dtypes).
        probe = generator.new_cache() if self.kv_layout.per_row else make_prompt_cache(model)
        if options.sharding is not None:
            generator = LeadingGenerator(generator, Link(mx.distributed.init(), generator.stream))
        self._batching.snapshots = wants_snapshots(probe)
        disk = open_disk_tier(model, probe, self.model_path, options, self._prompt_cache)
        try:
            self._batching.run(generator, tokenizer, started)
        finally:
            if disk is not None:
                disk.close()  # the queued writes finish first

    def _serve_encoder(self, started: Callable[[], object]) -> None:
        """An encoder (mlx-embeddings) embeds and does nothing else: no generator, no prompt cache."""
        began = time.perf_counter()
        pooler, loaded = load_encoder(self.model_path)
        tokenizer = self._tokenizer = Tokenizer(loaded)
        self.vocab_size = tokenizer.vocab_size
        self.max_token_chars = tokenizer.max_token_chars
        # Enforced: BERT's position table ends at 512, and a longer input would read past it.
        self.context_length = pooler.context_length
        self.hidden_size = pooler.hidden_size
        self._batching.pooled.pooler = pooler
        self.kv_layout = KVLayout(False, "an encoder generates nothing")
        self.load_seconds = time.perf_counter() - began
        gc.freeze()
        self._batching.run(NoGeneration(), tokenizer, started)

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
        if not self._sessions and not self._works:
            self._idle = anyio.Event()
        self._sessions.add(session)
        self._batching.intake.submit(session)
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

    async def pool(self, work: PooledWork) -> PooledWork:
        """Run an embedding or rerank request's inputs in the generation thread's pooled passes.

        Returns the work with every result in, or with `error` set when the engine failed under
        it. Leaving early (cancellation) drops its inputs not yet in a pass.
        """
        if self._batching.stopping:
            raise EngineStopped("the engine is shutting down")
        loop = self._loop
        assert loop is not None
        done = anyio.Event()

        def finished(work: PooledWork) -> None:  # in the generation thread
            with contextlib.suppress(RuntimeError):  # the loop is closed
                loop.call_soon_threadsafe(self._pooled_finished, work, done)

        work.on_finished = finished
        if not self._sessions and not self._works:
            self._idle = anyio.Event()
        self._works.add(work)
        self._batching.pooled.queue.submit(work)
        try:
            await done.wait()
        finally:
            if not work.finished:
                work.cancel("client_disconnected")
                self._batching.wake.set()
        if work.cancel_reason == "shutdown":
            raise EngineStopped("the engine is shutting down")
        return work

    def _pooled_finished(self, work: PooledWork, done: anyio.Event) -> None:
        self._works.discard(work)
        done.set()
        if self.on_pooled is not None:
            self.on_pooled(work)
        self._finished.set()
        self._finished = anyio.Event()
        if not self._sessions and not self._works:
            self._idle.set()

    def pooled_statistics(self) -> PooledCounters:
        return self._batching.pooled.counters

    @property
    def session_count(self) -> int:
        """Sessions submitted and not yet finished."""
        return len(self._sessions)

    def open_sessions(self) -> list[GenerationSession]:
        return list(self._sessions)

    def cancel_all(self, reason: str) -> None:
        for session in list(self._sessions):
            session.cancel(reason, self._batching.counters.steps)
        for work in list(self._works):
            work.cancel(reason)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_request_finished(self) -> None:
        await self._finished.wait()

    def statistics(self) -> EngineStatistics:
        return self._batching.statistics()

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
        if not self._sessions and not self._works:
            self._idle.set()

