"""Which drafts a row keeps: the model's own choice at each draft's position.

A verification pass gives a row's logits at its last token and at each of its `k` drafts
(positions 0..k). Draft `j` is kept when the model, at position `j - 1`, would have written it,
and only while every draft before it was kept; the first position whose choice differs gives the
row's next token instead (and after `k` kept drafts, position `k` gives it): a step writes the
kept drafts and one token of the model's own.

- A greedy row keeps a draft equal to the argmax: its output is token for token the output
  without speculation.
- A sampled row keeps draft `d`, drawn from a distribution `q`, at a position whose distribution
  is `p` with probability `min(1, p(d) / q(d))`, and at the first refusal samples from
  `max(p - q, 0)`, renormalized (the speculative-sampling rule of Leviathan et al. and Chen et
  al., 2023). A lookup's draft has all of `q` on `d`: it is kept with probability `p(d)`, and a
  refusal samples from `p` without `d`. Each token so written has exactly the distribution `p`,
  the one the row's sampler draws from (temperature, top-p, min-p, top-k applied alike), so the
  output's distribution is the model's own.

Everything is built as MLX operations for all positions at once, read back with one `tolist`.
"""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

from mlxhost.worker.engine.generation import SamplingParams

__all__ = ["is_greedy", "kept", "sampled_choices", "target_logprobs"]


def is_greedy(params: SamplingParams | None) -> bool:
    return params is None or params.temperature == 0


def target_logprobs(logprobs: mx.array, params: SamplingParams) -> mx.array:
    """The log-probabilities a row's sampler draws from (`make_sampler`'s filters, in its order,
    then the temperature), normalized, one row per position."""
    if 0 < params.top_p < 1.0:
        logprobs = apply_top_p(logprobs, params.top_p)
    if params.min_p != 0.0:
        logprobs = apply_min_p(logprobs, params.min_p)
    if params.top_k > 0:
        logprobs = apply_top_k(logprobs, params.top_k)
    scaled = logprobs * (1.0 / params.temperature)
    return scaled - mx.logsumexp(scaled, axis=-1, keepdims=True)


def sampled_choices(
    logprobs: mx.array, drafts: list[int], params: SamplingParams, spread: mx.array | None = None
) -> tuple[mx.array, mx.array]:
    """For a sampled row's positions 0..k (`logprobs`, k + 1 rows) and its k `drafts`: whether
    each draft passes its own test, and the token each position writes if it is the first to
    refuse (position k: a plain sample, written when every draft is kept). `spread`: the draft
    model's log-probabilities each draft was drawn from (k rows); None: a lookup's, all on the
    draft."""
    k = len(drafts)
    target = target_logprobs(logprobs, params)
    if not k:
        return mx.array([], dtype=mx.bool_), mx.random.categorical(target)
    ids = mx.array(drafts, dtype=mx.int32)
    rows = mx.arange(k)
    if spread is None:
        chance = mx.exp(target[rows, ids])
        # Without the draft: its position's distribution, the draft's probability taken out.
        refused = mx.zeros(target.shape, dtype=mx.bool_)
        refused[rows, ids] = True
        without = mx.where(refused, -mx.inf, target)
    else:
        spread = _fit(spread, target.shape[-1])
        chance = mx.minimum(1.0, mx.exp(target[rows, ids] - spread[rows, ids]))
        # What the target gives beyond the draft model, renormalized by the draw.
        excess = mx.maximum(mx.exp(target[:k]) - mx.exp(spread), 0.0)
        without = mx.concatenate([mx.log(excess), target[k:]])
    passes = mx.random.uniform(shape=(k,)) < chance
    return passes, mx.random.categorical(without)


def kept(passes: list[bool]) -> int:
    """How many drafts are kept: those before the first that fails."""
    for count, passed in enumerate(passes):
        if not passed:
            return count
    return len(passes)


def _fit(logprobs: mx.array, width: int) -> mx.array:
    """A draft model's log-probabilities over the target's `width` (their logits may be padded
    differently past the shared vocabulary): cut, or padded with tokens it never draws."""
    held = logprobs.shape[-1]
    if held >= width:
        return logprobs[..., :width]
    return mx.pad(logprobs, [(0, 0), (0, width - held)], constant_values=-mx.inf)
