"""Drafts from a draft model: a smaller model with the target's tokenizer, run over the same rows.

Each drafting row keeps a KV cache of the draft model beside its own (`Row.draft_cache`), holding
the row's tokens up to `draft_held`. To draft `k` tokens for the rows of a step, the draft model
runs `k` passes over all of them at once, each row over its own cache as in the row batch
(kv.py): the first takes in what each row's draft cache lacks (the tokens written since its last
drafts, at least the newest) and gives the first draft, each next one the draft before it. Then
the target verifies them (speculation.py), and `settle` trims each row's draft cache back to the
drafts it kept.

A row's draft cache starts empty (the prompt cache keeps the target's KV only): a row that joins
with a long prompt, or whose cache lags by more than `LAG` tokens, catches up a chunk of at most
`CATCH_UP` tokens a step, alone, and drafts once it has.

Sampled rows draw their drafts from the draft model's distribution with the row's own settings,
and hand it to the target's test (acceptance.py), which keeps the target's distribution whatever
the draft model's.

Runs in the generation thread only, inside the batch's stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx

from mlxhost.worker.engine.rows.kv import row_views
from mlxhost.worker.engine.rows.row import Row
from mlxhost.worker.engine.speculate.acceptance import is_greedy, target_logprobs

__all__ = ["CATCH_UP", "LAG", "DraftModel", "ModelDrafts"]

LAG = 64  # tokens a row's draft cache may lack and still draft this step
CATCH_UP = 512  # tokens of draft cache built for lagging rows a step, in all


@dataclass(frozen=True)
class ModelDrafts:
    """A row's drafts, and for a sampled row the draft model's log-probabilities each was drawn
    from (one row per draft)."""

    tokens: list[int]
    logprobs: mx.array | None


class DraftModel:
    """A draft model and the rows' caches of it."""

    def __init__(self, model: Any, new_cache: Any) -> None:
        self.model = model
        self._new_cache = new_cache  # an empty cache of the draft model for one row

    def draft(self, wanted: Sequence[tuple[Row, int, int]]) -> dict[int, ModelDrafts]:
        """Drafts for `wanted` rows (each with its newest token, not yet in its cache, and how
        many it wants), by uid; a row that lags too far catches up instead and drafts nothing."""
        ready: list[tuple[Row, list[int], int]] = []
        budget = CATCH_UP
        for row, first, count in wanted:
            if row.draft_cache is None:
                row.draft_cache, row.draft_held = self._new_cache(), 0
            lag = [*row.tokens[row.draft_held :], first]
            if len(lag) <= LAG:
                ready.append((row, lag, count))
            elif budget > 0:  # the tokens it lacks but its newest, a chunk now
                chunk = lag[: min(budget, len(lag) - 1)]
                self.model(mx.array([chunk], dtype=mx.uint32), cache=row.draft_cache)
                mx.eval([layer.state for layer in row.draft_cache])
                row.draft_held += len(chunk)
                budget -= len(chunk)
        if not ready:
            return {}
        steps = max(count for _, _, count in ready)
        width = max(len(lag) for _, lag, _ in ready)
        caches = [row.draft_cache for row, _, _ in ready]
        inputs = mx.array([[*lag, *([lag[-1]] * (width - len(lag)))] for _, lag, _ in ready], dtype=mx.uint32)
        logits = self.model(inputs, cache=row_views(caches))
        last = logits[mx.arange(len(ready)), mx.array([len(lag) - 1 for _, lag, _ in ready])]
        for (row, lag, _), cache in zip(ready, caches, strict=True):
            for layer in cache:  # the padding's positions go
                layer.trim(width - len(lag))
            row.draft_held += len(lag)
            row.draft_tail = 0
        drawn: list[mx.array] = []
        spread: list[mx.array] = []
        for step in range(steps):
            tokens, logprobs = self._choose(ready, last)
            drawn.append(tokens)
            spread.append(logprobs)
            if step + 1 < steps:
                logits = self.model(tokens[:, None], cache=row_views(caches))
                last = logits[:, -1, :]
                mx.async_eval(last)
        mx.eval(drawn, spread)
        chosen = mx.stack(drawn, axis=1).tolist()
        stacked = mx.stack(spread, axis=1)
        out = {}
        for e, (row, _, count) in enumerate(ready):
            row.draft_tail = steps - 1  # drafts taken in beyond its tokens
            q = None if is_greedy(row.sampling) else stacked[e, :count]
            out[row.uid] = ModelDrafts(chosen[e][:count], q)
        return out

    def _choose(self, rows: list[tuple[Row, list[int], int]], logits: mx.array) -> tuple[mx.array, mx.array]:
        """Each row's next draft from the draft model's `logits`: the argmax for a greedy row, a
        draw from its sampling settings for the others; and the distribution it came from."""
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        tokens = mx.argmax(logprobs, axis=-1)
        if all(is_greedy(row.sampling) for row, _, _ in rows):
            return tokens, logprobs
        pieces, spreads = [], []
        for e, (row, _, _) in enumerate(rows):
            if is_greedy(row.sampling):
                pieces.append(tokens[e : e + 1])
                spreads.append(logprobs[e : e + 1])
            else:
                assert row.sampling is not None
                target = target_logprobs(logprobs[e : e + 1], row.sampling)
                pieces.append(mx.random.categorical(target))
                spreads.append(target)
        return mx.concatenate(pieces).astype(tokens.dtype), mx.concatenate(spreads)

    @staticmethod
    def settle(row: Row, accepted: int) -> None:
        """After the target's verdict: `row`'s draft cache keeps the drafts it kept, no more."""
        if row.draft_cache is None or not row.draft_tail:
            return
        keep = min(accepted, row.draft_tail)
        for layer in row.draft_cache:
            layer.trim(row.draft_tail - keep)
        row.draft_held += keep
        row.draft_tail = 0
