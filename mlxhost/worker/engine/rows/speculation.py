"""A verification step of the row batch: every row's last token and its drafts in one pass.

Each row carries its own number of drafts (speculate/): a row whose context holds what it is about
to write drafts up to `draft_tokens` of it, the others none. The pass runs `1 + k` positions for
every row, `k` the most drafts any row carries (a row with fewer fills its places with its last
token again: it writes those positions' KV, and trims them after). Attention stays causal within
each row (attention.py). Then each row keeps the drafts the model itself would have written
(acceptance.py) and trims its own KV past them: no other row's KV is touched, so rows with and
without drafts, at any lengths, share the pass.

The step waits for the one before it: a row's drafts follow the token that step sampled, and
its KV's length after the step depends on how many it keeps. So a batch only verifies when some
row wants to draft (draft_length.py); otherwise it decodes one token per row, running ahead.

Runs in the generation thread only, inside the batch's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache, TokenBuffer

from mlxhost.worker.engine.generation import SamplingParams
from mlxhost.worker.engine.grammar_mask import GrammarProcessor
from mlxhost.worker.engine.rows.kv import row_views
from mlxhost.worker.engine.speculate.acceptance import is_greedy, kept, sampled_choices
from mlxhost.worker.engine.speculate.draft_length import DraftLength
from mlxhost.worker.engine.speculate.lookup import PromptLookup

if TYPE_CHECKING:
    from mlxhost.worker.engine.rows.batch import Generated, RowBatch, _Row

__all__ = ["SpeculationCounters", "drafting", "trimmable", "verify", "wants_drafts"]


@dataclass
class SpeculationCounters:
    drafted: int = 0  # draft tokens verified
    accepted: int = 0  # of them, kept
    verifications: int = 0  # a row's step that verified drafts
    verified_tokens: int = 0  # tokens such steps wrote: the kept drafts and the model's own


def drafting(row: _Row, params: SamplingParams | None, most: int) -> None:
    """Set `row` up to draft up to `most` tokens a step (0: never), tested against `params`."""
    # Not where a logits processor other than its grammar's would see the drafts: a penalty's or
    # a thinking budget's state follows each token it is shown, and has no way back.
    if most <= 0 or any(not isinstance(p, GrammarProcessor) for p in row.processors):
        return
    row.sampling, row.lookup, row.length = params, PromptLookup(), DraftLength(most)
    if params is not None and params.seed is not None and params.temperature > 0:
        row.key = mx.random.key((params.seed ^ 0x5EED) % 2**64)  # its own: not the sampler's


def wants_drafts(batch: RowBatch) -> bool:
    """Whether some row wants to draft this step, and every row's KV can be trimmed after; a
    step without drafts is a step of every row's rest."""
    if batch.draft_tokens <= 0:
        return False
    rows = batch._decoding + batch._joining
    if any(r.length is not None and r.length.wanted() for r in rows) and all(
        trimmable(r.cache, 1 + batch.draft_tokens) for r in rows
    ):
        return True
    for row in rows:
        if row.length is not None:
            row.length.resting()
    return False


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


@dataclass
class _Plan:
    row: _Row
    first: int  # its input at position 0: the token sampled last step, or the prompt's last
    running: bool  # decoding already (False: joining, its first is a prompt token)
    drafts: list[int]
    wanted: int  # drafts its DraftLength asked for


def verify(batch: RowBatch, first_tokens: list[int]) -> list[Generated] | None:
    """One step verifying the rows' drafts, or None when no row found any (the batch then decodes
    as usual: nothing was changed). `first_tokens`: the step before's samples, read."""
    running, joining = batch._decoding, batch._joining
    plans = []
    for row in running:
        plans.append(_plan(batch, row, first_tokens[row.at], True))
    for row in joining:
        plans.append(_plan(batch, row, row.pending[-1], False))
    if not any(plan.drafts for plan in plans):
        for plan in plans:
            _adapt(plan, 0)
        return None
    return _run(batch, plans)


def _plan(batch: RowBatch, row: _Row, first: int, running: bool) -> _Plan:
    wanted = row.length.wanted() if row.length is not None else 0
    room = row.max_tokens - row.generated - (1 if running else 0)
    count = min(wanted, room)
    if running and first in batch._stop:
        count = 0
    drafts: list[int] = []
    if count > 0 and row.lookup is not None:
        row.lookup.catch_up(row.tokens)
        drafts = row.lookup.draft_after(first, count)
        for place, token in enumerate(drafts):  # the model's own choice writes an ending
            if token in batch._stop:
                drafts = drafts[:place]
                break
        grammar = _grammar(row)
        if grammar is not None and drafts:
            drafts = drafts[: grammar.valid_drafts(first if running else None, drafts)]
    return _Plan(row, first, running, drafts, wanted)


