"""A compiled grammar enforced token by token: each sequence's logits masked to what it allows next.

`Grammars` (grammar_compiler.py) compiles a `Grammar`; the batch asks it for one
`GrammarProcessor` per sequence, which BatchGenerator calls once per step in the generation
thread: it feeds the sequence's llguidance matcher the newest token and masks every token the
grammar does not allow next.

llguidance's own MLX helper applies the mask with a Metal kernel, which the CPU backend lacks;
the mask goes through numpy and `mx.where` here instead, which both backends run.
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import numpy as np
from llguidance import LLMatcher
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

from mlxhost.worker.engine.grammar import MAX_MESSAGE

__all__ = ["Grammar", "GrammarProcessor"]

logger = logging.getLogger("mlxhost.engine")


class Grammar:
    """A compiled grammar; each sequence gets its own matcher through `processor()`."""

    def __init__(self, matcher: LLMatcher, vocab_size: int, eos: list[int]) -> None:
        # Never advanced: every sequence starts from a copy, which shares the compiled grammar.
        self._matcher = matcher
        self._vocab_size = vocab_size
        self._eos = eos

    def processor(self) -> GrammarProcessor:
        """A fresh per-sequence logits processor (see `GrammarProcessor` for the call protocol)."""
        return GrammarProcessor(self._matcher.deep_copy(), self._vocab_size, self._eos)


class GrammarProcessor:
    """Masks one sequence's logits to what its grammar allows next.

    BatchGenerator calls it once per decode step with the sequence's token context: the first
    call with the prompt alone, each later one with the token sampled at the previous step
    appended. Runs in the generation thread only.

    A grammar that cannot go on (llguidance in error, a limit reached, no token allowed) ends the
    sequence with EOS, and says why in `failure`: the output so far does not satisfy it, and the
    engine must not report the ending as a plain stop.
    """

    def __init__(self, matcher: LLMatcher, vocab_size: int, eos: list[int]) -> None:
        self._matcher = matcher
        self._vocab_size = vocab_size
        self._eos = eos
        self._bitmask = allocate_token_bitmask(1, vocab_size)
        self._seen: int | None = None  # context length at the last call; None before the first
        self.failure: str | None = None

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        width = logits.shape[-1]
        allowed = None
        if self.failure is None:
            try:
                self._advance(tokens)
                allowed = self._allowed()
            except Exception as exc:
                logger.exception("grammar matcher failed; ending the sequence")
                self.failure = f"the grammar matcher failed ({type(exc).__name__})"
            if allowed is not None and not allowed[:width].any():
                # Only tokens past the logits' width: the model cannot write any of them.
                logger.warning("grammar allows no token the model can write; ending the sequence")
                self.failure, allowed = "the grammar allows no token the model can write", None
        if allowed is None:
            # Raising here would end the whole engine; ending this one sequence is enough.
            self.failure = self.failure or "the grammar cannot go on"
            allowed = np.zeros(self._vocab_size, dtype=np.bool_)
            allowed[[t for t in self._eos if t < self._vocab_size]] = True
        return mx.where(mx.array(_fit(allowed, width)), logits, -mx.inf)

    def valid_drafts(self, newest: int | None, drafts: list[int]) -> int:
        """How many of `drafts` the grammar allows after `newest` (the token the next call takes
        in; None: none, the prompt's last token). Nothing is consumed."""
        matcher = self._matcher
        if not drafts or self.failure is not None or matcher.is_stopped() or matcher.is_error():
            return 0
        if newest is None:
            return int(matcher.validate_tokens(drafts))
        return max(0, int(matcher.validate_tokens([newest, *drafts])) - 1)

    def with_drafts(self, tokens: mx.array, logits: mx.array, drafts: list[int]) -> tuple[mx.array, int]:
        """A verification pass's logits for one row (its newest token and each of `drafts`,
        already cut to `valid_drafts`) masked position by position: the first as a plain call
        does, each next one to what the grammar allows after the drafts before it. The matcher
        ends where a plain call leaves it (the drafts are rolled back: the next call takes in those
        kept). Also how many drafts may be kept: fewer where one leads to a dead end."""
        width = logits.shape[-1]
        rows = [self(tokens, logits[0:1])]
        usable = 0
        if self.failure is None:
            for draft in drafts:
                if not self._matcher.consume_token(draft):
                    break
                usable += 1
                fill_next_token_bitmask(self._matcher, self._bitmask)
                if self._matcher.is_error():
                    break
                bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")[: self._vocab_size]
                allowed = _fit(bits.view(np.bool_), width)
                if not allowed.any():
                    break
                rows.append(mx.where(mx.array(allowed), logits[usable : usable + 1], -mx.inf))
            self._matcher.rollback(usable)
            if self._matcher.is_error():  # never after a rollback of consumed tokens; said if it is
                self.failure = f"llguidance: {self._error()}"
        usable = len(rows) - 1
        return mx.concatenate([*rows, logits[len(rows) :]]), usable

    def _advance(self, tokens: mx.array) -> None:
        length = tokens.shape[0]
        if self._matcher.is_stopped():
            # Past the end: the sequence sampled EOS, and BatchGenerator runs one more step (with
            # EOS in the context) before it drops the row.
            return
        if self._seen is None:  # the first call: only the prompt, nothing generated yet
            self._seen = length
            return
        new: list[int] = tokens[self._seen :].tolist()  # type: ignore[assignment]
        self._seen = length
        if new and not self._matcher.consume_tokens(new):
            logger.warning("grammar refused a token; ending the sequence: %s", self._error())

    def _allowed(self) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """The tokens allowed next, or None (and `failure` said) when there are none: the matcher
        is in error (it never leaves it) or at a dead end."""
        if not self._matcher.is_error():
            fill_next_token_bitmask(self._matcher, self._bitmask)
        if self._matcher.is_error():
            logger.warning("grammar failed; ending the sequence: %s", self._error())
            self.failure = f"llguidance: {self._error()}"
            return None
        # Bit i of word w is token 32w + i; int32 words are little-endian on every MLX platform.
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")[: self._vocab_size]
        if not bits.any():  # a dead end (what compiles has a first token: see grammar_compiler.py)
            logger.warning("grammar allows no token; ending the sequence")
            self.failure = "the grammar allows no next token"
            return None
        return bits.view(np.bool_)

    def _error(self) -> str:
        return " ".join(self._matcher.get_error().replace("<non-verbose/>", "").split())[:MAX_MESSAGE]


def _fit(allowed: np.ndarray[Any, np.dtype[np.bool_]], width: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    # The logits may be wider than the tokenizer's vocabulary (padded embeddings): those ids stand
    # for no text, so they are never allowed. Or narrower: the model cannot write the rest anyway.
    if allowed.shape[0] >= width:
        return allowed[:width]
    return np.concatenate([allowed, np.zeros(width - allowed.shape[0], dtype=np.bool_)])
