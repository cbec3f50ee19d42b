"""A row of the row batch (batch.py), and what the batch hands back for it each step.

Shared by the batch and its verification steps (speculation.py); runs in the generation thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import TokenBuffer

from mlxhost.worker.engine.generation import SamplingParams
from mlxhost.worker.engine.rows.kv import GROWTH_EVERY, set_growth
from mlxhost.worker.engine.speculate.draft_length import DraftLength
from mlxhost.worker.engine.speculate.lookup import PromptLookup

__all__ = ["Generated", "LogitsProcessor", "PromptProgress", "Row", "Sampler"]

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


@dataclass(frozen=True)
class PromptProgress:
    """A row's prefill moved on. `end_of_segment` alone: all its prompt but the last token is in
    its cache (a snapshot of it starts the next turn); with `end_of_prompt`: it joined decoding."""

    uid: int
    progress: tuple[int, int]  # prompt tokens prefilled, of all it prefills
    end_of_segment: bool
    end_of_prompt: bool


@dataclass(frozen=True)
class Generated:
    """A token a row generated. A finished row hands over its cache and the tokens it holds."""

    uid: int
    token: int
    step_logprobs: mx.array  # (rows, vocabulary): the step's log-probabilities, this row's at `index`
    index: int
    finish_reason: str | None
    prompt_cache: list[Any] | None
    all_tokens: list[int] | None
    drafted: int = 0  # the row's draft tokens verified so far, and those kept (speculation.py)
    accepted: int = 0

    @property
    def logprobs(self) -> mx.array:
        """The log-probabilities it was sampled from (an MLX operation: read only when asked)."""
        return self.step_logprobs[self.index]


@dataclass(eq=False)
class Row:
    """A row of the batch: its own KV, what it holds and has still to prefill, how it samples."""

    uid: int
    cache: list[Any]  # one mlx-lm cache per layer: this row's own KV
    tokens: list[int]  # what `cache` holds
    pending: list[int]  # prompt tokens not in `cache` yet, the last one included
    max_tokens: int
    sampler: Sampler
    processors: list[LogitsProcessor]
    total: int = 0  # prompt tokens it prefills in all
    prefilled: int = 0
    generated: int = 0
    context: TokenBuffer | None = None  # the token context its logits processors see
    at: int = 0  # a decoding row's place in the last step's rows: its token, not yet returned
    last: mx.array = field(init=False)  # the prompt's last token, its first decode input
    # Speculation (rows/speculation.py): None where the row never drafts.
    sampling: SamplingParams | None = None  # None: greedy
    lookup: PromptLookup | None = None
    length: DraftLength | None = None
    # A draft model's KV for this row (drafter.py): the row's first `draft_held` tokens, then
    # `draft_tail` drafts of the last step, not yet settled.
    draft_cache: list[Any] | None = None
    draft_held: int = 0
    draft_tail: int = 0
    drafted: int = 0
    accepted: int = 0

    def __post_init__(self) -> None:
        self.total = len(self.pending) - 1
        self.last = mx.array(self.pending[-1:], dtype=mx.uint32)

    def write(self, token: int, stop: frozenset[int]) -> str | None:
        """Take `token` as written (its KV is in the cache now): the finish reason it brings."""
        self.tokens.append(token)
        self.generated += 1
        if self.generated % GROWTH_EVERY == 0:
            set_growth(self.cache, len(self.tokens))
        if token in stop:
            return "stop"
        return "length" if self.generated >= self.max_tokens else None
