"""A verification step of the row batch: every row's last token and its drafts in one pass.

Each row carries its own number of drafts (speculate/): a row whose context holds what it is about
to write drafts up to `draft_tokens` of it, the others none. The pass runs `1 + k` positions for
every row, `k` the most drafts any row carries (a row with fewer fills its places with its last
token again: it writes those positions' KV, and trims them after). Attention stays causal within
each row (attention.py). Then each row keeps the drafts the model itself would have written
(acceptance.py) and trims its own KV past them: no other row's KV is touched, so rows with and
without drafts, at any lengths, share the pass.

The step waits for the one before it: a row's drafts follow the token that step sampled, and
its KV's length after the step depends on how many it keeps. So a batch verifies only when the
drafts its rows expect to keep pay for that (speculate/cost.py); otherwise it decodes one token
per row, running ahead.

Runs in the generation thread only, inside the batch's stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache, TokenBuffer
from mlx_lm.sample_utils import greedy_sampler

from mlxhost.worker.engine.generation import SamplingParams
from mlxhost.worker.engine.grammar_mask import GrammarProcessor
from mlxhost.worker.engine.rows.drafter import DraftModel, ModelDrafts
from mlxhost.worker.engine.rows.kv import row_views, set_growth
from mlxhost.worker.engine.rows.row import Generated, Row
from mlxhost.worker.engine.speculate.acceptance import is_greedy, kept, sampled_choices
from mlxhost.worker.engine.speculate.cost import StepCost
from mlxhost.worker.engine.speculate.draft_length import DraftLength
from mlxhost.worker.engine.speculate.lookup import PromptLookup

__all__ = ["Speculation", "SpeculationCounters", "Verified", "trimmable"]


@dataclass
class SpeculationCounters:
    drafted: int = 0  # draft tokens verified
    accepted: int = 0  # of them, kept
    verifications: int = 0  # a row's step that verified drafts
    verified_tokens: int = 0  # tokens such steps wrote: the kept drafts and the model's own


@dataclass(frozen=True)
class Verified:
    """What a verification step leaves: the tokens it wrote, and the rows still decoding, each
    with its next input (not yet returned) at its place in `sampled` and `logprobs`."""

    generated: list[Generated]
    rows: list[Row]
    sampled: mx.array
    logprobs: mx.array


@dataclass
class _Plan:
    row: Row
    first: int  # its input at position 0: the token sampled last step, or the prompt's last
    running: bool  # decoding already (False: joining, its first is a prompt token)
    drafts: list[int]
    wanted: int  # drafts its DraftLength asked for
    spread: mx.array | None = None  # a draft model's log-probabilities each draft was drawn from


class Speculation:
    """A row batch's speculation: which rows draft, when a step verifies, and what it keeps."""

    def __init__(
        self, most: int, stop: frozenset[int], cost: StepCost | None = None, drafter: DraftModel | None = None
    ) -> None:
        self.most = most  # drafts a row may carry a step (0: none ever)
        self.counters = SpeculationCounters()
        self.cost = cost or StepCost()
        self.drafter = drafter  # None: drafts by prompt lookup
        self.width = 1  # positions a row in the step being planned or run
        self._stop = stop

    def setup(self, row: Row, params: SamplingParams | None) -> None:
        """Let `row` draft, its drafts tested against `params` (None: greedy), where it may."""
        # Not where a logits processor other than its grammar's would see the drafts: a penalty's
        # or a thinking budget's state follows each token it is shown, and has no way back. Nor
        # where it is seeded and sampled: its draws must not depend on the batch around it, and
        # which steps verify does.
        if self.most <= 0 or any(not isinstance(p, GrammarProcessor) for p in row.processors):
            return
        if params is not None and params.seed is not None and params.temperature > 0:
            return
        if params is None and row.sampler is not greedy_sampler:  # a sampler whose rule is unknown
            return
        row.sampling, row.length = params, DraftLength(self.most)
        row.lookup = PromptLookup() if self.drafter is None else None

    def wanted(self, rows: Sequence[Row]) -> bool:
        """Whether the drafts `rows` want this step pay for a verification step, and every row's
        KV can be trimmed after; a step without drafts is a step of every row's rest."""
        if self.most <= 0:
            return False
        expected = []
        for row in rows:
            if row.length is not None and (available := _available(row)):
                expected.append(partial(_expected, row.length, available))
        self.width = self.cost.best_width(len(rows), self.most, expected) if expected else 1
        if self.width > 1 and all(
            trimmable(row.cache, self.width) and trimmable(row.draft_cache or [], self.width) for row in rows
        ):
            return True
        for row in rows:
            if row.length is not None:
                row.length.resting()
        return False

    def verify(
        self, model: Any, running: list[Row], joining: list[Row], firsts: list[int], earlier: mx.array
    ) -> Verified | None:
        """One step verifying the rows' drafts, or None when no row found any (the batch then
        decodes as usual: nothing was changed). `firsts`: the step before's samples, read, of
        which `earlier` are the log-probabilities (each running row's at its place)."""
        steps = [(row, firsts[row.at], True) for row in running]
        steps += [(row, row.pending[-1], False) for row in joining]
        counts = [self._count_for(row, first, running) for row, first, running in steps]
        by_model: dict[int, ModelDrafts] = {}
        if self.drafter is not None:
            wanted = [
                (row, first, count) for (row, first, _), count in zip(steps, counts, strict=True) if count
            ]
            by_model = self.drafter.draft(wanted)
        plans = [
            self._plan(row, first, running, count, by_model.get(row.uid))
            for (row, first, running), count in zip(steps, counts, strict=True)
        ]
        if not any(plan.drafts for plan in plans):
            for plan in plans:
                _adapt(plan, 0)
                DraftModel.settle(plan.row, 0)
            return None
        return self._run(model, plans, earlier)

    def _count_for(self, row: Row, first: int, running: bool) -> int:
        """How many drafts `row` may carry this step."""
        if row.length is None or (running and first in self._stop):
            return 0
        wanted = min(row.length.wanted(), self.width - 1)
        return max(0, min(wanted, row.max_tokens - row.generated - (1 if running else 0)))

    def _plan(self, row: Row, first: int, running: bool, count: int, proposed: ModelDrafts | None) -> _Plan:
        wanted = min(row.length.wanted(), self.width - 1) if row.length is not None else 0
        drafts: list[int] = []
        if proposed is not None:
            drafts = proposed.tokens
        elif count > 0 and row.lookup is not None:
            row.lookup.catch_up(row.tokens)
            drafts = row.lookup.draft_after(first, count)
        for place, token in enumerate(drafts):  # the model's own choice writes an ending
            if token in self._stop:
                drafts = drafts[:place]
                break
        grammar = _grammar(row)
        if grammar is not None and drafts:
            drafts = drafts[: grammar.valid_drafts(first if running else None, drafts)]
        spread = proposed.logprobs if proposed is not None else None
        return _Plan(row, first, running, drafts, wanted, spread)

    def _run(self, model: Any, plans: list[_Plan], earlier: mx.array) -> Verified:
        width = self.width = 1 + max(len(plan.drafts) for plan in plans)  # as run: timed at that width
        inputs = mx.array(
            [[p.first, *p.drafts, *([p.first] * (width - 1 - len(p.drafts)))] for p in plans],
            dtype=mx.uint32,
        )
        logits = _processed(plans, inputs, model(inputs, cache=row_views([p.row.cache for p in plans])))
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        greedy = mx.argmax(logprobs, axis=-1)
        verdicts: list[Any] = []  # None: the argmax decides; an int: a place in `plain`
        plain: list[mx.array] = []  # samples of rows without drafts that do not take the argmax
        for e, plan in enumerate(plans):
            row, count = plan.row, len(plan.drafts)
            if count == 0 and row.sampler is not greedy_sampler:  # as a decode step: its own sampler
                verdicts.append(len(plain))
                plain.append(row.sampler(logprobs[e, 0:1]))
            elif count == 0 or is_greedy(row.sampling):
                verdicts.append(None)
            else:
                assert row.sampling is not None
                spread = None if plan.spread is None else plan.spread[:count]
                verdicts.append(sampled_choices(logprobs[e, : count + 1], plan.drafts, row.sampling, spread))
        sampled = mx.concatenate(plain) if plain else mx.array([])
        mx.eval(greedy, sampled, [verdict for verdict in verdicts if isinstance(verdict, tuple)])
        chosen, samples = greedy.tolist(), sampled.tolist()
        out: list[Generated] = []
        keep, nexts, places = [], [], []
        for e, plan in enumerate(plans):
            verdict, count = verdicts[e], len(plan.drafts)
            if isinstance(verdict, int):
                accepted, token = 0, samples[verdict]
            elif verdict is None:
                own = chosen[e][: count + 1]
                accepted = kept([own[j] == plan.drafts[j] for j in range(count)])
                token = own[accepted]
            else:
                passes, choices = verdict
                accepted = kept(passes.tolist())
                token = choices[accepted].item()
            self._count(plan, accepted)
            DraftModel.settle(plan.row, accepted)
            held, ended = self._write(plan, accepted, earlier, logprobs[e], out)
            for layer in plan.row.cache:  # positions 0 (its first) to `held` (its last kept draft)
                layer.trim(width - 1 - held)
            if not ended:
                plan.row.at = len(keep)
                keep.append(plan.row)
                nexts.append(token)
                places.append((e, held))
        if places:
            at = mx.array([e for e, _ in places]), mx.array([held for _, held in places])
            next_logprobs = logprobs[at]
        else:
            next_logprobs = mx.array([])
        return Verified(out, keep, mx.array(nexts, dtype=mx.uint32), next_logprobs)

    def _count(self, plan: _Plan, accepted: int) -> None:
        if plan.drafts:
            counters, row = self.counters, plan.row
            counters.drafted += len(plan.drafts)
            counters.accepted += accepted
            counters.verifications += 1
            counters.verified_tokens += accepted + 1
            row.drafted += len(plan.drafts)
            row.accepted += accepted
        _adapt(plan, accepted)

    def _write(
        self, plan: _Plan, accepted: int, earlier: mx.array, logprobs: mx.array, out: list[Generated]
    ) -> tuple[int, bool]:
        """A row's tokens of the step, in order, each of which may end it: its first (when it was
        decoding) and the drafts it kept. How many drafts its KV keeps, and whether it ended."""
        row = plan.row
        written = [(plan.first, earlier, row.at)] if plan.running else []
        written += [(plan.drafts[j], logprobs, j) for j in range(accepted)]
        if not plan.running:  # its first was its prompt's last token
            set_growth(row.cache, len(row.tokens))
            row.tokens.append(plan.first)
            row.pending = []
        held = 0
        for place, (token, step_logprobs, index) in enumerate(written):
            finish = row.write(token, self._stop)
            held += 0 if plan.running and place == 0 else 1
            ended = finish is not None
            handed = (row.cache, row.tokens) if ended else (None, None)
            out.append(
                Generated(row.uid, token, step_logprobs, index, finish, *handed, row.drafted, row.accepted)
            )
            if ended:  # its KV keeps what it wrote, no more
                return held, True
        if row.context is not None and held:
            row.context.update_and_fetch(mx.array(plan.drafts[:held], dtype=mx.int32))
        return held, False


