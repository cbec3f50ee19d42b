"""Per-request samplers and logits processors for mlx-lm's BatchGenerator.

Runs in the generation thread only (it builds MLX graphs). Unseeded requests with the same
settings share one sampler object, because BatchGenerator samples the whole batch in one call only
when every row has the same sampler. A seeded request gets its own random key, split per step, so
its output does not depend on what else is in the batch: that lets seeded requests batch too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import mlx.core as mx
from mlx_lm.sample_utils import (
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_logits_processors,
    make_sampler,
)

from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams, ThinkingBudget

__all__ = ["SamplerCache", "logits_processors_for", "processors_for", "thinking_budget"]

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


class SamplerCache:
    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._shared: OrderedDict[tuple[float, float, int, float], Sampler] = OrderedDict()

    def sampler_for(self, params: SamplingParams) -> Sampler:
        if params.seed is not None:
            return _seeded_sampler(params)
        key = (params.temperature, params.top_p, params.top_k, params.min_p)
        sampler = self._shared.get(key)
        if sampler is None:
            sampler = make_sampler(
                temp=params.temperature, top_p=params.top_p, min_p=params.min_p, top_k=params.top_k
            )
            self._shared[key] = sampler
            if len(self._shared) > self._size:
                self._shared.popitem(last=False)
        else:
            self._shared.move_to_end(key)
        return sampler


def _seeded_sampler(params: SamplingParams) -> Sampler:
    if params.temperature == 0:
        return make_sampler(temp=0.0)
    assert params.seed is not None
    key = mx.random.key(params.seed % 2**64)  # OpenAI seeds are signed; MLX keys are not

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, step_key = mx.random.split(key)
        if 0 < params.top_p < 1.0:
            logprobs = apply_top_p(logprobs, params.top_p)
        if params.min_p > 0:
            logprobs = apply_min_p(logprobs, params.min_p)
        if params.top_k > 0:
            logprobs = apply_top_k(logprobs, params.top_k)
        return mx.random.categorical(logprobs * (1.0 / params.temperature), key=step_key)

    return sample


def logits_processors_for(params: SamplingParams) -> list[LogitsProcessor]:
    if not (params.repetition_penalty or params.presence_penalty or params.frequency_penalty):
        return []
    return make_logits_processors(
        repetition_penalty=params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
    )


def processors_for(request: GenerationRequest, vocab_size: int) -> list[LogitsProcessor]:
    """Every logits processor of a request's sequence, the grammar's mask last, so that nothing
    after it can make a token it forbids possible again."""
    processors = logits_processors_for(request.sampling)
    if request.logit_bias:
        processors.append(_biased(request.logit_bias, vocab_size))
    if request.thinking_budget is not None:
        processors.append(thinking_budget(request.thinking_budget, vocab_size))
    if request.grammar is not None:
        processors.append(request.grammar.processor())
    return processors


def thinking_budget(budget: ThinkingBudget, vocab_size: int) -> LogitsProcessor:
    """Ends the think block once `budget.tokens` tokens were written inside it: from then on the
    only token allowed is the next of the end marker's, until the marker is written whole.

    Its state stays in MLX arrays, computed from the token context it is given: reading the last
    token back (`.item()`) would wait for a step that mlx-lm computes ahead."""
    start, end = mx.array(budget.start), mx.array(budget.end)
    width = max(len(budget.start), len(budget.end))
    vocab = mx.arange(vocab_size)
    state = {"open": mx.array(budget.open), "spent": mx.array(0)}

    def ends(tail: mx.array, marker: mx.array) -> mx.array:
        n = marker.size
        return mx.all(tail[-n:] == marker) if tail.size >= n else mx.array(False)

    def end_thinking(tokens: mx.array, logits: mx.array) -> mx.array:
        tail = tokens.reshape(-1)[-width:]
        closed, opened = ends(tail, end), ends(tail, start)
        is_open = mx.where(closed, False, mx.where(opened, True, state["open"]))
        spent = state["spent"]
        state["open"], state["spent"] = is_open, spent + is_open.astype(mx.int32)
        # How much of the end marker the context already ends with: its next token is forced.
        written = mx.array(0)
        for n in range(1, end.size):
            written = mx.where(ends(tail, end[:n]), n, written)
        only_next = mx.where(vocab == end[written], 0.0, -mx.inf).astype(logits.dtype)
        return mx.where(is_open & (spent >= budget.tokens), only_next, logits)

    return end_thinking


def _biased(bias: tuple[tuple[int, float], ...], vocab_size: int) -> LogitsProcessor:
    ids = mx.array([token for token, _ in bias])
    values = mx.array([value for _, value in bias])
    dense = mx.zeros((vocab_size,)).at[ids].add(values)

    def add_bias(tokens: mx.array, logits: mx.array) -> mx.array:
        return logits + dense.astype(logits.dtype)

    return add_bias
