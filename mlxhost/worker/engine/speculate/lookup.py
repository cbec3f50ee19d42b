"""Prompt lookup: a row's next tokens drafted from its own prompt and output (n-gram matching).

The row's last `n` tokens are looked for earlier in the row, longest match first (up to
`MAX_NGRAM`, at least `MIN_NGRAM`), the most recent occurrence of it winning; the tokens that
followed it there are the drafts. No second model, no state but the row's tokens.

The tokens are kept in a numpy buffer and searched with vectorized comparisons: a Python loop
over an agent's 100k-token context each step would cost more than the step, and an n-gram index
(a dict per row) would hold several times the context's size in memory for every row.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_NGRAM", "MIN_NGRAM", "PromptLookup"]

MAX_NGRAM = 4
# A single token's earlier occurrence says little about what follows it (a newline, a space), and
# a failed draft costs its row a wider step: two tokens at least.
MIN_NGRAM = 2


class PromptLookup:
    """One row's tokens, searchable for the continuation of their own end."""

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self._buffer = np.zeros(max(64, 2 * len(tokens)), dtype=np.int64)
        self.size = 0
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        count = len(tokens)
        if not count:
            return
        end = self.size + count
        if end > self._buffer.size:
            grown = np.zeros(max(2 * self._buffer.size, end), dtype=np.int64)
            grown[: self.size] = self._buffer[: self.size]
            self._buffer = grown
        self._buffer[self.size : end] = tokens
        self.size = end

    def catch_up(self, tokens: Sequence[int]) -> None:
        """Take in the tokens of `tokens` past those already held (the row's tokens grew)."""
        if len(tokens) > self.size:
            self.extend(tokens[self.size :])

    def draft_after(self, newest: int, count: int) -> list[int]:
        """Take in `newest` (the row's next token), then draft what follows it."""
        self.extend([newest])
        return self.draft(count)

    def draft(self, count: int) -> list[int]:
        """Up to `count` tokens that followed the longest earlier match of the row's end."""
        size = self.size
        if count <= 0 or size < MIN_NGRAM + 1:
            return []
        tokens = self._buffer[:size]
        # Where an earlier occurrence of the last token ends (not the last token itself).
        ends = np.flatnonzero(tokens[: size - 1] == tokens[size - 1])
        found = ends if MIN_NGRAM <= 1 and ends.size else None
        for n in range(2, MAX_NGRAM + 1):
            ends = ends[ends >= n - 1]
            ends = ends[tokens[ends - (n - 1)] == tokens[size - n]]
            if not ends.size:
                break
            if n >= MIN_NGRAM:
                found = ends
        if found is None:
            return []
        start = int(found[-1]) + 1  # the most recent occurrence: what was written last
        return tokens[start : start + count].tolist()
