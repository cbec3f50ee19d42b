"""POST /v1/chat/completions and /v1/completions: validate, generate, answer whole or streamed.

Nothing here waits on the event loop for the size of a request: a large body is sized up before
pydantic builds it (see schemas), a prompt that cannot fit is refused before the chat template
renders it, and rendering and encoding run in the engine's tokenizer thread.

A generation lives exactly as long as someone wants it. Streaming: the session is opened inside
the response body, which Starlette cancels when the client disconnects. Whole answers: a watcher
task waits for `http.disconnect` while the result is collected and cancels the collection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from mlxhost.config import Settings
from mlxhost.runtime.body import read_body as read_limited_body
from mlxhost.wire.chunks import DONE, KEEPALIVE, ChatFormat, CompletionFormat, Delta, TokenLogprob, sse
from mlxhost.wire.errors import APIError, InternalError, InvalidRequest, ServiceUnavailable
from mlxhost.wire.headers import CACHE_SCOPE_HEADER, SESSION_HEADER
from mlxhost.wire.inert import excerpt
from mlxhost.wire.openai import ChatCompletionRequest, CompletionRequest, parse_body, too_long
from mlxhost.worker.engine import Engine, EngineStopped
from mlxhost.worker.generation import GenerationRequest, SamplingParams

__all__ = ["Serving", "chat_completions", "completions", "shutting_down"]

Format = ChatFormat | CompletionFormat
CLIENT_CLOSED_REQUEST = 499  # nginx's code; nobody reads it, but the access log does


@dataclass
class Serving:
    """What the routes need, kept on `app.state.serving`."""

    engine: Engine
    settings: Settings
    model_id: str
    accepting: bool = True


def serving(request: Request) -> Serving:
    return request.app.state.serving  # type: ignore[no-any-return]


async def chat_completions(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    chat = parse_body(ChatCompletionRequest, await read_body(request, service), context)
    messages = [
        {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        for m in chat.messages
    ]
    # Each message renders to at least one token.
    if context is not None and len(messages) >= context:
        raise too_long("messages", f"{len(messages)} messages are at least {len(messages)} tokens", context)
    _check_characters(service, "messages", sum(len(m["content"]) for m in messages))
    prompt = await service.engine.encode_chat(messages)
    generation = _generation_request(chat, prompt, service, "messages", _namespace(request, chat))
    fmt = ChatFormat(service.model_id, len(prompt), include_usage=chat.wants_usage_chunk())
    return await _respond(request, service, generation, fmt, bool(chat.stream))


async def completions(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    completion = parse_body(CompletionRequest, await read_body(request, service), context)
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
    return await _respond(request, service, generation, fmt, bool(completion.stream))


def _check_characters(service: Serving, param: str, chars: int) -> None:
    """Refuse, before encoding it, a prompt with more characters than its tokens could cover."""
    context, longest = service.engine.context_length, service.engine.max_token_chars
    if context is None or longest is None:
        return
    least = -(-chars // longest)  # no token stands for more than `longest` characters
    if least >= context:
        size = f"{chars} characters are at least {least} tokens (no token spans more than {longest})"
        raise too_long(param, size, context)


def _namespace(request: Request, body: ChatCompletionRequest | CompletionRequest) -> tuple[str, str]:
    # The scope is set by whoever let the request in (the parent, or the in-process front door),
    # never by the client; the salt lets one caller keep its own requests apart too.
    return request.headers.get(CACHE_SCOPE_HEADER, ""), body.cache_salt or ""


async def read_body(request: Request, service: Serving) -> bytes:
    if not service.accepting:
        raise ServiceUnavailable("the server is shutting down", code="shutting_down")
    settings = service.settings
    return await read_limited_body(request, settings.max_body_bytes, settings.body_timeout)


def _generation_request(
    body: ChatCompletionRequest | CompletionRequest,
    prompt: list[int],
    service: Serving,
    prompt_param: str,
    namespace: tuple[str, str] = ("", ""),
) -> GenerationRequest:
    settings, context = service.settings, service.engine.context_length
    if not prompt:
        raise InvalidRequest(f"{prompt_param}: the prompt is empty", param=prompt_param)
    requested = body.requested_max_tokens()
    param = "max_completion_tokens" if getattr(body, "max_completion_tokens", None) else "max_tokens"
    if requested is not None and requested > settings.max_tokens_limit:
        raise InvalidRequest(
            f"{param}: {excerpt(requested)} is over this server's limit of {settings.max_tokens_limit}",
            param=param,
        )
    max_tokens = requested or settings.default_max_tokens
    if context is not None:
        if len(prompt) >= context:
            raise InvalidRequest(
                f"{prompt_param}: the prompt is {len(prompt)} tokens, and the model's context "
                f"is {context} tokens",
                param=prompt_param,
                code="context_length_exceeded",
            )
        if len(prompt) + max_tokens > context:
            if requested is not None:
                raise InvalidRequest(
                    f"{param}: the prompt ({len(prompt)} tokens) plus {param} ({excerpt(requested)}) is "
                    f"over the model's context of {context} tokens",
                    param=param,
                    code="context_length_exceeded",
                )
            max_tokens = context - len(prompt)
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
    )


async def _respond(
    request: Request, service: Serving, generation: GenerationRequest, fmt: Format, stream: bool
) -> Response:
    if stream:
        return StreamingResponse(
            _stream(service, generation, fmt, request.headers.get(SESSION_HEADER)),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
    return await _whole(request, service, generation, fmt, request.headers.get(SESSION_HEADER))


async def _stream(
    service: Serving, generation: GenerationRequest, fmt: Format, tag: str | None
) -> AsyncIterator[bytes]:
    try:
        async for frame in _frames(service, generation, fmt, tag):
            yield frame
    except EngineStopped:
        yield sse(shutting_down().body())
        yield DONE


async def _frames(
    service: Serving, generation: GenerationRequest, fmt: Format, tag: str | None
) -> AsyncIterator[bytes]:
    settings = service.settings
    ended = object()
    last_frame = float("-inf")
    async with service.engine.generate(generation, tag) as session:
        first = fmt.first_chunk()
        if first is not None:
            yield sse(first)
        while True:
            delta: Any = session.ready()
            if delta is None:
                # Comments keep proxies and clients from timing out during a long prefill.
                with anyio.move_on_after(settings.keepalive_seconds):
                    delta = await anext(session, ended)
            if delta is None:
                yield KEEPALIVE
                continue
            if delta is ended:
                return
            wait = last_frame + settings.stream_interval - anyio.current_time()
            if wait > 0 and delta.finish_reason is None:
                # Tokens that come faster than `stream_interval` go out as one frame: past a
                # hundred frames a second nobody sees the difference, but the CPU does.
                await session.wait_ended(wait)
                delta = session.merge_ready(delta)
            if delta.text or delta.logprobs:
                yield sse(fmt.content_chunk(delta))
                last_frame = anyio.current_time()
            if delta.finish_reason is None:
                continue
            if delta.finish_reason in ("stop", "length"):
                yield sse(fmt.finish_chunk(delta.finish_reason))
                if fmt.include_usage:
                    yield sse(fmt.usage_chunk(delta))
            else:
                yield sse(_failure(delta).body())
            yield DONE
            return


async def _whole(
    request: Request, service: Serving, generation: GenerationRequest, fmt: Format, tag: str | None
) -> Response:
    text: list[str] = []
    logprobs: list[TokenLogprob] | None = [] if generation.logprobs is not None else None
    final: Delta | None = None
    async with service.engine.generate(generation, tag) as session:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, request, tg.cancel_scope)
            async for delta in session:
                text.append(delta.text)
                if logprobs is not None and delta.logprobs:
                    logprobs.extend(delta.logprobs)
                final = delta if delta.finish_reason else final
            tg.cancel_scope.cancel()
    if final is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    if final.finish_reason not in ("stop", "length"):
        raise _failure(final)
    return JSONResponse(fmt.whole("".join(text), logprobs, final))


async def _cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def shutting_down() -> ServiceUnavailable:
    return ServiceUnavailable(
        "the server is shutting down; the generation was stopped", code="shutting_down"
    )


def _failure(final: Delta) -> APIError:
    if final.finish_reason == "cancelled":
        if final.error == "shutdown":
            return shutting_down()
        return ServiceUnavailable(f"the generation was cancelled ({final.error})", code="cancelled")
    return InternalError(final.error or "the generation failed")
