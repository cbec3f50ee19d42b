"""Pooled forward passes: embeddings and rerank scores, in the generation thread, between steps.

A decoder model that mlx-lm loads embeds by its final hidden states (the model's body without
its output head): the last token's for last-token pooling (Qwen3-Embedding, e5-mistral,
gte-Qwen2), or the mean over the input. A decoder reranker (Qwen3-Reranker) scores a prompt by
the probability of "yes" against "no" as the next token, from the output head applied to the last
position alone (not to every position, as a generation step's forward would).

Inputs of one pass are padded on the right to the longest. Causal attention never lets a real
token see the padding after it, and positions start at 0 in every row, so an input's vector is
the one it has alone, to float tolerance. `PooledPasses.step` runs one pass over a batch from
the queue (pooled_work.py); the generation thread calls it once between two generation steps, so
neither kind of work starves the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from mlxhost.worker.engine.pooled_work import PooledQueue, PooledWork, Row

__all__ = ["DecoderPooler", "NotPoolable", "PooledCounters", "PooledPasses", "Pooler", "hidden_body"]


class Pooler(Protocol):
    """A model's pooled passes: DecoderPooler here, EncoderPooler (encoders.py) for an encoder."""

    def embed(self, rows: list[list[int]], pooling: str) -> mx.array: ...

    def score(self, rows: list[list[int]], yes: int, no: int) -> mx.array: ...


class NotPoolable(Exception):
    """The model's hidden states cannot be read apart from its output head."""


def hidden_body(model: Any) -> Any:
    """The module that maps token ids to final (normalised) hidden states: mlx-lm's `model.model`,
    or its language model's for a model that wraps one."""
    for holder in (model, getattr(model, "language_model", None)):
        body = getattr(holder, "model", None)
        if body is not None and callable(body) and hasattr(body, "embed_tokens"):
            return body
    raise NotPoolable(
        f"mlxhost cannot read the hidden states of a {type(model).__module__} model (it has no "
        "'model' module with token embeddings)"
    )


class DecoderPooler:
    """Embeddings and yes/no scores from a decoder model that mlx-lm loaded.

    An input longer than `long_input` tokens runs alone, in chunks of that many over a KV cache,
    as a long prompt is prefilled: in one piece, a context-long input's attention would hold
    tokens² scores per head at once (tens of GB for 32k tokens where no fused kernel runs).
    """

    def __init__(self, model: Any, long_input: int = 2048) -> None:
        self.model = model
        self.long_input = long_input
        self.body = hidden_body(model)
        head = getattr(model, "lm_head", None)
        if head is None:
            holder = getattr(model, "language_model", model)
            head = getattr(holder, "lm_head", None)
        # Tied embeddings: the output head is the token embedding read backwards.
        self.head: Callable[[mx.array], mx.array] = (
            head if head is not None else self.body.embed_tokens.as_linear
        )

    def hidden(self, rows: list[list[int]]) -> tuple[mx.array, mx.array]:
        """Final hidden states [rows, longest, width] of right-padded inputs, and their lengths."""
        longest = max(len(r) for r in rows)
        padded = np.zeros((len(rows), longest), dtype=np.int32)
        for at, row in enumerate(rows):
            padded[at, : len(row)] = row
        lengths = mx.array([len(r) for r in rows])
        return self.body(mx.array(padded)), lengths

    def embed(self, rows: list[list[int]], pooling: str) -> mx.array:
        """One L2-normalised vector per input, float32 [rows, width]."""
        if max(len(r) for r in rows) > self.long_input:
            return mx.stack([self.long_pass(row, pooling).run() for row in rows])
        hidden, lengths = self.hidden(rows)
        hidden = hidden.astype(mx.float32)
        if pooling == "last":
            pooled = hidden[mx.arange(len(rows)), lengths - 1]
        elif pooling == "cls":
            pooled = hidden[:, 0]
        else:  # mean over the real tokens only
            mask = (mx.arange(hidden.shape[1])[None, :] < lengths[:, None]).astype(mx.float32)
            pooled = (hidden * mask[..., None]).sum(axis=1) / lengths[:, None].astype(mx.float32)
        return _normalised(pooled)

    def score(self, rows: list[list[int]], yes: int, no: int) -> mx.array:
        """P("yes") against P("no") as each input's next token, float32 [rows]."""
        if max(len(r) for r in rows) > self.long_input:
            return mx.stack([self.long_pass(row, "last", (yes, no)).run() for row in rows])
        hidden, lengths = self.hidden(rows)
        return self.yes_probability(hidden[mx.arange(len(rows)), lengths - 1], yes, no)

    def yes_probability(self, last: mx.array, yes: int, no: int) -> mx.array:
        """P("yes") against P("no") after each final hidden state [rows, width]: [rows]."""
        logits = self.head(last[:, None, :])[:, 0, :].astype(mx.float32)
        pair = mx.stack([logits[:, no], logits[:, yes]], axis=-1)
        return mx.exp(nn.log_softmax(pair, axis=-1))[:, 1]

    def long_pass(self, row: list[int], pooling: str, yes_no: tuple[int, int] | None = None) -> LongPass:
        return LongPass(self, row, pooling, yes_no)


