"""The raw path: mlx-lm in this process, the floor every server is measured against.

Concurrency 1 is `stream_generate` with eos ignored; concurrency N inserts N copies of the prompt
into a `BatchGenerator` at once (no stop tokens, so every row runs to max_tokens; batch sizes as
the server's) and steps it until all finished, each row's tokens going through its own streaming
detokenizer, as `stream_generate` does at concurrency 1 and as any server must to return text. The
same batches without detokenizing are measured too (JSON: results.raw.cN.tokens_only_total_tok_s
and targets.isolated_vs_raw_tokens_only): a floor no server reaches, not a target.

The prompt is picked here too, by a greedy probe (see PROMPTS), which doubles as the raw warm-up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_sampler

from bench.figures import progress
from bench.runs import BatchRun, StreamRun
from bench.settings import MAX_BATCH, PREFILL_BATCH

# The first prompt whose greedy reply suits every path is used: it must run to max_tokens without
# eos, so that all generate the same number of tokens (a random-weight model may emit eos at any
# point), and its text must stream, token by token, from the first token on. A random model often
# emits byte fragments that are not yet valid UTF-8, and a detokenizer holds those back: a reply
# made of them reaches an HTTP client in one frame at the end, and TTFT and decode rate over HTTP
# would then measure nothing.
PROMPTS = (
    "Tell me about the sea.",
    "Write a poem about rain.",
    "Explain, in detail, how a bicycle works.",
    "What is the capital of France?",
    "hello",
)
MIN_VISIBLE_FRACTION = 0.5  # of the tokens, those whose text can be sent at once


@dataclass(frozen=True)
class PromptProbe:
    reaches_max_tokens: bool
    first_token_visible: bool
    visible_fraction: float

    @property
    def suitable(self) -> bool:
        return (
            self.reaches_max_tokens
            and self.first_token_visible
            and self.visible_fraction >= MIN_VISIBLE_FRACTION
        )


class RawMLX:
    """mlx-lm in this process. Every MLX call happens in the thread that made this object."""

    def __init__(self, model_path: Path) -> None:
        began = time.perf_counter()
        self.model, self.tokenizer = mlx_lm.load(str(model_path))
        self.load_s = time.perf_counter() - began
        self.parameters = sum(v.size for _, v in tree_flatten(self.model.parameters()))
        self.sampler = make_sampler(temp=0.0)

    def encode(self, prompt: str) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        return list(ids)

    def stream(self, prompt: list[int], max_tokens: int, ignore_eos: bool = True) -> StreamRun:
        """One `stream_generate` call; with ignore_eos it runs to max_tokens whatever it emits."""
        eos = set(self.tokenizer.eos_token_ids)
        if ignore_eos:
            self.tokenizer.eos_token_ids = set()
        try:
            start = time.perf_counter()
            first = last = start
            tokens = frames = 0
            for response in mlx_lm.stream_generate(
                self.model, self.tokenizer, prompt, max_tokens=max_tokens, sampler=self.sampler
            ):
                last = time.perf_counter()
                if tokens == 0:
                    first = last
                tokens = response.generation_tokens
                frames += bool(response.text)
        finally:
            self.tokenizer.eos_token_ids = eos
        return StreamRun(tokens, first - start, last - first, last - start, frames)

    def probe(self, prompt: list[int], max_tokens: int) -> PromptProbe:
        """How a greedy reply to the prompt streams, eos included."""
        segments: list[str] = []
        finish = None
        for response in mlx_lm.stream_generate(
            self.model, self.tokenizer, prompt, max_tokens=max_tokens, sampler=self.sampler
        ):
            segments.append(response.text)
            finish = response.finish_reason
        visible = sum(1 for text in segments if text) / len(segments)
        return PromptProbe(finish == "length", bool(segments[0]), visible)

    def batch(
        self,
        prompt: list[int],
        concurrency: int,
        max_tokens: int,
        max_batch: int = MAX_BATCH,
        detokenize: bool = True,
    ) -> BatchRun:
        """Insert `concurrency` copies of the prompt at once; step until every row finished.

        With `detokenize` every row's tokens go through its own streaming detokenizer, as
        `stream_generate` does for one stream and as any server must do to return text."""
        generator = BatchGenerator(
            self.model,
            stop_tokens=None,  # no eos: every row generates exactly max_tokens
            sampler=self.sampler,
            completion_batch_size=max_batch,
            prefill_batch_size=PREFILL_BATCH,
        )
        try:
            start = time.perf_counter()
            uids = generator.insert([prompt] * concurrency, max_tokens=[max_tokens] * concurrency)
            detokenizers = {uid: self.tokenizer.detokenizer for uid in uids} if detokenize else {}
            for detokenizer in detokenizers.values():
                detokenizer.reset()
            counts = dict.fromkeys(uids, 0)
            firsts: dict[int, float] = {}
            running = set(uids)
            while running:
                _, responses = generator.next()
                now = time.perf_counter()
                for response in responses:
                    counts[response.uid] += 1
                    if detokenize:
                        detokenizers[response.uid].add_token(response.token)
                        detokenizers[response.uid].last_segment  # noqa: B018  # the text, as a server takes it
                    firsts.setdefault(response.uid, now)
                    if response.finish_reason is not None:
                        running.discard(response.uid)
            wall = time.perf_counter() - start
        finally:
            generator.close()
        return BatchRun(
            [counts[uid] for uid in uids], wall, [firsts[uid] - start for uid in uids]
        )


def choose_prompt(raw: RawMLX, max_tokens: int) -> tuple[str, list[int], PromptProbe]:
    """The first suitable prompt (see PROMPTS). Doubles as the raw warm-up."""
    probes: list[tuple[str, PromptProbe]] = []
    for text in PROMPTS:
        probe = raw.probe(raw.encode(text), max_tokens)
        if probe.suitable:
            return text, raw.encode(text), probe
        probes.append((text, probe))
    text, probe = max(probes, key=lambda p: (p[1].reaches_max_tokens, p[1].visible_fraction))
    progress(
        f"warning: no prompt suits this model at max_tokens {max_tokens}; "
        f"using {text!r} ({probe}). Rates use the actual token counts, but TTFT and decode "
        "over HTTP may be off."
    )
    return text, raw.encode(text), probe
