"""How many tokens to draft for a row: `DraftLength`, adapted to what the row keeps.

Drafts cost even when none is kept: the row's step runs more positions, and a step that verifies
drafts waits for the step before it (its drafts follow the token that step sampled) instead of
running ahead. So each row drafts only while it pays: one more token after a step that kept all
its drafts, as many as it kept plus one after one that did not, and none for a while after
`MISSES` steps in a row that kept none, a while that doubles each time (up to `LONGEST_REST`)
and ends at the first step that keeps something. A row whose context has nothing to copy (a
random prompt) soon drafts only now and then, and decodes as it would without speculation.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DraftLength"]

MISSES = 2  # steps in a row that kept no draft before a rest
FIRST_REST = 4  # steps
LONGEST_REST = 256


@dataclass
class DraftLength:
    most: int  # drafts a step may carry
    current: int = 0  # drafts for the next step (0 before the first: set from `most`)
    misses: int = 0
    rest: int = 0  # steps left without drafting
    next_rest: int = FIRST_REST

    def __post_init__(self) -> None:
        self.current = self.current or self.most

    def wanted(self) -> int:
        """Drafts for this step (0: rest)."""
        return 0 if self.rest > 0 else self.current

    def resting(self) -> None:
        """A step went by without drafts for this row."""
        if self.rest > 0:
            self.rest -= 1

    def kept(self, drafted: int, accepted: int) -> None:
        """The row's step verified `drafted` drafts (0: none were found) and kept `accepted`."""
        if accepted > 0:
            self.misses, self.next_rest = 0, FIRST_REST
            self.current = min(self.most, accepted + 1 if accepted < drafted else drafted + 1)
            return
        self.misses += 1
        self.current = max(1, self.current // 2)
        if self.misses >= MISSES:
            self.misses, self.rest = 0, self.next_rest
            self.next_rest = min(LONGEST_REST, 2 * self.next_rest)