class LongPass:
    """One input longer than a pass takes, run a chunk at a time over a KV cache of its own, as a
    long prompt is prefilled: the generation steps beside it go on between its chunks."""

    def __init__(
        self, pooler: DecoderPooler, row: list[int], pooling: str, yes_no: tuple[int, int] | None
    ) -> None:
        self.pooler, self.row, self.pooling, self.yes_no = pooler, row, pooling, yes_no
        self.cache = make_prompt_cache(pooler.model)
        self.at = 0  # tokens run so far
        self._total: mx.array | None = None

    def advance(self, tokens: int) -> mx.array | None:
        """Run the input's next `tokens`; once its last ran, its result: the normalised vector
        [width], or the probability of "yes" (a scalar)."""
        chunk = self.row[self.at : self.at + tokens]
        hidden = self.pooler.body(mx.array([chunk]), cache=self.cache)[0].astype(mx.float32)
        self.at += len(chunk)
        if self.yes_no is None and self.pooling == "mean":
            part = hidden.sum(axis=0)
            self._total = part if self._total is None else self._total + part
        elif self.yes_no is None and self.pooling == "cls":
            self._total = hidden[0]
            self.at = len(self.row)  # causal: the first token's state needs nothing after it
        else:
            self._total = hidden[-1]
        mx.eval(self._total, [c.state for c in self.cache])
        if self.at < len(self.row):
            return None
        if self.yes_no is not None:
            return self.pooler.yes_probability(self._total[None], *self.yes_no)[0]
        pooled = self._total / len(self.row) if self.pooling == "mean" else self._total
        return _normalised(pooled)

    def run(self) -> mx.array:
        """All of it, in chunks of the pooler's `long_input`."""
        while (result := self.advance(self.pooler.long_input)) is None:
            pass
        return result


def _normalised(pooled: mx.array) -> mx.array:
    norm = mx.sqrt((pooled * pooled).sum(axis=-1, keepdims=True))
    return pooled / mx.maximum(norm, 1e-12)


MIN_CHUNK = 16  # tokens: the least a pass takes beside decoding streams, however slow the model
# A pass (or a long input's chunk) never takes longer than this, by the measured rate, whatever
# waits: a stream or request that arrives while it runs waits at most this long. MLX cannot cut a
# pass once it is planned, so the bound is on what is planned.
MAX_PASS_SECONDS = 0.15
FIRST_PASS_TOKENS = 512  # before any rate is measured


@dataclass
class PooledCounters:
    passes: int = 0
    inputs: int = 0  # pooled (embedded or scored)
    tokens: int = 0  # in those inputs, unpadded
    padded_tokens: int = 0  # what the passes computed, padding included
    cancelled: int = 0  # inputs of cancelled requests never run
    largest_pass: int = 0  # most inputs in one pass


