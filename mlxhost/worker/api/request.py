"""From a body and its prompt to what the engine runs, whatever the dialect: the `GenerationRequest`.

The prompt is checked against the model's context twice: by its characters before it is encoded
or rendered (`check_characters`: a prompt that cannot fit is refused before the work), and by its
tokens once it is (`generation_request`). Then max_tokens is clamped to what fits, the sampling
settings, logit bias and the prompt cache's namespace are read from the body, and a request for
several choices (OpenAI's `n`) becomes one generation each (`choice_generations`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from starlette.requests import Request

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.headers import CACHE_SCOPE_HEADER
from mlxhost.wire.inert import excerpt
from mlxhost.wire.parsing import too_long
from mlxhost.worker.api.serving import Serving
from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams, ThinkingBudget
from mlxhost.worker.engine.grammar_mask import Grammar

__all__ = [
    "GenerationBody",
    "GenerationSettings",
    "cache_namespace",
    "check_characters",
    "choice_generations",
    "generation_request",
]


def check_characters(service: Serving, param: str, chars: int) -> None:
    """Refuse, before encoding it, a prompt with more characters than its tokens could cover."""
    context, longest = service.engine.context_length, service.engine.max_token_chars
    if context is None or longest is None:
        return
    least = -(-chars // longest)  # no token stands for more than `longest` characters
    if least >= context:
        size = f"{chars} characters are at least {least} tokens (no token spans more than {longest})"
        raise too_long(param, size, context)


class GenerationBody(Protocol):
    """What `generation_request` reads of a body, whichever dialect it is in."""

    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...
    @property
    def presence_penalty(self) -> float | None: ...
    @property
    def frequency_penalty(self) -> float | None: ...
    @property
    def logit_bias(self) -> dict[str, float] | None: ...
    @property
    def cache_salt(self) -> str | None: ...
    def requested_max_tokens(self) -> int | None: ...
    def stop_strings(self) -> tuple[str, ...]: ...
    def logprobs_count(self) -> int | None: ...


@dataclass(frozen=True)
class GenerationSettings:
    """A body's generation settings under the names `generation_request` reads, for the
    dialects that name them otherwise (Messages, Responses); what a dialect lacks stays unset."""

    max_tokens: int | None
    max_tokens_param: str  # the body's own name for it, for errors
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: tuple[str, ...] = ()
    min_p: None = None
    seed: None = None
    repetition_penalty: None = None
    presence_penalty: None = None
    frequency_penalty: None = None
    logit_bias: None = None
    cache_salt: None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def stop_strings(self) -> tuple[str, ...]:
        return self.stop

    def logprobs_count(self) -> None:
        return None


def cache_namespace(request: Request, body: GenerationBody) -> tuple[str, str]:
    # The scope is set by whoever let the request in (the parent, or the in-process front door),
    # never by the client; the salt lets one caller keep its own requests apart too.
    return request.headers.get(CACHE_SCOPE_HEADER, ""), body.cache_salt or ""


def generation_request(
    body: GenerationBody,
    prompt: list[int],
    service: Serving,
    prompt_param: str,
    namespace: tuple[str, str] = ("", ""),
    grammar: Grammar | None = None,
    thinking_budget: ThinkingBudget | None = None,
) -> GenerationRequest:
    settings, context = service.settings, service.engine.context_length
    if not prompt:
        raise InvalidRequest(f"{prompt_param}: the prompt is empty", param=prompt_param)
    requested = body.requested_max_tokens()
    if context is not None and len(prompt) >= context:
        raise InvalidRequest(
            f"{prompt_param}: the prompt is {len(prompt)} tokens, and the model's context "
            f"is {context} tokens",
            param=prompt_param,
            code="context_length_exceeded",
        )
    # More than fits (agents ask for 32,000 of any model) is clamped to what fits, as llama.cpp,
    # LM Studio and Ollama do: the answer says so by its length stop, not by a refusal.
    max_tokens = min(requested or settings.default_max_tokens, settings.max_tokens_limit)
    if context is not None:
        max_tokens = min(max_tokens, context - len(prompt))
    if thinking_budget is not None and thinking_budget.tokens >= max_tokens:
        # A budget the answer cannot reach needs no processor: one row with a processor takes
        # the whole batch through mlx-lm's per-row logits path at every step.
        thinking_budget = None
    sampling = SamplingParams(
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        # Keeping the top k of a vocabulary no larger than k keeps everything: no filter at all.
        top_k=body.top_k if body.top_k and body.top_k < service.engine.vocab_size else 0,
        min_p=body.min_p or 0.0,
        seed=body.seed,
        repetition_penalty=body.repetition_penalty,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
    )
    return GenerationRequest(
        prompt=prompt,
        max_tokens=max_tokens,
        sampling=sampling,
        stop=body.stop_strings(),
        logprobs=body.logprobs_count(),
        cache_namespace=namespace,
        grammar=grammar,
        logit_bias=_logit_bias(body.logit_bias, service.engine.vocab_size),
        thinking_budget=thinking_budget,
    )


def _logit_bias(bias: dict[str, float] | None, vocab: int) -> tuple[tuple[int, float], ...]:
    out = []
    for key, value in (bias or {}).items():
        token = int(key) if key.isascii() and key.isdigit() and len(key) < 12 else -1
        if not 0 <= token < vocab:
            param = f"logit_bias.{excerpt(key)}"
            raise InvalidRequest(f"{param}: not a token id of this model (0..{vocab - 1})", param=param)
        out.append((token, value))
    return tuple(out)


def choice_generations(generation: GenerationRequest, n: int) -> list[GenerationRequest]:
    """One generation per choice. With a seed, choice i samples from seed + i: the choices differ,
    and the same request gives the same choices again."""
    seed = generation.sampling.seed
    choices = [generation]
    for i in range(1, n):
        # Only the first choice leaves its prompt in the prompt cache: n entries of one prompt
        # would push out the cache's other conversations and serve nothing the first cannot.
        sampling = generation.sampling if seed is None else replace(generation.sampling, seed=seed + i)
        choices.append(replace(generation, sampling=sampling, keep_cache=False))
    return choices
