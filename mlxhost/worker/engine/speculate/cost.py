"""Whether a verification step pays, and how wide: `StepCost`, measured as the batch runs.

A decode step writes one token a row and runs ahead (the next step is built while this one
computes). A verification step `w` positions wide writes each row's kept drafts and one more, but
runs `w` positions a row and waits for the step before it. What those positions cost depends on
the machine, the model and the batch: on a GPU a few more positions a row cost little; on a CPU
one row's step is mostly fixed cost while many rows' are mostly their positions. So the price is
measured, for each size of batch apart (`BUCKETS`): a verification step of width `w` takes about
`1 + slope * (w - 1)` decode steps of the same rows, `slope` learnt from each one that runs. The
batch picks the width that writes the most tokens for its price,

    (rows + drafts it expects to keep at that width) / (1 + slope * (w - 1)),

and verifies only when that beats a decode step's `rows` (draft_length.py gives each row's
expected kept drafts). A slope starts low (hopeful: a batch tries before it knows) and, while no
verification step runs at its size, drifts back to that, so that a price measured once on a busy
machine is measured again. A worker group's ranks, which cannot measure alike, keep
`FIXED_SLOPE`; with `speculate = "always"` positions cost nothing and every draft is verified.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["BUCKETS", "FIXED_SLOPE", "StepCost"]

FIXED_SLOPE = 0.25  # a group's price of one more position a row, in decode steps
FIRST_SLOPE = 0.1
SMOOTHING = 0.1  # the weight of the newest measurement
DRIFT = 0.002  # of the way back to FIRST_SLOPE, each decode step with no verification
# A measured slope is kept below this: one step slowed by something else must not keep every row
# from drafting for long.
MOST_SLOPE = 2.0
BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # batch sizes up to each of these are priced together


@dataclass
class StepCost:
    measured: bool = True  # False: `slope` is kept as it is given
    slope: float = FIRST_SLOPE  # the price of a batch size never measured
    _decode: dict[int, float] = field(default_factory=dict)  # a decode step's seconds, by bucket
    _slopes: dict[int, float] = field(default_factory=dict)

    @classmethod
    def pricing(cls, priced: bool, measured: bool) -> StepCost:
        """Unpriced (speculate = "always"): positions cost nothing, every draft is verified.
        Priced and `measured`, as measured; else (a worker group) at FIXED_SLOPE."""
        if not priced:
            return cls(measured=False, slope=0.0)
        return cls() if measured else cls(measured=False, slope=FIXED_SLOPE)

    def decoded(self, seconds: float, rows: int) -> None:
        if not self.measured or seconds <= 0:
            return
        bucket = _bucket(rows)
        self._decode[bucket] = _smoothed(self._decode.get(bucket), seconds)
        if bucket in self._slopes:
            self._slopes[bucket] += DRIFT * (self.slope - self._slopes[bucket])

    def verified(self, seconds: float, width: int, rows: int) -> None:
        bucket = _bucket(rows)
        decode = self._decode.get(bucket)
        if not self.measured or decode is None or width < 2 or seconds <= 0:
            return
        sample = min(MOST_SLOPE, max(0.0, (seconds / decode - 1) / (width - 1)))
        self._slopes[bucket] = _smoothed(self._slopes.get(bucket, self.slope), sample)

    def slope_for(self, rows: int) -> float:
        return self._slopes.get(_bucket(rows), self.slope)

    def price(self, width: int, rows: int) -> float:
        """A verification step `width` positions wide over `rows` rows, in decode steps."""
        return 1 + self.slope_for(rows) * (width - 1)

    def best_width(self, rows: int, most: int, expected: Sequence[Callable[[int], float]]) -> int:
        """The width (1: none, decode) that writes the most tokens for its price, over `rows`
        rows of which those in `expected` may draft (each: drafts kept, given how many it may
        carry), at most `most` drafts a row."""
        best, value = 1, float(rows)
        for drafts in range(1, most + 1):
            tokens = rows + sum(kept(drafts) for kept in expected)
            worth = tokens / self.price(1 + drafts, rows)
            if worth > value:
                best, value = 1 + drafts, worth
        return best


def _bucket(rows: int) -> int:
    return min(bisect.bisect_left(BUCKETS, rows), len(BUCKETS))


def _smoothed(previous: float | None, value: float) -> float:
    return value if previous is None else SMOOTHING * value + (1 - SMOOTHING) * previous