class PooledPasses:
    """The generation thread's side of pooled work: one batch per call of `step`."""

    def __init__(
        self, queue: PooledQueue, token_budget: int, max_rows: int, beside_seconds: float = 0.05
    ) -> None:
        self.queue = queue
        self.token_budget = token_budget
        self.max_rows = max_rows
        # While streams decode, a pass takes about this long at most (the prefill chunk's time):
        # the longest a running stream waits for embeddings beside it.
        self.beside_seconds = beside_seconds
        self._tokens_per_second: float | None = None  # padded tokens, measured over the last passes
        self.pooler: Pooler | None = None  # set at load, for a model that pools
        self.counters = PooledCounters()
        self._long: tuple[Row, LongPass] | None = None  # a long input part-way through its chunks
        self._turn_given = False  # the last step ran the long input's chunk: now another's turn

    def step(self, paused: bool, stream: Any, decoding: bool = False) -> bool:
        """Drop cancelled work, then run one pass if any input waits, on `stream` (the generation's:
        an MLX stream belongs to one thread); whether one ran.

        A pass is planned to take at most MAX_PASS_SECONDS, and about `beside_seconds` while
        anything else waits: streams decoding or about to (`decoding`), or another request's
        inputs. An input longer than the pooler's `long_input` runs alone, a chunk a step
        (`LongPass`), taking turns with the other requests' passes."""
        # Called before every generation step: a model that does not pool, or has nothing to
        # pool, costs it no lock and no list.
        if self.pooler is None or (self._long is None and self.queue.idle()):
            return False
        for work in self.queue.dropped():
            self.counters.cancelled += sum(1 for r in work.results if r is None)
            self._finish(work)
        if self._long is not None and self._long[0].work.finished:
            self._long = None  # its request was cancelled
        if paused:
            return False
        # Another request waits: beside the long input's own request, or beside the one request
        # whose inputs fill the passes.
        if self._long is not None:
            others = self.queue.works_waiting(besides=self._long[0].work) > 0
        else:
            others = self.queue.works_waiting() > 1
        budget = self._budget(decoding or others)
        # Only a decoder pooler runs long inputs in chunks; an encoder's context is short.
        long_input = self.pooler.long_input if isinstance(self.pooler, DecoderPooler) else None
        if self._long is not None and not (self._turn_given and others):
            self._turn_given = True
            with mx.stream(stream):
                self._advance_long(min(budget, long_input or budget))
            return True
        self._turn_given = False
        rows = self.queue.next_batch(budget, self.max_rows, alone_over=long_input, short_only=self._long is not None)
        if not rows:
            if self._long is None:
                return False
            with mx.stream(stream):
                self._advance_long(min(budget, long_input or budget))
            return True
        if long_input is None or len(rows[0].tokens) <= long_input:
            began = time.perf_counter()
            with mx.stream(stream):
                padded = self._run(self.pooler, rows)
            self._measured(padded, time.perf_counter() - began)
            return True
        assert isinstance(self.pooler, DecoderPooler)
        work = rows[0].work
        self._long = (rows[0], self.pooler.long_pass(rows[0].tokens, work.pooling, work.yes_no))
        self._turn_given = True
        with mx.stream(stream):
            self._advance_long(min(budget, long_input))
        return True

    def _budget(self, contended: bool) -> int:
        """The padded tokens of the next pass: what MAX_PASS_SECONDS (or, contended,
        `beside_seconds`) of work takes at the rate measured, within the pass budget."""
        rate = self._tokens_per_second
        if rate is None:
            return min(self.token_budget, FIRST_PASS_TOKENS)
        seconds = self.beside_seconds if contended else MAX_PASS_SECONDS
        return max(MIN_CHUNK, min(self.token_budget, int(rate * seconds)))

    def fail_all(self, message: str) -> None:
        for work in self.queue.open_works():
            work.error = message
            self._finish(work)

    def _measured(self, tokens: int, seconds: float) -> None:
        rate = tokens / max(seconds, 1e-6)
        last = self._tokens_per_second
        self._tokens_per_second = rate if last is None else 0.5 * last + 0.5 * rate

    def _advance_long(self, tokens: int) -> None:
        assert self._long is not None
        row, long = self._long
        before, began = long.at, time.perf_counter()
        result = long.advance(tokens)
        ran = long.at - before
        self._measured(ran, time.perf_counter() - began)
        self.counters.passes += 1
        self.counters.tokens += ran
        self.counters.padded_tokens += ran
        if result is None:
            return
        self._long = None
        self.counters.inputs += 1
        self.counters.largest_pass = max(self.counters.largest_pass, 1)
        value = np.array(result, copy=False)
        self._settle(row, value.copy() if value.ndim else float(value))

    def _run(self, pooler: Pooler, rows: list[Row]) -> int:
        """Run one pass; the padded tokens it computed."""
        counters = self.counters
        inputs = [row.tokens for row in rows]
        first = rows[0].work  # every row of a pass shares its pass_key
        if first.kind == "embed":
            out = pooler.embed(inputs, first.pooling)
        else:
            assert first.yes_no is not None
            out = pooler.score(inputs, *first.yes_no)
        mx.eval(out)
        values = np.array(out, copy=False)
        counters.passes += 1
        counters.inputs += len(rows)
        counters.tokens += sum(len(i) for i in inputs)
        padded = len(rows) * max(len(i) for i in inputs)
        counters.padded_tokens += padded
        counters.largest_pass = max(counters.largest_pass, len(rows))
        for at, row in enumerate(rows):
            self._settle(row, values[at].copy() if values.ndim > 1 else float(values[at]))
        return padded

    def _settle(self, row: Row, value: Any) -> None:
        work = row.work
        work.results[row.index] = value
        work.done += 1
        if work.done == len(work.inputs):
            self._finish(work)

    def _finish(self, work: PooledWork) -> None:
        if work.finished:
            return
        work.finished = True
        self.queue.settle(work)
        work.on_finished(work)
