"""The engine: one generation thread that owns the model and runs continuous batching.

MLX streams belong to the thread that made them, so the model is loaded, and every MLX operation
runs, in one thread. That thread loops over mlx-lm's BatchGenerator: between two steps it takes in
new sessions, removes cancelled ones (their KV cache goes with them), and hands each session's new
text to the event loop without ever waiting for it. `mx.eval` releases the GIL, so the event loop
keeps serving while a step computes.

The event loop never waits on a tokenizer either: chat templates are rendered and prompts encoded
in one tokenizer thread of their own, and the generation thread decodes with a private copy of
the tokenizer, so the two never share one (fast tokenizers raise "Already borrowed" when two
threads use one at once) and no lock is ever taken on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import math
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import mlx.core as mx
import mlx_lm
from mlx_lm.generate import BatchGenerator

from mlxhost.wire.chunks import Delta, TokenLogprob
from mlxhost.worker.generation import GenerationRequest, GenerationSession
from mlxhost.worker.prompt_cache import PromptCache, PromptCacheStatistics
from mlxhost.worker.sampling import SamplerCache, logits_processors_for
from mlxhost.worker.textstream import TextStream

__all__ = ["Engine", "EngineFailed", "EngineOptions", "EngineStatistics", "EngineStopped"]

logger = logging.getLogger("mlxhost.engine")


@dataclass(frozen=True)
class EngineOptions:
    max_batch: int = 32
    prefill_batch: int = 8
    prefill_step: int = 2048
    prompt_cache_entries: int = 10
    prompt_cache_bytes: int = 1 << 30
    # Decoded text reaches the event loop at most this often (first tokens and endings at once).
    # Each hand-over wakes the loop, whose Python then holds the GIL the generation thread needs
    # between steps; readers send frames only every stream_interval anyway.
    publish_interval: float = 0.0


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


@dataclass
class _Row:
    session: GenerationSession
    uid: int
    text: TextStream
    tokens: int = 0
    cached: int = 0  # prompt tokens taken from the prompt cache


@dataclass
class _Counters:
    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    largest_batch: int = 0
    cancel_lags: list[int] = field(default_factory=list)


class Engine:
    def __init__(self, model_path: Path, options: EngineOptions = EngineOptions()) -> None:
        self.model_path = model_path
        self.options = options
        self.context_length: int | None = None
        self.load_seconds = 0.0
        self.vocab_size = 0
        # The most characters one token stands for: a prompt of n characters is at least
        # n / max_token_chars tokens, which rejects an oversized prompt before encoding it.
        self.max_token_chars: int | None = None
        self._tokenizer: Any = None  # the tokenizer thread's: chat templates and encoding
        self._decoder: Any = None  # the generation thread's: detokenizing and logprobs
        # One encode at a time, off the event loop (see encode_chat).
        self._encode_limiter = anyio.CapacityLimiter(1)
        # Only when the tokenizer cannot be copied do the two threads share it, under this lock.
        self._shared_lock: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        # When the generation thread began the work it is in now (None: waiting for work); the
        # health check reads it to tell a hung thread from a busy one.
        self._busy_since: float | None = None
        self._incoming: queue.SimpleQueue[GenerationSession] = queue.SimpleQueue()
        self._waiting = 0
        self._wake = threading.Event()
        self._stopping = False
        self._rows: dict[int, _Row] = {}
        self._counters = _Counters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle = anyio.Event()
        self._idle.set()
        self._finished = anyio.Event()
        self._sessions: set[GenerationSession] = set()  # open ones; touched on the loop only
        self._sampler_cache = SamplerCache()
        self._prompt_cache = PromptCache(options.prompt_cache_entries, options.prompt_cache_bytes)
        self._held: list[tuple[GenerationSession, Delta]] = []  # decoded, not yet handed over
        self._published_at = 0.0
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

    # -- event loop side ---------------------------------------------------------------------

    async def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        def encode() -> list[int]:
            with self._shared_lock:
                ids = self._tokenizer.apply_chat_template(list(messages), add_generation_prompt=True)
            return list(ids)

        return await self._run_encode(encode)

    async def encode(self, text: str) -> list[int]:
        def encode() -> list[int]:
            with self._shared_lock:
                return list(self._tokenizer.encode(text))

        return await self._run_encode(encode)

    async def _run_encode(self, encode: Callable[[], list[int]]) -> list[int]:
        # Always in the tokenizer thread, however short the prompt: how long a template takes
        # to render depends on more than its characters (100,000 empty messages took seconds),
        # and the hop costs well under a millisecond. One at a time: the tokenizer is not safe
        # to share between threads, and a long encode must not hold a thread per request.
        return await anyio.to_thread.run_sync(encode, limiter=self._encode_limiter)

    def busy_seconds(self) -> float:
        """How long the generation thread has been inside its current step (0: waiting for work)."""
        since = self._busy_since
        return 0.0 if since is None else time.monotonic() - since

    def submit(self, request: GenerationRequest, tag: str | None = None) -> GenerationSession:
        if self._stopping:
            raise EngineStopped("the engine is shutting down")
        session = GenerationSession(request, wake_engine=self._wake.set, tag=tag)
        if not self._sessions:
            self._idle = anyio.Event()
        self._sessions.add(session)
        self._waiting += 1
        self._incoming.put(session)
        self._wake.set()
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
            session.cancel("client_disconnected", self._counters.steps)
            session.close()

    def open_sessions(self) -> list[GenerationSession]:
        return list(self._sessions)

    def cancel_all(self, reason: str) -> None:
        for session in list(self._sessions):
            session.cancel(reason, self._counters.steps)

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_request_finished(self) -> None:
        await self._finished.wait()

    def statistics(self) -> EngineStatistics:
        c = self._counters
        return EngineStatistics(
            active=len(self._rows),
            waiting=self._waiting,
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

    def _stop(self) -> None:
        self._stopping = True
        self.cancel_all("shutdown")
        self._wake.set()

    def _deliver(self, outputs: list[tuple[GenerationSession, Delta]]) -> None:
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

    # -- generation thread -------------------------------------------------------------------

    def _thread_main(self, started: Callable[[], object]) -> None:
        began = time.perf_counter()
        model, self._tokenizer = mlx_lm.load(str(self.model_path))[:2]
        self._decoder = self._private_decoder()
        self.vocab_size = len(self._tokenizer)
        self.max_token_chars = _longest_token(self._tokenizer)
        self.context_length = _context_length(model)
        self.load_seconds = time.perf_counter() - began
        generator = self._new_generator(model)
        started()
        try:
            while True:
                self._wake.clear()
                self._busy_since = time.monotonic()
                try:
                    self._take_incoming(generator)
                    self._remove_cancelled(generator)
                    if not self._rows:
                        if self._stopping and self._incoming.empty():
                            return
                        self._busy_since = None
                        self._wake.wait()
                        continue
                    self._step(generator)
                except Exception as exc:
                    # After an error inside MLX its state can no longer be trusted (a later
                    # step may fail on arrays left half-built), so the engine ends here: the
                    # worker process exits and its supervisor starts a clean one.
                    logger.exception("generation failed; ending the engine")
                    self._fail_all(generator, f"generation failed: {type(exc).__name__}")
                    raise EngineFailed(f"generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self._busy_since = None
            generator.close()
            mx.synchronize()  # no computation may outlive the thread that owns its stream

    def _private_decoder(self) -> Any:
        try:
            return copy.deepcopy(self._tokenizer)
        except Exception as exc:  # a tokenizer class that cannot be copied: share it, locked
            logger.warning("the tokenizer cannot be copied (%s); sharing it under a lock", exc)
            self._shared_lock = threading.Lock()
            return self._tokenizer

    def _new_generator(self, model: Any) -> Any:
        return BatchGenerator(
            model,
            stop_tokens=[[t] for t in self._decoder.eos_token_ids],
            completion_batch_size=self.options.max_batch,
            prefill_batch_size=self.options.prefill_batch,
            prefill_step_size=self.options.prefill_step,
        )

    def _take_incoming(self, generator: Any) -> None:
        sessions: list[GenerationSession] = []
        while True:
            try:
                sessions.append(self._incoming.get_nowait())
            except queue.Empty:
                break
        if not sessions:
            return
        self._waiting -= len(sessions)
        outputs = []
        admitted = []
        for session in sessions:
            if session.cancel_reason is not None:
                self._counters.cancelled += 1
                outputs.append((session, _cancelled(session, 0)))
            else:
                admitted.append(session)
        if admitted:
            samplers = self._sampler_cache
            prompt_cache = self._prompt_cache
            starts = [prompt_cache.take(s.request.prompt, s.request.cache_namespace) for s in admitted]
            cached = [len(s.request.prompt) - len(rest) for s, (_, rest) in zip(admitted, starts, strict=True)]
            uids = generator.insert(
                [rest for _, rest in starts],
                max_tokens=[s.request.max_tokens for s in admitted],
                caches=[cache for cache, _ in starts],
                all_tokens=[s.request.prompt[:n] for s, n in zip(admitted, cached, strict=True)],
                samplers=[samplers.sampler_for(s.request.sampling) for s in admitted],
                logits_processors=[logits_processors_for(s.request.sampling) for s in admitted],
            )
            for uid, session, hit in zip(uids, admitted, cached, strict=True):
                detokenizer = self._decoder.detokenizer
                text = TextStream(detokenizer, session.request.stop)
                self._rows[uid] = _Row(session, uid, text, cached=hit)
                self._counters.prompt_tokens += len(session.request.prompt)
        self._publish(outputs)

    def _remove_cancelled(self, generator: Any) -> None:
        gone = [row for row in self._rows.values() if row.session.cancel_reason is not None]
        if not gone:
            return
        generator.remove([row.uid for row in gone])
        outputs = []
        for row in gone:
            del self._rows[row.uid]
            step = row.session.cancel_step
            self._counters.cancel_lags.append(0 if step is None else self._counters.steps - step)
            del self._counters.cancel_lags[:-100]
            self._counters.cancelled += 1
            outputs.append((row.session, _cancelled(row.session, row.tokens)))
        self._publish(outputs)

    def _step(self, generator: Any) -> None:
        _, responses = generator.next()
        counters = self._counters
        counters.steps += 1
        if not responses:
            return  # a prefill chunk
        counters.largest_batch = max(counters.largest_batch, len(responses))
        counters.generated_tokens += len(responses)
        eos = self._decoder.eos_token_ids
        outputs: list[tuple[GenerationSession, Delta]] = []
        stopped: list[int] = []
        urgent = False  # a first token (TTFT) or an ending goes out with this step
        for response in responses:
            row = self._rows.get(response.uid)
            if row is None:
                continue
            row.tokens += 1
            finish = response.finish_reason
            if finish == "stop" and response.token in eos:
                text = row.text.finish()
            else:
                text = row.text.add(response.token)
                if row.text.stopped:
                    if finish is None:
                        stopped.append(row.uid)
                    finish = "stop"
                elif finish is not None:
                    text += row.text.finish()
            logprobs = None
            if row.session.request.logprobs is not None:
                logprobs = [self._logprob(response, row.session.request.logprobs)]
            outputs.append((row.session, Delta(text, row.tokens, logprobs, finish, cached_tokens=row.cached)))
            urgent = urgent or finish is not None or row.tokens == 1
            if finish is not None:
                del self._rows[row.uid]
                counters.completed += 1
                if response.prompt_cache is not None:  # it ended inside the generator: KV intact
                    self._prompt_cache.keep(
                        response.all_tokens, response.prompt_cache, row.session.request.cache_namespace
                    )
        if stopped:
            generator.remove(stopped)
        now = time.monotonic()
        if urgent or now - self._published_at >= self.options.publish_interval:
            self._publish(outputs)
        else:
            self._held += outputs

    def _logprob(self, response: Any, top: int) -> TokenLogprob:
        logprobs = response.logprobs
        alternatives: tuple[tuple[str, float], ...] = ()
        decoder = self._decoder
        with self._shared_lock:
            if top > 0:
                ids = mx.argpartition(-logprobs, kth=top - 1)[:top]
                values = logprobs[ids].tolist()
                pairs = sorted(zip(ids.tolist(), values, strict=True), key=lambda p: -p[1])  # type: ignore[arg-type]
                alternatives = tuple((decoder.decode([i]), v) for i, v in pairs)
            token = decoder.decode([response.token])
        alternatives = tuple((t, _finite(v)) for t, v in alternatives)
        return TokenLogprob(token, _finite(logprobs[response.token].item()), alternatives)

    def _fail_all(self, generator: Any, message: str) -> None:
        outputs = []
        for row in self._rows.values():
            self._counters.failed += 1
            outputs.append((row.session, Delta("", row.tokens, None, "error", message)))
        self._rows.clear()
        self._publish(outputs)

    def _publish(self, outputs: list[tuple[GenerationSession, Delta]]) -> None:
        # The generation thread never waits for the event loop (anyio's from_thread would make
        # it wait); the host runs on asyncio anyway, since Hypercorn serves on asyncio.
        if self._held:  # what was held back goes first, merged: one delta per session
            outputs, self._held = _merged(self._held + outputs), []
        if not outputs or self._loop is None:
            return
        self._published_at = time.monotonic()
        try:
            self._loop.call_soon_threadsafe(self._deliver, outputs)
        except RuntimeError:
            pass  # the event loop is closed: nobody is left to read


def _merged(outputs: list[tuple[GenerationSession, Delta]]) -> list[tuple[GenerationSession, Delta]]:
    by_session: dict[GenerationSession, Delta] = {}  # insertion-ordered: sessions keep their order
    for session, delta in outputs:
        earlier = by_session.get(session)
        by_session[session] = delta if earlier is None else earlier.merge(delta)
    return list(by_session.items())


class EngineStopped(Exception):
    pass


class EngineFailed(Exception):
    """The generation thread met an error it cannot recover from in this process."""


def _cancelled(session: GenerationSession, tokens: int) -> Delta:
    return Delta("", tokens, None, "cancelled", session.cancel_reason)


def _finite(logprob: float) -> float:
    # JSON has no -Infinity (nor NaN); OpenAI reports a token that cannot occur as -9999.0.
    return logprob if math.isfinite(logprob) else -9999.0


def _longest_token(tokenizer: Any) -> int | None:
    # Each vocabulary entry is written as the characters (byte-level BPE: the bytes) it matches,
    # so no token covers more characters of a prompt than the longest entry has.
    try:
        return max(map(len, tokenizer.get_vocab()), default=0) or None
    except Exception:  # a tokenizer without a readable vocabulary: no bound, encode to know
        return None


def _context_length(model: Any) -> int | None:
    args = getattr(model, "args", None)
    for name in ("max_position_embeddings", "context_length", "max_seq_len"):
        value = getattr(args, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