def _grammar(row: _Row) -> GrammarProcessor | None:
    return next((p for p in row.processors if isinstance(p, GrammarProcessor)), None)


def _run(batch: RowBatch, plans: list[_Plan]) -> list[Generated]:
    from mlxhost.worker.engine.rows.batch import GROWTH_EVERY, Generated, set_growth

    width = 1 + max(len(plan.drafts) for plan in plans)
    inputs = mx.array(
        [[p.first, *p.drafts, *([p.first] * (width - 1 - len(p.drafts)))] for p in plans], dtype=mx.uint32
    )
    logits = batch.model(inputs, cache=row_views([plan.row.cache for plan in plans]))
    logits = _processed(plans, inputs, logits)
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    greedy = mx.argmax(logprobs, axis=-1)
    verdicts: list[Any] = []
    for e, plan in enumerate(plans):
        row, count = plan.row, len(plan.drafts)
        if count == 0:  # as a plain decode step: its own sampler, at its last token
            verdicts.append(row.sampler(logprobs[e, 0:1]))
        elif is_greedy(row.sampling):
            verdicts.append(None)
        else:
            key = None
            if row.key is not None:
                row.key, key = mx.random.split(row.key)
            verdicts.append(sampled_choices(logprobs[e, : count + 1], plan.drafts, row.sampling, key))
    mx.eval(greedy, [verdict for verdict in verdicts if verdict is not None])
    chosen = greedy.tolist()
    earlier = batch._logprobs
    counters = batch.counters
    out: list[Generated] = []
    keep, nexts, places = [], [], []
    for e, plan in enumerate(plans):
        row, drafts, count = plan.row, plan.drafts, len(plan.drafts)
        verdict = verdicts[e]
        if count == 0:
            accepted, token = 0, verdict.item()
        elif verdict is None:
            own = chosen[e][: count + 1]
            accepted = kept([own[j] == drafts[j] for j in range(count)])
            token = own[accepted]
        else:
            passes, choices = verdict
            accepted = kept(passes.tolist())
            token = choices[accepted].item()
        if count:
            counters.drafted += count
            counters.accepted += accepted
            counters.verifications += 1
            counters.verified_tokens += accepted + 1
            row.drafted += count
            row.accepted += accepted
        _adapt(plan, accepted)
        # Positions 0..held stay in the row's KV; the rest is trimmed. Written in order, each
        # may end the row.
        written = ([(plan.first, earlier, row.at)] if plan.running else []) + [
            (drafts[j], logprobs[e], j) for j in range(accepted)
        ]
        if not plan.running:
            set_growth(row.cache, len(row.tokens))
            row.tokens.append(plan.first)
            row.pending = []
        held, finish = 0, None
        for place, (value, step_logprobs, index) in enumerate(written):
            row.tokens.append(value)
            held += 0 if plan.running and place == 0 else 1
            row.generated += 1
            if row.generated % GROWTH_EVERY == 0:
                set_growth(row.cache, len(row.tokens))
            finish = "length" if row.generated >= row.max_tokens else None
            if value in batch._stop:
                finish = "stop"
            ended = finish is not None
            out.append(
                Generated(
                    row.uid,
                    value,
                    step_logprobs,
                    index,
                    finish,
                    row.cache if ended else None,
                    row.tokens if ended else None,
                    row.drafted,
                    row.accepted,
                )
            )
            if ended:
                break
        for layer in row.cache:
            layer.trim(width - 1 - held)
        if finish is None:
            if row.context is not None and held:
                row.context.update_and_fetch(mx.array(drafts[:held], dtype=mx.int32))
            row.at = len(keep)
            keep.append(row)
            nexts.append(token)
            places.append((e, held))
    batch._decoding, batch._joining = keep, []
    batch._sampled = mx.array(nexts, dtype=mx.uint32)
    if places:
        at = mx.array([e for e, _ in places]), mx.array([held for _, held in places])
        batch._logprobs = logprobs[at]
    else:
        batch._logprobs = mx.array([])
    return out


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
