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
            return mx.stack([_normalised(self._pooled_in_chunks(row, pooling)) for row in rows])
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
            last = mx.stack([self._pooled_in_chunks(row, "last") for row in rows])
        else:
            hidden, lengths = self.hidden(rows)
            last = hidden[mx.arange(len(rows)), lengths - 1]
        logits = self.head(last[:, None, :])[:, 0, :].astype(mx.float32)
        pair = mx.stack([logits[:, no], logits[:, yes]], axis=-1)
        return mx.exp(nn.log_softmax(pair, axis=-1))[:, 1]

    def _pooled_in_chunks(self, row: list[int], pooling: str) -> mx.array:
        """One long input's pooled hidden state [width] (float32, not normalised), computed in
        chunks of `long_input` tokens over a KV cache, each evaluated before the next."""
        cache = make_prompt_cache(self.model)
        total: mx.array | None = None
        for start in range(0, len(row), self.long_input):
            hidden = self.body(mx.array([row[start : start + self.long_input]]), cache=cache)[0]
            hidden = hidden.astype(mx.float32)
            if pooling == "mean":
                part = hidden.sum(axis=0)
                total = part if total is None else total + part
            elif pooling == "cls":
                total = hidden[0]
                mx.eval(total)
                break  # causal: the first token's state is the first chunk's alone
            else:
                total = hidden[-1]
            mx.eval(total, [c.state for c in cache])
        assert total is not None
        return total / len(row) if pooling == "mean" else total


def _normalised(pooled: mx.array) -> mx.array:
    norm = mx.sqrt((pooled * pooled).sum(axis=-1, keepdims=True))
    return pooled / mx.maximum(norm, 1e-12)


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

    def step(self, paused: bool, stream: Any, decoding: bool = False) -> bool:
        """Drop cancelled work, then run one pass if any input waits, on `stream` (the generation's:
        an MLX stream belongs to one thread); whether one ran. While `decoding`, the pass is cut
        to about `beside_seconds` of work."""
        for work in self.queue.dropped():
            self.counters.cancelled += sum(1 for r in work.results if r is None)
            self._finish(work)
        if paused or self.pooler is None:
            return False
        budget = self.token_budget
        if decoding and self._tokens_per_second is not None:
            budget = min(budget, int(self._tokens_per_second * self.beside_seconds))
        rows = self.queue.next_batch(budget, self.max_rows)
        if not rows:
            return False
        began = time.perf_counter()
        with mx.stream(stream):
            padded = self._run(self.pooler, rows)
        rate = padded / max(time.perf_counter() - began, 1e-6)
        last = self._tokens_per_second
        self._tokens_per_second = rate if last is None else 0.5 * last + 0.5 * rate
        return True

    def fail_all(self, message: str) -> None:
        for work in self.queue.open_works():
            work.error = message
            self._finish(work)

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
            work = row.work
            work.results[row.index] = values[at].copy() if values.ndim > 1 else float(values[at])
            work.done += 1
            if work.done == len(work.inputs):
                self._finish(work)
        return padded

    def _finish(self, work: PooledWork) -> None:
        if work.finished:
            return
        work.finished = True
        self.queue.settle(work)
        work.on_finished(work)
