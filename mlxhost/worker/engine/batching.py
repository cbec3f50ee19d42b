"""The generation thread: continuous batching over mlx-lm's BatchGenerator.

MLX streams belong to the thread that made them, so every MLX operation runs in this one thread.
It loops over the BatchGenerator: between two steps it takes in new sessions (intake.py),
removes cancelled ones (their KV cache goes with them), and after each step hands each session's
new text to the event loop without ever waiting for it. `mx.eval` releases the GIL, so the event
loop keeps serving while a step computes. The event loop only submits sessions, sets their cancel
flags and reads the counters; the engine (engine.py) ties the two sides together. As rows end,
the prompt cache keeps what they leave (cache_keeping.py).

While the pause gate is closed (a managed job holds the machine, see pause.py) the thread takes in
no session: the running ones finish, then it frees MLX's cached memory and says so; the sessions
submitted meanwhile wait, in order, until the gate opens.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from mlxhost.runtime.shutdown import exit_now
from mlxhost.wire.chunks import Delta, TokenLogprob
from mlxhost.wire.launch import EXIT_GROUP_BROKEN
from mlxhost.worker.cache.memory import PromptCache
from mlxhost.worker.engine.cache_keeping import keep_finished, keep_removed, keep_snapshots
from mlxhost.worker.engine.generation import GenerationSession
from mlxhost.worker.engine.group import LeadingGenerator
from mlxhost.worker.engine.intake import Intake, Row
from mlxhost.worker.engine.pooled import PooledPasses
from mlxhost.worker.engine.pooled_work import PooledQueue
from mlxhost.worker.engine.tokenizer import Tokenizer

__all__ = ["Batching", "Counters", "EngineFailed", "EngineStatistics", "Outputs"]

logger = logging.getLogger("mlxhost.engine")

WRITES_BEFORE_PAUSE = 5.0  # seconds a pause waits for the prompt cache's disk writes, at most

Outputs = list[tuple[GenerationSession, Delta]]


class EngineFailed(Exception):
    """The generation thread met an error it cannot recover from in this process."""


@dataclass
class Counters:
    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    largest_batch: int = 0
    cancel_lags: list[int] = field(default_factory=list)


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
    # Speculative decoding (speculate/): draft tokens verified, and those the model kept; a row's
    # step that verified drafts is one verification, and verified_tokens are the tokens such
    # steps produced (the kept drafts and the model's own next token each).
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    verifications: int = 0
    verified_tokens: int = 0


class Batching:
    """The loop of the generation thread, and the hand-over points the event loop uses."""

    def __init__(
        self,
        prompt_cache: PromptCache,
        publish_interval: float,
        hand_over: Callable[[Outputs], None],
        pooled_budget: tuple[int, int, float] = (16384, 256, 0.05),
    ) -> None:
        # Touched by the event loop too: sessions come in through `intake` and embedding and
        # rerank inputs through `pooled.queue`, `wake` rouses the thread, `stopping` ends it once
        # no session is left.
        self.wake = threading.Event()
        self.intake = Intake(prompt_cache, self.wake)
        self.pooled = PooledPasses(PooledQueue(self.wake), *pooled_budget)
        self.stopping = False
        # The pause gate, closed and opened by the engine: while `paused`, no session is taken
        # in. Each closing gets a new `pause_number`; once the batch is empty the thread frees
        # MLX's cache and calls `on_quiet` with it (in this thread; it must not wait).
        self.paused = False
        self.pause_number = 0
        self.on_quiet: Callable[[int], None] = lambda number: None
        self._quiet_number = 0  # the closing this thread last went quiet for
        # When the thread began the work it is in now (None: waiting for work); the health check
        # reads it to tell a hung thread from a busy one.
        self.busy_since: float | None = None
        self.rows: dict[int, Row] = {}  # by the generator's uid
        self.counters = Counters()
        self._prompt_cache = prompt_cache
        # Decoded text reaches the event loop at most this often (first tokens and endings at
        # once); see EngineOptions.publish_interval.
        self._publish_interval = publish_interval
        self._hand_over = hand_over  # called in this thread; must never wait for the loop
        self._held: Outputs = []  # decoded, not yet handed over
        self._published_at = 0.0
        self._tokenizer: Tokenizer  # set by run()
        self.vocab_size = 0  # the width of the model's logits; set by the engine at load
        # Whether to keep a snapshot at the end of each prompt: set by the engine at load for a
        # model whose cache may become untrimmable (a trimmable one's final entry covers it).
        self.snapshots = False
        # The batch's speculation counters (rows/speculation.py); None where it has none.
        self.drafts: Any = None

    def statistics(self) -> EngineStatistics:
        c, drafts = self.counters, self.drafts
        return EngineStatistics(
            active=len(self.rows),
            waiting=self.intake.waiting,
            steps=c.steps,
            prompt_tokens=c.prompt_tokens,
            generated_tokens=c.generated_tokens,
            completed=c.completed,
            cancelled=c.cancelled,
            failed=c.failed,
            largest_batch=c.largest_batch,
            last_cancel_lag_steps=c.cancel_lags[-1] if c.cancel_lags else None,
            max_cancel_lag_steps=max(c.cancel_lags) if c.cancel_lags else None,
            drafted_tokens=getattr(drafts, "drafted", 0),
            accepted_tokens=getattr(drafts, "accepted", 0),
            verifications=getattr(drafts, "verifications", 0),
            verified_tokens=getattr(drafts, "verified_tokens", 0),
        )

    def run(self, generator: Any, tokenizer: Tokenizer, started: Callable[[], object]) -> None:
        """The thread's loop, until `stopping` with nothing left to do; closes `generator`."""
        self._tokenizer = tokenizer
        self.drafts = getattr(generator, "counters", None)
        started()
        try:
            while True:
                self.wake.clear()
                self.busy_since = time.monotonic()
                try:
                    self._take_incoming(generator)
                    self._remove_cancelled(generator)
                    # One pooled pass (embeddings, rerank) between two generation steps.
                    stream = getattr(generator, "stream", None)
                    # A stream decoding, or one on its way in (loading its cache from disk, held
                    # by the gate): a pass beside it is cut to the prefill chunk's time.
                    busy = bool(self.rows) or not self.intake.idle()
                    pooled = self.pooled.step(self.paused, stream, decoding=busy)
                    if not self.rows:
                        if pooled:
                            continue
                        if self.stopping and self.intake.idle() and self.pooled.queue.idle():
                            return
                        self._quiet_if_paused()
                        self.busy_since = None
                        self.wake.wait()
                        continue
                    self._step(generator)
                except Exception as exc:
                    if isinstance(generator, LeadingGenerator):
                        # A group's collective failed: another rank is gone or cut off, and the
                        # host, which sees every rank end, tells the clients which and how.
                        logger.error("the worker group broke: %s; exiting", exc)
                        exit_now(EXIT_GROUP_BROKEN)
                    # After an error inside MLX its state can no longer be trusted (a later
                    # step may fail on arrays left half-built), so the engine ends here: the
                    # worker process exits and its supervisor starts a clean one.
                    logger.exception("generation failed; ending the engine")
                    self._fail_all(generator, f"generation failed: {type(exc).__name__}")
                    raise EngineFailed(f"generation failed: {type(exc).__name__}: {exc}") from exc
        finally:
            self.busy_since = None
            generator.close()
            mx.synchronize()  # no computation may outlive the thread that owns its stream

    def _quiet_if_paused(self) -> None:
        # The number first: a gate opened and closed again meanwhile has a new one, and the
        # engine ignores a report for an older closing (the thread comes round again for it).
        number = self.pause_number
        if self.paused and number != self._quiet_number:
            # Nothing runs, so nothing holds the buffers MLX keeps for reuse: they go back to
            # the system for the job. The prompt cache is kept; the job does not need its bytes.
            # Writes to its disk tier finish first: a write ending later would hand its buffers
            # back to MLX's cache after the clear.
            if self._prompt_cache.disk is not None:
                self._prompt_cache.disk.wait_written(WRITES_BEFORE_PAUSE)
            mx.clear_cache()
            self._quiet_number = number
            self.on_quiet(number)

    def _take_incoming(self, generator: Any) -> None:
        taken = self.intake.take(generator, self._tokenizer, self.vocab_size, self.paused)
        if taken is None:
            return
        cancelled, rows = taken
        counters = self.counters
        counters.cancelled += len(cancelled)
        for row in rows:
            self.rows[row.uid] = row
            counters.prompt_tokens += len(row.session.request.prompt)
        self._publish([(session, _cancelled(session, 0)) for session in cancelled])

    def _remove_cancelled(self, generator: Any) -> None:
        gone = [row for row in self.rows.values() if row.session.cancel_reason is not None]
        if not gone:
            return
        keep_removed(self._prompt_cache, generator, gone)
        outputs = []
        for row in gone:
            del self.rows[row.uid]
            step = row.session.cancel_step
            self.counters.cancel_lags.append(0 if step is None else self.counters.steps - step)
            del self.counters.cancel_lags[:-100]
            self.counters.cancelled += 1
            outputs.append((row.session, _cancelled(row.session, row.tokens)))
        self._publish(outputs)

    def _step(self, generator: Any) -> None:
        prompt_responses, responses = generator.next()
        if self.snapshots and prompt_responses and self._prompt_cache.enabled:
            keep_snapshots(self._prompt_cache, generator, prompt_responses, self.rows)
        counters = self.counters
        counters.steps += 1
        if not responses:
            return  # a prefill chunk
        counters.largest_batch = max(counters.largest_batch, len(responses))
        counters.generated_tokens += len(responses)
        eos = self._tokenizer.decoder.eos_token_ids
        outputs: Outputs = []
        stopped: list[Row] = []
        urgent = False  # a first token (TTFT) or an ending goes out with this step
        for response in responses:
            row = self.rows.get(response.uid)
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
                        stopped.append(row)
                    finish = "stop"
                elif finish is not None:
                    text += row.text.finish()
            logprobs = None
            if row.session.request.logprobs is not None:
                logprobs = [self._logprob(response, row.session.request.logprobs)]
            error = None
            if finish is not None and row.grammar is not None and row.grammar.failure is not None:
                # The grammar ended it with EOS at a dead end: what it wrote does not satisfy the
                # schema, and a "stop" would hand it over as an answer.
                finish, error = "error", f"the output could not be kept to its schema: {row.grammar.failure}"
            delta = Delta(
                text,
                row.tokens,
                logprobs,
                finish,
                error,
                cached_tokens=row.cached,
                stop_sequence=row.text.matched,
                drafted_tokens=getattr(response, "drafted", 0),
                accepted_tokens=getattr(response, "accepted", 0),
            )
            outputs.append((row.session, delta))
            urgent = urgent or finish is not None or row.tokens == 1
            if finish is not None:
                del self.rows[row.uid]
                counters.completed += 1
                keep_finished(self._prompt_cache, row, response)  # it ended inside the generator
        if stopped:  # ended by a stop string, still in the generator: its KV is intact
            keep_removed(self._prompt_cache, generator, stopped)
        now = time.monotonic()
        if urgent or now - self._published_at >= self._publish_interval:
            self._publish(outputs)
        else:
            self._held += outputs

    def _logprob(self, response: Any, top: int) -> TokenLogprob:
        logprobs = response.logprobs
        alternatives: tuple[tuple[str, float], ...] = ()
        decoder = self._tokenizer.decoder
        with self._tokenizer.lock:
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
        for row in self.rows.values():
            self.counters.failed += 1
            outputs.append((row.session, Delta("", row.tokens, None, "error", message)))
        self.rows.clear()
        self._publish(outputs)
        self.pooled.fail_all(message)

    def _publish(self, outputs: Outputs) -> None:
        if self._held:  # what was held back goes first, merged: one delta per session
            outputs, self._held = _merged(self._held + outputs), []
        if not outputs:
            return
        self._published_at = time.monotonic()
        self._hand_over(outputs)


def _merged(outputs: Outputs) -> Outputs:
    by_session: dict[GenerationSession, Delta] = {}  # insertion-ordered: sessions keep their order
    for session, delta in outputs:
        earlier = by_session.get(session)
        by_session[session] = delta if earlier is None else earlier.merge(delta)
    return list(by_session.items())


def _cancelled(session: GenerationSession, tokens: int) -> Delta:
    return Delta("", tokens, None, "cancelled", session.cancel_reason)


def _finite(logprob: float) -> float:
    # JSON has no -Infinity (nor NaN); OpenAI reports a token that cannot occur as -9999.0.
    return logprob if math.isfinite(logprob) else -9999.0
