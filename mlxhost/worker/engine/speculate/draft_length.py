"""How many tokens a row drafts, and how many of them it can be expected to keep: `DraftLength`.

Drafts cost even when none is kept: the row's step runs more positions, and a step that verifies
drafts waits for the step before it (its drafts follow the token that step sampled) instead of
running ahead. So each row drafts only while it pays:

- its number of drafts: one more after a step that kept all of them, as many as it kept plus one
  after one that did not, half after one that kept none;
- a rest: after `MISSES` steps in a row that kept none, none for a while, a while that doubles
  each time (up to `LONGEST_REST` steps) and ends at the first step that keeps something;
- its chance: each draft's chance of being kept, given the one before it was, smoothed over its
  steps, from which the batch reckons the drafts it expects to keep (cost.py). It starts hopeful,
  so that a batch tries a row's drafts before it knows them, and drifts back to hopeful while the
  row goes unverified, so that a row whose context turns copyable (an edit reaching the part it
  keeps) is tried again.

A row whose context has nothing to copy (a random prompt) soon drafts only now and then, and
decodes as it would without speculation.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DraftLength"]

MISSES = 2  # steps in a row that kept no draft before a rest
FIRST_REST = 4  # steps
LONGEST_REST = 256
FIRST_CHANCE = 0.8
SMOOTHING = 0.3  # the weight of the newest step in a row's chance
RECOVERY = 64  # unverified steps over which a row's chance drifts back to FIRST_CHANCE


@dataclass
class DraftLength:
    most: int  # drafts a step may carry
    current: int = 0  # drafts for the next step (0 before the first: set from `most`)
    misses: int = 0
    rest: int = 0  # steps left without drafting
    next_rest: int = FIRST_REST
    # Kept drafts, and kept drafts plus refusals (a step that found none counts as a refusal),
    # smoothed: their ratio is the chance.
    kept_weight: float = FIRST_CHANCE
    tried_weight: float = 1.0
    idle: int = 0  # steps since the row's last verification

    def __post_init__(self) -> None:
        self.current = self.current or self.most

    def wanted(self) -> int:
        """Drafts for this step (0: rest)."""
        return 0 if self.rest > 0 else self.current

    def chance(self) -> float:
        measured = self.kept_weight / self.tried_weight if self.tried_weight > 0 else 0.0
        return measured + (FIRST_CHANCE - measured) * min(1.0, self.idle / RECOVERY)

    def expected(self, most: int) -> float:
        """Drafts a step is expected to keep, carrying at most `most` of those it wants:
        chance + chance² + ..."""
        chance, total, term = self.chance(), 0.0, 1.0
        for _ in range(min(most, self.wanted())):
            term *= chance
            total += term
        return total

    def resting(self) -> None:
        """A step went by without verifying this row's drafts."""
        self.idle += 1
        if self.rest > 0:
            self.rest -= 1

    def kept(self, drafted: int, accepted: int) -> None:
        """The row's step verified `drafted` drafts (0: none were found) and kept `accepted`."""
        self.idle = 0
        refused = 1.0 if accepted < drafted or drafted == 0 else 0.0
        self.kept_weight = SMOOTHING * accepted + (1 - SMOOTHING) * self.kept_weight
        self.tried_weight = SMOOTHING * (accepted + refused) + (1 - SMOOTHING) * self.tried_weight
        if accepted > 0:
            self.misses, self.next_rest = 0, FIRST_REST
            self.current = min(self.most, accepted + 1 if accepted < drafted else drafted + 1)
            return
        self.misses += 1
        self.current = max(1, self.current // 2)
        if self.misses >= MISSES:
            self.misses, self.rest = 0, self.next_rest
            self.next_rest = min(LONGEST_REST, 2 * self.next_rest)
