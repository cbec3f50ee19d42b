"""The row batch: continuous batching in which every row keeps its own KV cache.

`RowBatch` takes the place of mlx-lm's `BatchGenerator` and answers the calls the engine makes of
it (`insert`, `next`, `remove`, `extract_cache`, `close`, `stream`), so intake, cache keeping and
a worker group's followers are the same over either. What differs is the KV:

- each row's cache is its own list of mlx-lm layer caches (`KVCache`, `RotatingKVCache`,
  `QuantizedKVCache`), the very object the prompt cache keeps: a row starts from a kept entry,
  and a finished row's cache is kept, by handing the object over, never by merging it into a
  padded batch or extracting it again;
- a decode step runs every row's token through the model at once, each layer seeing the rows'
  caches side by side (kv.py), and attention runs each row over its own length (attention.py):
  a step costs the sum of the rows' lengths, and holds the sum of their KV;
- a row joins the decode batch at any step without copying another row's KV, and leaves without
  compacting the others.

A prompt is prefilled alone, in its own cache, in chunks between decode steps (budget.py): a
long prompt joining holds the running streams up for about one chunk, not for the whole prompt.
Its last token is not prefilled: it is the row's first input in the decode batch, whose logits
give the first generated token (as `mlx_lm.generate` feeds it alone after the prompt's prefill).

Decoding runs one step ahead, as `BatchGenerator` does: `next` starts computing the next tokens
(`mx.async_eval`) before it reads the ones sampled at the step before, so the model computes while
Python reads tokens and builds the next graph.

Runs in the generation thread only; every MLX call runs on `stream`.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import KVCache, QuantizedKVCache, TokenBuffer, make_prompt_cache
from mlx_lm.sample_utils import greedy_sampler
from mlx_lm.utils import maybe_set_recommended_wired_limit

from mlxhost.worker.cache.sharing import shared_copy
from mlxhost.worker.engine.generation import SamplingParams
from mlxhost.worker.engine.rows.attention import install
from mlxhost.worker.engine.rows.budget import PrefillBudget
from mlxhost.worker.engine.rows.kv import row_views
from mlxhost.worker.engine.rows.speculation import SpeculationCounters, drafting, verify, wants_drafts

__all__ = ["Generated", "PromptProgress", "RowBatch", "row_cache", "set_growth"]

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]

CLEAR_EVERY = 512  # decode steps between returning MLX's buffer cache, as BatchGenerator does
# mlx-lm's KVCache grows its buffers `step` positions at a time (256), copying what they hold each
# time. A row sets its own step to about an eighth of its length, between these bounds, every
# GROWTH_EVERY tokens: a short row holds a few positions more than its tokens, not 256, and a long
# one copies its KV once per eighth of its length at most.
LEAST_STEP, MOST_STEP, GROWTH_EVERY = 16, 256, 16


def row_cache(model: Any, kv_bits: int | None = None, kv_group_size: int = 64) -> list[Any]:
    """An empty cache for one row of `model`, its plain KV quantized with `kv_bits` (None: not).

    mlx-lm quantizes plain KV only: a rotating window's stays as it is."""
    cache = make_prompt_cache(model)
    if kv_bits is None:
        return cache
    return [QuantizedKVCache(kv_group_size, kv_bits) if type(layer) is KVCache else layer for layer in cache]


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
class _Row:
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
    lookup: Any = None  # its PromptLookup
    length: Any = None  # its DraftLength
    key: Any = None  # a seeded row's own random key for its drafts' tests
    drafted: int = 0
    accepted: int = 0

    def __post_init__(self) -> None:
        self.total = len(self.pending) - 1
        self.last = mx.array(self.pending[-1:], dtype=mx.uint32)