def trimmable(cache: list[Any], positions: int) -> bool:
    """Whether a row's cache can take `positions` positions and give back all but one: plain KV
    can; a rotating window only while it has not wrapped round (its oldest would be overwritten)."""
    for layer in cache:
        kind = type(layer)
        if kind in (KVCache, QuantizedKVCache):
            continue
        if kind is RotatingKVCache and layer.offset + positions < layer.max_size:
            continue
        return False
    return True


def _available(row: Row) -> int:
    """How many drafts `row` wants and may find: a draft model proposes all it wants; a lookup,
    as many as follow the earlier match of its end as known before this step (the token the
    step before sampled is not read yet). A row with nothing to copy costs no verification step,
    nor the wait for the step before."""
    wanted = row.length.wanted() if row.length is not None else 0
    if not wanted or row.lookup is None or row.pending:  # a draft model's, or joining (tried once)
        return wanted
    row.lookup.catch_up(row.tokens)
    return len(row.lookup.draft(wanted))


def _expected(length: DraftLength, available: int, most: int) -> float:
    return length.expected(min(available, most))


def _grammar(row: Row) -> GrammarProcessor | None:
    return next((p for p in row.processors if isinstance(p, GrammarProcessor)), None)


def _processed(plans: list[_Plan], inputs: mx.array, logits: mx.array) -> mx.array:
    """The rows' logits through their logits processors: a row's every processor at its first
    position, as a plain step; a constrained row's grammar at each draft's too."""
    if not any(plan.row.processors for plan in plans):
        return logits
    pieces = []
    for e, plan in enumerate(plans):
        row = plan.row
        piece = logits[e]
        if row.processors:
            if row.context is None:  # the prompt, then each token as it goes in
                row.context = TokenBuffer(row.tokens)
            context = row.context.update_and_fetch(inputs[e, 0:1])
            grammar = _grammar(row)
            if plan.drafts and grammar is not None:
                piece, usable = grammar.with_drafts(context, piece, plan.drafts)
                plan.drafts = plan.drafts[:usable]
            else:
                first = piece[0:1]
                for processor in row.processors:
                    first = processor(context, first)
                piece = mx.concatenate([first, piece[1:]])
        pieces.append(piece)
    return mx.stack(pieces)


def _adapt(plan: _Plan, accepted: int) -> None:
    length = plan.row.length
    if length is None:
        return
    if plan.wanted == 0:
        length.resting()
    else:
        length.kept(len(plan.drafts), accepted)
