"""Pooled work: the inputs of embedding and rerank requests, waiting for the generation thread,
and how they are grouped into forward passes.

A request (`PooledWork`) is a list of token lists. The generation thread takes a batch of inputs
from all waiting requests between two generation steps (`PooledQueue.next_batch`): requests take
turns leading a pass (round robin), the leader's next input first, then the inputs of its length
bucket, the leader's and the others', as many as the token budget takes. Grouping by bucket
keeps the padding of one pass small (a 20-token input is not padded to a 2,000-token one), and
the turns keep a request of 300k tokens from holding one of a single token behind it: the small
one leads the next pass. A cancelled request's inputs are dropped as batches are made: its rows
never reach a pass.

Nothing here imports MLX: the results are whatever the pass gives (pooled.py), set by index.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["MIN_BUCKET", "PooledQueue", "PooledWork", "Row", "bucket"]

MIN_BUCKET = 16  # tokens: shorter inputs share one bucket, padding a few tokens at most

Kind = Literal["embed", "score"]
_ids = itertools.count(1)


def bucket(length: int) -> int:
    """The padded length class of an input: the next power of two, at least MIN_BUCKET."""
    return max(MIN_BUCKET, 1 << (max(length, 1) - 1).bit_length())


@dataclass(eq=False)
class PooledWork:
    """One request's inputs and, as passes finish, their results (by input index).

    `kind` "embed" pools each input's hidden states (`pooling`: "last", "mean" or "cls"); "score"
    reads the probability of `yes` over `no` after each input (a reranker's judgement).
    """

    kind: Kind
    inputs: list[list[int]]
    pooling: str = "last"
    yes_no: tuple[int, int] | None = None
    tag: str | None = None  # the host's session id, for its progress report
    id: int = field(default_factory=lambda: next(_ids))
    created: float = field(default_factory=time.monotonic)
    results: list[Any] = field(init=False)
    done: int = 0  # inputs with a result
    cancel_reason: str | None = None
    error: str | None = None
    finished: bool = False  # every result is in, or the work was dropped (cancelled, failed)
    # Called in the generation thread when the work finishes (it must not wait).
    on_finished: Callable[[PooledWork], None] = lambda work: None

    def __post_init__(self) -> None:
        self.results = [None] * len(self.inputs)

    @property
    def pass_key(self) -> tuple[object, ...]:
        """What a pass must share: inputs of one pass are pooled or scored alike."""
        return (self.kind, self.pooling, self.yes_no)

    @property
    def tokens(self) -> int:
        return sum(len(i) for i in self.inputs)

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason


@dataclass(frozen=True)
class Row:
    """One input in a batch: whose it is and where its result goes."""

    work: PooledWork
    index: int

    @property
    def tokens(self) -> list[int]:
        return self.work.inputs[self.index]


class PooledQueue:
    """The waiting inputs of all pooled requests; the event loop adds, the generation thread takes."""

    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._works: list[PooledWork] = []  # in arrival order, each with inputs not yet taken
        self._next: dict[int, list[int]] = {}  # work id -> its input indices not yet taken
        self.running: list[PooledWork] = []  # taken in part, not finished

    def submit(self, work: PooledWork) -> None:
        with self._lock:
            self._works.append(work)
            self._next[work.id] = list(range(len(work.inputs)))
        self._wake.set()

    def idle(self) -> bool:
        # Without the lock: the generation thread asks before every step, and a work submitted
        # as it reads is seen at the next (submit sets `wake`). A list's truth is read atomically.
        return not self._works and not self.running

    def waiting(self) -> int:
        """Inputs not yet taken into a pass."""
        with self._lock:
            return sum(len(left) for left in self._next.values())

    def open_works(self) -> list[PooledWork]:
        with self._lock:
            return list(dict.fromkeys([*self.running, *self._works]))

    def dropped(self) -> list[PooledWork]:
        """Take out the cancelled works, whose remaining inputs will never run."""
        with self._lock:
            gone = [w for w in dict.fromkeys([*self.running, *self._works]) if w.cancel_reason is not None]
            for work in gone:
                self._forget(work)
        return gone

    def works_waiting(self, besides: PooledWork | None = None) -> int:
        """Requests with inputs not yet taken into a pass (other than `besides`)."""
        with self._lock:
            return sum(1 for w in self._works if w is not besides)

    def next_batch(
        self, token_budget: int, max_rows: int, alone_over: int | None = None, short_only: bool = False
    ) -> list[Row]:
        """The inputs of the next pass: the next input of the request whose turn it is, and others
        of its bucket (and pass key), its own first, while the padded batch (rows times the
        longest) stays within `token_budget` and `max_rows`. That input alone when it is longer
        than `alone_over` (it runs in chunks); no other that long joins a batch. With
        `short_only` (a long input is part-way through its chunks), no long input is taken at all:
        the turn goes to the first request with a short one."""
        with self._lock:
            leaders = [
                w for w in self._works
                if not short_only or alone_over is None or len(w.inputs[self._next[w.id][0]]) <= alone_over
            ]  # fmt: skip
            if not leaders:
                return []
            first = leaders[0]
            # Its turn taken: it goes to the back of the line (while it has inputs left).
            self._works.remove(first)
            self._works.append(first)
            oldest = len(first.inputs[self._next[first.id][0]])
            if alone_over is not None and oldest > alone_over:
                return self._taken([Row(first, self._next[first.id][0])])
            size = bucket(oldest)
            rows: list[Row] = []
            longest = 0
            for work in [first, *(w for w in self._works if w is not first)]:
                if work.pass_key != first.pass_key:
                    continue
                left = self._next[work.id]
                for index in list(left):
                    length = len(work.inputs[index])
                    if bucket(length) != size or (alone_over is not None and length > alone_over):
                        continue
                    wider = max(longest, length)
                    if rows and (wider * (len(rows) + 1) > token_budget or len(rows) >= max_rows):
                        return self._taken(rows)
                    rows.append(Row(work, index))
                    longest = wider
            return self._taken(rows)

    def _taken(self, rows: list[Row]) -> list[Row]:
        # With the lock held.
        for row in rows:
            work = row.work
            self._next[work.id].remove(row.index)
            if work not in self.running:
                self.running.append(work)
            if not self._next[work.id]:
                self._works.remove(work)
                del self._next[work.id]
        return rows

    def settle(self, work: PooledWork) -> None:
        """A work finished (all its results in, or dropped): forget it."""
        with self._lock:
            self._forget(work)

    def _forget(self, work: PooledWork) -> None:
        if work in self._works:
            self._works.remove(work)
        self._next.pop(work.id, None)
        if work in self.running:
            self.running.remove(work)