class RowBatch:
    """Continuous batching over per-row KV caches, with BatchGenerator's calls."""

    def __init__(
        self,
        model: Any,
        *,
        stop_tokens: Sequence[Sequence[int]] = (),
        max_batch: int = 32,
        budget: PrefillBudget | None = None,
        kv_bits: int | None = None,
        kv_group_size: int = 64,
        stream: Any = None,
        draft_tokens: int = 0,
    ) -> None:
        if any(len(stop) != 1 for stop in stop_tokens):
            raise ValueError("RowBatch stops on single tokens; stop strings are the text stream's")
        install()  # the model's attention reads per-row KV (attention.py)
        self.model = model
        self.max_batch = max_batch
        self.budget = budget or PrefillBudget()
        self.kv_bits = kv_bits
        self.kv_group_size = kv_group_size
        self.draft_tokens = draft_tokens  # most drafts a row verifies per step (0: no speculation)
        self.counters = SpeculationCounters()
        self._stop = frozenset(stop[0] for stop in stop_tokens)
        self._stream = stream or generation_stream
        self._uids = itertools.count()
        self._waiting: deque[_Row] = deque()  # inserted; in line for a place in the batch
        self._prefilling: deque[_Row] = deque()  # in the batch, prefilling, first in line first
        self._joining: list[_Row] = []  # prefilled: their last prompt token goes into the next step
        self._decoding: list[_Row] = []
        # What the last decode step samples, ahead, one row each (a decoding row's is at `row.at`).
        self._sampled = mx.array([], dtype=mx.uint32)
        self._logprobs = mx.array([])
        self._steps = 0
        self._old_wired_limit = maybe_set_recommended_wired_limit()

    @property
    def stream(self) -> Any:
        return self._stream

    def close(self) -> None:
        if self._old_wired_limit is not None:
            mx.synchronize(self._stream)
            mx.set_wired_limit(self._old_wired_limit)
            self._old_wired_limit = None

    @property
    def prompt_cache_nbytes(self) -> int:
        """The bytes of KV every row holds: the sum of the rows' own caches."""
        rows = itertools.chain(self._waiting, self._prefilling, self._joining, self._decoding)
        return sum(layer.nbytes for row in rows for layer in row.cache)

    def insert(
        self,
        prompts: list[list[int]],
        max_tokens: list[int] | None = None,
        caches: list[list[Any] | None] | None = None,
        all_tokens: list[list[int]] | None = None,
        samplers: list[Sampler | None] | None = None,
        logits_processors: list[list[LogitsProcessor]] | None = None,
        sampling: list[SamplingParams | None] | None = None,
    ) -> list[int]:
        """Queue rows: `prompts` are what each still has to prefill (at least one token), `caches`
        what each starts from (None: nothing), holding `all_tokens`. Their uids, in order."""
        count = len(prompts)
        options = {
            "max_tokens": max_tokens or [128] * count,
            "caches": caches or [None] * count,
            "all_tokens": all_tokens or [[] for _ in prompts],
            "samplers": samplers or [None] * count,
            "logits_processors": logits_processors or [[] for _ in prompts],
            "sampling": sampling or [None] * count,
        }
        for name, values in options.items():
            if len(values) != count:
                raise ValueError(f"{name} must have one entry per prompt: {count}, not {len(values)}")
        rows = []
        for prompt, most, cache, held, sampler, processors, params in zip(
            prompts, *options.values(), strict=True
        ):
            if not prompt:
                raise ValueError("a prompt must leave at least one token to compute")
            if most <= 0:
                raise ValueError(f"max_tokens must be > 0, not {most}")
            rows.append(
                _Row(
                    next(self._uids),
                    cache if cache is not None else self.new_cache(),
                    list(held),
                    list(prompt),
                    most,
                    sampler or greedy_sampler,
                    list(processors or []),
                )
            )
            drafting(rows[-1], params, self.draft_tokens)
        self._waiting.extend(rows)
        return [row.uid for row in rows]

    def remove(
        self, uids: Sequence[int], return_prompt_caches: bool = False
    ) -> dict[int, tuple[list[Any], list[int]]]:
        """Take rows out; with `return_prompt_caches`, each one's cache and the tokens it holds,
        handed over (the row is gone: nothing else writes to it)."""
        gone = set(uids)
        handed: dict[int, tuple[list[Any], list[int]]] = {}
        for row in self._rows():
            if row.uid in gone and return_prompt_caches:
                handed[row.uid] = (row.cache, row.tokens)
        self._waiting = deque(row for row in self._waiting if row.uid not in gone)
        self._prefilling = deque(row for row in self._prefilling if row.uid not in gone)
        self._joining = [row for row in self._joining if row.uid not in gone]
        self._decoding = [row for row in self._decoding if row.uid not in gone]
        return handed

    def extract_cache(self, uids: Sequence[int]) -> dict[int, tuple[list[Any], list[int]]]:
        """A copy of each row's cache as it is now, and its tokens; the rows go on. The copy shares
        the rows' memory (cache/sharing.py): the row's next write copies what it must."""
        wanted = set(uids)
        return {
            row.uid: (shared_copy(row.cache), list(row.tokens)) for row in self._rows() if row.uid in wanted
        }

    def next(self) -> tuple[list[PromptProgress], list[Generated]]:
        """One decode step over the running rows, then a prefill chunk for those joining: what
        each prefill did, and the token each running row generated."""
        with mx.stream(self._stream):
            self._admit()
            joined = [PromptProgress(row.uid, (row.total, row.total), True, True) for row in self._joining]
            generated = self._step() if self._decoding or self._joining else []
            prompts = self._prefill()
            self._steps += 1
            if self._steps % CLEAR_EVERY == 0:
                mx.clear_cache()
        return joined + prompts, generated

    # -- the steps ---------------------------------------------------------------------------

    def _rows(self) -> itertools.chain[_Row]:
        return itertools.chain(self._waiting, self._prefilling, self._joining, self._decoding)

    def _admit(self) -> None:
        room = self.max_batch - len(self._prefilling) - len(self._joining) - len(self._decoding)
        while self._waiting and room > 0:
            self._prefilling.append(self._waiting.popleft())
            room -= 1

    def new_cache(self) -> list[Any]:
        """An empty cache for a row of this batch (quantized with `kv_bits`)."""
        return row_cache(self.model, self.kv_bits, self.kv_group_size)

    def _step(self) -> list[Generated]:
        if wants_drafts(self):
            generated = verify(self, self._sampled.tolist() if self._decoding else [])
            if generated is not None:
                return generated
        return self._decode()

    def _decode(self) -> list[Generated]:
        running, joining = self._decoding, self._joining
        rows = running + joining
        count = len(rows)
        # The tokens sampled at the last step, read from that step's own array: an operation built
        # on it now (a gather, a split) would be computed after this step's forward, not before.
        places = [row.at for row in running]
        previous, earlier = self._sampled, self._logprobs
        sampled_before = previous
        if places != list(range(previous.size)):  # a row left: the others' tokens, gathered
            sampled_before = previous[mx.array(places, dtype=mx.int32)]
        inputs = (
            mx.concatenate([sampled_before, *(row.last for row in joining)]) if joining else sampled_before
        )
        logits = self.model(inputs[:, None], cache=row_views([row.cache for row in rows]))[:, -1, :]
        contexts = []
        if any(row.processors for row in rows):
            pieces = mx.split(logits, count) if count > 1 else [logits]
            for e, row in enumerate(rows):
                if row.processors:
                    if row.context is None:  # the prompt, then each token as it goes in
                        row.context = TokenBuffer(row.tokens)
                    context = row.context.update_and_fetch(inputs[e : e + 1])
                    contexts.append(context)
                    for processor in row.processors:
                        pieces[e] = processor(context, pieces[e])
            logits = mx.concatenate(pieces) if count > 1 else pieces[0]
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        samplers = [row.sampler for row in rows]
        if all(sampler is samplers[0] for sampler in samplers):
            sampled = samplers[0](logprobs)
        else:
            sampled = mx.concatenate(
                [s(lp) for s, lp in zip(samplers, mx.split(logprobs, count), strict=True)]
            )
        self._sampled, self._logprobs = sampled, logprobs
        mx.async_eval(sampled, logprobs, contexts)

        # Now what the step before sampled, which went in as this step's inputs.
        before = previous.tolist() if running else []
        out: list[Generated] = []
        keep: list[_Row] = []
        for e, row in enumerate(rows):
            place, row.at = row.at, e
            if e >= len(running):  # it joined: its input was its prompt's last token
                set_growth(row.cache, len(row.tokens))
                row.tokens.append(row.pending[-1])
                row.pending = []
                keep.append(row)
                continue
            token = before[place]
            row.tokens.append(token)  # its KV is in the cache now
            row.generated += 1
            if row.generated % GROWTH_EVERY == 0:
                set_growth(row.cache, len(row.tokens))
            finish = "length" if row.generated >= row.max_tokens else None
            if token in self._stop:
                finish = "stop"
            if finish is None:
                drafts = row.drafted, row.accepted
                out.append(Generated(row.uid, token, earlier, place, None, None, None, *drafts))
                keep.append(row)
            else:
                drafts = row.drafted, row.accepted
                out.append(Generated(row.uid, token, earlier, place, finish, row.cache, row.tokens, *drafts))
        self._decoding, self._joining = keep, []
        return out

    def _prefill(self) -> list[PromptProgress]:
        decoding = bool(self._decoding)
        budget = self.budget.chunk(decoding)
        progress: list[PromptProgress] = []
        if decoding and self._prefilling:
            mx.eval(self._sampled, self._logprobs)  # the decode step ends first: the chunk is timed alone
        while self._prefilling and budget > 0:
            row = self._prefilling[0]
            size = min(len(row.pending) - 1, budget)
            if size > 0:
                if row.prefilled == 0:  # the buffers grow to the prompt's length, no further
                    set_growth(row.cache, len(row.tokens) + len(row.pending))
                chunk, row.pending = row.pending[:size], row.pending[size:]
                began = time.perf_counter()
                self.model(mx.array([chunk], dtype=mx.uint32), cache=row.cache)
                mx.eval([layer.state for layer in row.cache])
                if decoding:
                    self.budget.measured(size, time.perf_counter() - began)
                row.tokens += chunk
                row.prefilled += size
                budget -= size
            if len(row.pending) == 1:
                if size > 0:
                    progress.append(PromptProgress(row.uid, (row.prefilled, row.total), True, False))
                self._joining.append(self._prefilling.popleft())
            else:
                progress.append(PromptProgress(row.uid, (row.prefilled, row.total), False, False))
        return progress


def set_growth(cache: list[Any], length: int) -> None:
    """Let `cache`'s plain KV buffers grow by about an eighth of `length` positions at a time."""
    step = min(MOST_STEP, max(LEAST_STEP, length // 8 // LEAST_STEP * LEAST_STEP))
    for layer in cache:
        if type(layer) in (KVCache, QuantizedKVCache):  # a rotating window's size is its own
            layer.step = step
