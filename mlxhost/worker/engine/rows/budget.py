"""How many prompt tokens to prefill between two decode steps: `PrefillBudget`.

A prompt that joins a running batch is prefilled in chunks, one chunk after each decode step, so
the running streams wait at most about one chunk's time for their next token (chunked prefill, as
vLLM schedules it with a per-step token budget). With no stream running, nobody waits: the
prompt goes in chunks of `prefill_step`, the size that is fastest.

The budget is time, not tokens: a chunk costs more per token as its prompt grows (attention) and
on a bigger model, so the token count is set from the last chunks' measured seconds per token to
take about `seconds`. A worker group cannot measure: its ranks must cut every prompt at the same
tokens, or their collectives pair up the wrong tensors, so a group uses a fixed `tokens` count.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PrefillBudget"]

SMOOTHING = 0.5  # the weight of the newest measurement in seconds per token
LEAST = 16  # tokens: below this a chunk's fixed cost outweighs its work


@dataclass
class PrefillBudget:
    prefill_step: int = 2048  # tokens per chunk when no stream is decoding
    seconds: float = 0.05  # a chunk's time while streams are decoding
    tokens: int = 256  # the first chunk's size while decoding, and a group's always
    adaptive: bool = True  # False in a worker group: the same chunks on every rank
    _per_token: float | None = None  # seconds per prompt token, measured
    _last: int = 0  # the last measured chunk's tokens

    def chunk(self, decoding: bool) -> int:
        """Prompt tokens to prefill after this step."""
        if not decoding:
            return self.prefill_step
        if not self.adaptive or self._per_token is None:
            return min(self.tokens, self.prefill_step)
        # At most twice the last chunk: a chunk costs more per token the further into its prompt
        # it is (attention), so a rate measured near the start overestimates what fits further on.
        fits = int(self.seconds / self._per_token)
        return max(LEAST, min(self.prefill_step, fits, 2 * self._last))

    def measured(self, tokens: int, seconds: float) -> None:
        """A chunk of `tokens` took `seconds`, alone (the decode step before it had ended)."""
        if tokens <= 0 or seconds <= 0:
            return
        per_token = seconds / tokens
        self._last = tokens
        previous = self._per_token
        self._per_token = (
            per_token if previous is None else SMOOTHING * per_token + (1 - SMOOTHING) * previous
        )
