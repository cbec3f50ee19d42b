"""Whether a verification step pays, and how wide: `StepCost`, measured as the batch runs.

A decode step writes one token a row and runs ahead (the next step is built while this one
computes). A verification step `w` positions wide writes each row's kept drafts and one more, but
runs `w` positions a row and waits for the step before it. What those positions cost depends on
the machine, the model and the batch: on a GPU a few more positions a row cost little, a large
batch on a CPU pays nearly their share. So the price is measured: a verification step of width
`w` takes about `1 + slope * (w - 1)` decode steps, `slope` learnt from each one that runs. The
batch picks the width that writes the most tokens for its price,

    (rows + drafts it expects to keep at that width) / (1 + slope * (w - 1)),

and verifies only when that beats a decode step's `rows` (draft_length.py gives each row's
expected kept drafts). The slope starts low (hopeful: a batch tries before it knows), and a
worker group's ranks, which cannot measure alike, keep `FIXED_SLOPE`. With `speculate = "always"`
positions cost nothing: every row's drafts are verified, as many as it wants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["FIXED_SLOPE", "StepCost"]

FIXED_SLOPE = 0.25  # a group's price of one more position a row, in decode steps
FIRST_SLOPE = 0.1
SMOOTHING = 0.2  # the weight of the newest measurement
# A measured slope is kept below this: one step slowed by something else (a busy machine) must
# not keep every row from drafting for long.
MOST_SLOPE = 2.0


@dataclass
class StepCost:
    measured: bool = True  # False: `slope` is kept as it is given
    decode: float | None = None  # a decode step's seconds, smoothed
    slope: float = FIRST_SLOPE

    @classmethod
    def pricing(cls, priced: bool, measured: bool) -> StepCost:
        """Unpriced (speculate = "always"): positions cost nothing, every draft is verified.
        Priced and `measured`, as measured; else (a worker group) at FIXED_SLOPE."""
        if not priced:
            return cls(measured=False, slope=0.0)
        return cls() if measured else cls(measured=False, slope=FIXED_SLOPE)

    def decoded(self, seconds: float) -> None:
        if seconds > 0:
            self.decode = _smoothed(self.decode, seconds)

    def verified(self, seconds: float, width: int) -> None:
        if not self.measured or self.decode is None or width < 2 or seconds <= 0:
            return
        steps = seconds / self.decode
        sample = min(MOST_SLOPE, max(0.0, (steps - 1) / (width - 1)))
        self.slope = _smoothed(self.slope, sample)

    def price(self, width: int) -> float:
        """A verification step `width` positions wide, in decode steps."""
        return 1 + self.slope * (width - 1)

    def best_width(self, rows: int, most: int, expected: Sequence[Callable[[int], float]]) -> int:
        """The width (1: none, decode) that writes the most tokens for its price, over `rows`
        rows of which those in `expected` may draft (each: drafts kept, given how many it may
        carry), at most `most` drafts a row."""
        best, value = 1, float(rows)
        for drafts in range(1, most + 1):
            tokens = rows + sum(kept(drafts) for kept in expected)
            worth = tokens / self.price(1 + drafts)
            if worth > value:
                best, value = 1 + drafts, worth
        return best


def _smoothed(previous: float | None, value: float) -> float:
    return value if previous is None else SMOOTHING * value + (1 - SMOOTHING) * previous
