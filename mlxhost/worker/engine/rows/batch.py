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
from collections.abc import Sequence
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
from mlxhost.worker.engine.rows.drafter import DraftModel
from mlxhost.worker.engine.rows.kv import row_views, set_growth
from mlxhost.worker.engine.rows.row import Generated, LogitsProcessor, PromptProgress, Row, Sampler
from mlxhost.worker.engine.rows.speculation import Speculation, SpeculationCounters
from mlxhost.worker.engine.speculate.cost import StepCost

__all__ = ["Generated", "PromptProgress", "RowBatch", "row_cache", "set_growth"]

CLEAR_EVERY = 512  # decode steps between returning MLX's buffer cache, as BatchGenerator does


def row_cache(model: Any, kv_bits: int | None = None, kv_group_size: int = 64) -> list[Any]:
    """An empty cache for one row of `model`, its plain KV quantized with `kv_bits` (None: not).

    mlx-lm quantizes plain KV only: a rotating window's stays as it is."""
    cache = make_prompt_cache(model)
    if kv_bits is None:
        return cache
    return [QuantizedKVCache(kv_group_size, kv_bits) if type(layer) is KVCache else layer for layer in cache]


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
        priced: bool = True,
        draft_model: Any = None,
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
        # The last step's kind, when it began, and its width: timed when the next one begins.
        self._timing: tuple[str, float, int, int] | None = None  # and its rows
        self._stop = frozenset(stop[0] for stop in stop_tokens)
        self.speculation = Speculation(
            draft_tokens,
            self._stop,
            StepCost.pricing(priced, measured=self.budget.adaptive),
            None if draft_model is None else DraftModel(draft_model, lambda: row_cache(draft_model)),
        )
        self._stream = stream or generation_stream
        self._uids = itertools.count()
        self._waiting: deque[Row] = deque()  # inserted; in line for a place in the batch
        self._prefilling: deque[Row] = deque()  # in the batch, prefilling, first in line first
        self._joining: list[Row] = []  # prefilled: their last prompt token goes into the next step
        self._decoding: list[Row] = []
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
    def counters(self) -> SpeculationCounters:
        """Its drafts, verified and kept, since it began."""
        return self.speculation.counters

    @property
    def prompt_cache_nbytes(self) -> int:
        """The bytes of KV every row holds: the sum of the rows' own caches."""
        rows = itertools.chain(self._waiting, self._prefilling, self._joining, self._decoding)
        return sum(layer.nbytes for row in rows for layer in [*row.cache, *(row.draft_cache or [])])

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
                Row(
                    next(self._uids),
                    cache if cache is not None else self.new_cache(),
                    list(held),
                    list(prompt),
                    most,
                    sampler or greedy_sampler,
                    list(processors or []),
                )
            )
            self.speculation.setup(rows[-1], params)
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
            if prompts or not generated:  # a prefill chunk, or no step: the next period is no step's
                self._timing = None
            self._steps += 1
            if self._steps % CLEAR_EVERY == 0:
                mx.clear_cache()
        return joined + prompts, generated

    # -- the steps ---------------------------------------------------------------------------

    def _rows(self) -> itertools.chain[Row]:
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
        speculation = self.speculation
        now = time.perf_counter()
        rows = len(self._decoding) + len(self._joining)
        verifying = speculation.wanted(self._decoding + self._joining)
        self._timed(now, verifying)
        if verifying:
            firsts = self._sampled.tolist() if self._decoding else []
            verified = speculation.verify(self.model, self._decoding, self._joining, firsts, self._logprobs)
            if verified is not None:
                self._timing = ("verify", now, speculation.width, rows)
                self._decoding, self._joining = verified.rows, []
                self._sampled, self._logprobs = verified.sampled, verified.logprobs
                return verified.generated
            return self._decode()  # no row found any: a decode step, not timed (it waited)
        timed = not self._joining
        generated = self._decode()
        self._timing = ("decode", now, 1, rows) if timed else None
        return generated

    def _timed(self, now: float, verifying: bool) -> None:
        """Tell speculate/cost.py the last step's period, from its start to this one's: the wait
        for its computation, and the generation loop's work between, included. A decode step runs
        ahead, so its computation is waited for by the step after it: its period is taken only
        when the step after is a decode step too, and a verification step's includes that wait."""
        if self._timing is not None:
            kind, began, width, rows = self._timing
            if kind == "verify":
                self.speculation.cost.verified(now - began, width, rows)
            elif not verifying:
                self.speculation.cost.decoded(now - began, rows)
        self._timing = None

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
        keep: list[Row] = []
        for e, row in enumerate(rows):
            place, row.at = row.at, e
            if e >= len(running):  # it joined: its input was its prompt's last token
                set_growth(row.cache, len(row.tokens))
                row.tokens.append(row.pending[-1])
                row.pending = []
                keep.append(row)
                continue
            token = before[place]
            finish = row.write(token, self._stop)
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
