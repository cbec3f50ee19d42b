"""POST /v1/chat/completions and /v1/completions: validate, translate, generate, answer.

Nothing here waits on the event loop for the size of a request: a large body is sized up before
pydantic builds it (see wire/openai.py), a prompt that cannot fit is refused before the chat
template renders it, and rendering and encoding run in the engine's tokenizer thread. Running the
generation and answering is answer.py's, for every dialect; the conversation pipeline (tools,
grammar, reasoning) is conversation.py's. Both routes take `n`: that many choices, one generation
each, run together in the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from mlxhost.runtime.body import read_body as read_limited_body
from mlxhost.wire.chunks import DONE, AnswerFinish, ChatFormat, CompletionFormat, Delta, sse
from mlxhost.wire.errors import APIError, InvalidRequest, ServiceUnavailable
from mlxhost.wire.fields import Skipped
from mlxhost.wire.headers import CACHE_SCOPE_HEADER
from mlxhost.wire.inert import excerpt
from mlxhost.wire.openai import (
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    JSONObjectFormat,
    JSONSchemaFormat,
)
from mlxhost.wire.parsing import parse_body, too_long
from mlxhost.worker.api.answer import Answer, Serving, respond_choices, shutting_down
from mlxhost.worker.api.conversation import (
    Conversation,
    OutputFormat,
    Tool,
    ToolChoice,
    effort_budget,
    prepare,
    tool_call_message,
)
from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams, ThinkingBudget
from mlxhost.worker.engine.grammar import Grammar
from mlxhost.worker.engine.output import Output

__all__ = ["Serving", "chat_completions", "completions", "serving", "shutting_down"]


def serving(request: Request) -> Serving:
    return request.app.state.serving  # type: ignore[no-any-return]


async def chat_completions(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    skipped = Skipped()
    chat = parse_body(ChatCompletionRequest, await read_body(request, service), context, skipped)
    # Each message renders to at least one token.
    if context is not None and len(chat.messages) >= context:
        count = len(chat.messages)
        raise too_long("messages", f"{count} messages are at least {count} tokens", context)
    _check_characters(service, "messages", sum(len(m.text()) for m in chat.messages))
    prepared = await prepare(service.engine, chat_conversation(chat))
    generation = _generation_request(
        chat,
        prepared.prompt,
        service,
        "messages",
        _namespace(request, chat),
        grammar=prepared.grammar,
        thinking_budget=prepared.thinking_budget,
    )
    fmt = ChatFormat(service.model_id, len(prepared.prompt), include_usage=chat.wants_usage_chunk())
    n = chat.n or 1
    parsers = [prepared.parser(service.engine) for _ in range(n)]
    response = await respond_choices(
        request, service, _choices(generation, n), ChatWriter(fmt, n), parsers, bool(chat.stream)
    )
    response.headers.update(skipped.headers())
    return response


def _choices(generation: GenerationRequest, n: int) -> list[GenerationRequest]:
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


def chat_conversation(chat: ChatCompletionRequest) -> Conversation:
    """A Chat Completions body as the shared pipeline takes it."""
    tools = tuple(
        Tool(
            t.function.name,
            t.function.description,
            t.function.parameters,
            strict=bool(t.function.strict),
            param=f"tools[{i}].function.parameters",
        )
        for i, t in enumerate(chat.tools or ())
    )
    choice = chat.tool_choice
    if choice is None:
        tool_choice = ToolChoice("auto")
    elif isinstance(choice, str):
        tool_choice = ToolChoice(choice)
    else:
        tool_choice = ToolChoice("named", choice.function.name)
    fmt = chat.response_format
    output_format = None
    if isinstance(fmt, JSONObjectFormat):
        output_format = OutputFormat("json_object", "response_format")
    elif isinstance(fmt, JSONSchemaFormat):
        schema = fmt.json_schema.schema_ if fmt.json_schema.schema_ is not None else {"type": "object"}
        strict = bool(fmt.json_schema.strict)
        output_format = OutputFormat("json_schema", "response_format.json_schema.schema", schema, strict)
    template_args: dict[str, Any] = {}
    thinking = None
    if chat.reasoning_effort is not None:
        template_args["reasoning_effort"] = chat.reasoning_effort
        thinking = chat.reasoning_effort != "none"
    return Conversation(
        messages=[_template_message(m) for m in chat.messages],
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=chat.parallel_tool_calls is not False,
        output_format=output_format,
        thinking=thinking,
        thinking_budget=effort_budget(chat.reasoning_effort),
        template_args=template_args,
    )


def _template_message(message: ChatMessage) -> dict[str, Any]:
    role = "system" if message.role == "developer" else message.role
    out: dict[str, Any] = {"role": role, "content": message.text()}
    if message.tool_calls:
        out["tool_calls"] = tool_call_message(
            [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
        )
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None and role == "tool":
        out["name"] = message.name
    reasoning = message.reasoning_content or message.reasoning
    if reasoning and role == "assistant":
        out["reasoning_content"] = reasoning
    return out


class _OpenAIStreamEnd:
    """How both OpenAI formats end a choice and a stream: a finish chunk per choice, then usage
    (when asked for) and `[DONE]`; a failure is an error frame and `[DONE]`."""

    fmt: ChatFormat | CompletionFormat

    def finished(self, index: int, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        return [sse(self.fmt.finish_chunk(finish, index))]

    def closing(self, finals: Sequence[Delta]) -> Iterable[bytes]:
        if self.fmt.include_usage:
            return [sse(self.fmt.usage_chunk(*finals)), DONE]
        return [DONE]

    def failure(self, error: APIError) -> Iterable[bytes]:
        return [sse(error.body()), DONE]


@dataclass
class ChatWriter(_OpenAIStreamEnd):
    fmt: ChatFormat
    n: int = 1  # choices
    _calls: dict[int, int] = field(default_factory=dict)  # tool calls streamed so far, by choice

    def opening(self) -> Iterable[bytes]:
        return [sse(self.fmt.first_chunk(index)) for index in range(self.n)]

    def output(self, index: int, out: Output, delta: Delta) -> Iterable[bytes]:
        frames = []
        if out.reasoning:
            frames.append(sse(self.fmt.reasoning_chunk(out.reasoning, index)))
        if out.content or delta.logprobs:
            frames.append(sse(self.fmt.content_chunk(delta, out.content, index)))
        for call in out.tool_calls:
            # Each call has its index among its choice's calls.
            calls = self._calls.get(index, 0)
            frames += [sse(chunk) for chunk in self.fmt.tool_call_chunks(calls, call, index)]
            self._calls[index] = calls + 1
        return frames

    def whole(self, answers: Sequence[Answer]) -> dict[str, Any]:
        choices = [
            self.fmt.whole_choice(
                index,
                answer.output.content,
                answer.logprobs,
                answer.final,
                reasoning=answer.output.reasoning,
                tool_calls=tuple(answer.output.tool_calls),
                finish_reason=answer.finish,
            )
            for index, answer in enumerate(answers)
        ]
        return self.fmt.whole_body(choices, *(answer.final for answer in answers))


@dataclass
class CompletionWriter(_OpenAIStreamEnd):
    fmt: CompletionFormat

    def opening(self) -> Iterable[bytes]:
        return []

    def output(self, index: int, out: Output, delta: Delta) -> Iterable[bytes]:
        return [sse(self.fmt.content_chunk(delta, index))]

    def whole(self, answers: Sequence[Answer]) -> dict[str, Any]:
        choices = [
            self.fmt.text_choice(index, answer.output.content, answer.logprobs, answer.final.finish_reason)
            for index, answer in enumerate(answers)
        ]
        return self.fmt.whole_body(choices, *(answer.final for answer in answers))


async def completions(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    skipped = Skipped()
    completion = parse_body(CompletionRequest, await read_body(request, service), context, skipped)
    if isinstance(completion.prompt, str):
        _check_characters(service, "prompt", len(completion.prompt))
        prompt = await service.engine.encode(completion.prompt)
    else:
        prompt = list(completion.prompt)
        if context is not None and len(prompt) >= context:
            raise too_long("prompt", f"{len(prompt)} token ids", context)
        vocab = service.engine.vocab_size
        if max(prompt) >= vocab:
            i, token = next((i, t) for i, t in enumerate(prompt) if t >= vocab)
            raise InvalidRequest(
                f"prompt[{i}]: token id {excerpt(token)} is not in the vocabulary (0..{vocab - 1})",
                param=f"prompt[{i}]",
            )
    generation = _generation_request(completion, prompt, service, "prompt", _namespace(request, completion))
    fmt = CompletionFormat(service.model_id, len(prompt), include_usage=completion.wants_usage_chunk())
    n = completion.n or 1
    response = await respond_choices(
        request, service, _choices(generation, n), CompletionWriter(fmt), [None] * n, bool(completion.stream)
    )
    response.headers.update(skipped.headers())
    return response


def _check_characters(service: Serving, param: str, chars: int) -> None:
    """Refuse, before encoding it, a prompt with more characters than its tokens could cover."""
    context, longest = service.engine.context_length, service.engine.max_token_chars
    if context is None or longest is None:
        return
    least = -(-chars // longest)  # no token stands for more than `longest` characters
    if least >= context:
        size = f"{chars} characters are at least {least} tokens (no token spans more than {longest})"
        raise too_long(param, size, context)


class GenerationBody(Protocol):
    """What `_generation_request` reads of a body, whichever dialect it is in."""

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
    """A body's generation settings under the names `_generation_request` reads, for the
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


def _namespace(request: Request, body: GenerationBody) -> tuple[str, str]:
    # The scope is set by whoever let the request in (the parent, or the in-process front door),
    # never by the client; the salt lets one caller keep its own requests apart too.
    return request.headers.get(CACHE_SCOPE_HEADER, ""), body.cache_salt or ""


async def read_body(request: Request, service: Serving) -> bytes:
    if not service.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    settings = service.settings
    return await read_limited_body(request, settings.max_body_bytes, settings.body_timeout)


def _generation_request(
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
