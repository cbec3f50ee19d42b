"""The speculation bench's raw arms: mlx-lm in this process, greedy, on the copy model.

  raw              `stream_generate`, one stream (mlx-lm's plain `generate_step`).
  raw_speculative  `stream_generate` with a draft model, one stream: mlx-lm's
                   `speculative_generate_step`. mlx-lm drafts only with a model, never by prompt
                   lookup; the draft is the served model itself (no smaller model of its tokenizer
                   copies: the demo sizes have other tokenizers or random weights). A draft that is
                   the model always agrees with it, so this is mlx-lm's speculation at full
                   acceptance, paying a draft pass per drafted token.

mlx-lm's own speculation is single-stream only; at 4 and 8 streams the host arms are compared with
each other.

Each arm returns the answers' token ids with their times, so that the bench can compare what the
host answered with what mlx-lm answers, and measure how much of each answer was copied.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx_lm
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache
from mlx_lm.sample_utils import make_sampler

# Answers' hidden states are turned into logits this many positions at a time (the agent demo's
# 32,768-token vocabulary would make a 300-line file's logits half a gigabyte at once).
LOGIT_CHUNK = 256


@dataclass(frozen=True)
class Answer:
    """One stream's answer, timed from its start (eos is no token of it)."""

    count: int  # tokens
    text: str
    ttft_s: float  # start to the first token
    end_s: float  # start to the last token (HTTP: the last frame with content)
    drafted: int = 0  # draft tokens the model kept (raw_speculative; the host's usage)
    refused: int = 0  # draft tokens it refused (the host's usage; mlx-lm does not say)
    tokens: list[int] = field(default_factory=list)  # the ids, where mlx-lm wrote them (raw arms)


class RawCopy:
    """The copy model in this process. Every MLX call happens in the thread that made it."""

    def __init__(self, model_path: Path) -> None:
        began = time.perf_counter()
        self.model, self.tokenizer = mlx_lm.load(str(model_path))
        self.load_s = time.perf_counter() - began
        self.parameters = sum(v.size for _, v in tree_flatten(self.model.parameters()))
        self.sampler = make_sampler(temp=0.0)

    def encode(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """The prompt as the host renders it: the chat template, ready for the answer."""
        return list(self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True))

    def tokens_of(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def plain(self, prompt: list[int], max_tokens: int) -> Answer:
        return self._stream(prompt, max_tokens, draft_tokens=0)

    def speculative(self, prompt: list[int], max_tokens: int, draft_tokens: int) -> Answer:
        return self._stream(prompt, max_tokens, draft_tokens=draft_tokens)

    def _stream(self, prompt: list[int], max_tokens: int, draft_tokens: int) -> Answer:
        extra = {"draft_model": self.model, "num_draft_tokens": draft_tokens} if draft_tokens else {}
        eos = set(self.tokenizer.eos_token_ids)
        tokens: list[int] = []
        segments: list[str] = []
        drafted = 0
        start = time.perf_counter()
        first = last = start
        for response in mlx_lm.stream_generate(
            self.model, self.tokenizer, prompt, max_tokens=max_tokens, sampler=self.sampler, **extra
        ):
            segments.append(response.text)
            if response.finish_reason == "stop" and response.token in eos:
                break  # the end of the turn, which no server counts as a token of the answer
            last = time.perf_counter()
            first = last if not tokens else first
            tokens.append(int(response.token))
            drafted += bool(response.from_draft)
        text = "".join(segments)
        return Answer(len(tokens), text, first - start, last - start, drafted=drafted, tokens=tokens)

    def step_seconds(self, prompt: list[int], width: int, steps: int = 8) -> float:
        """Seconds of one forward step of `width` tokens after the prompt (its KV cached), the
        median of `steps`: what verifying width - 1 drafts costs against decoding one token."""
        cache = make_prompt_cache(self.model)
        mx.eval(self.model(mx.array(prompt)[None], cache=cache))
        tokens = mx.array(prompt[-width:])[None]
        times = []
        for _ in range(steps + 1):  # the first compiles
            began = time.perf_counter()
            mx.eval(self.model(tokens, cache=cache))
            times.append(time.perf_counter() - began)
            trim_prompt_cache(cache, width)
        return statistics.median(times[1:])

    def teacher_forced(self, prompt: list[int], answer: list[int]) -> float:
        """The share of the answer's tokens the model predicts (argmax) from the exact prefix
        before each: how well it copies when it never strays."""
        if not answer:
            return float("nan")
        inputs = mx.array(prompt + answer[:-1])[None]
        hidden = self.model.model(inputs)[0, len(prompt) - 1 :]
        tied = not hasattr(self.model, "lm_head")
        head = self.model.model.embed_tokens.as_linear if tied else self.model.lm_head
        right = 0
        for begin in range(0, len(answer), LOGIT_CHUNK):
            part = hidden[begin : begin + LOGIT_CHUNK]
            predicted = mx.argmax(head(part), axis=-1).tolist()
            right += sum(p == t for p, t in zip(predicted, answer[begin : begin + LOGIT_CHUNK], strict=False))
        return right / len(answer)
