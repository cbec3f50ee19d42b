"""POST /v1/completions: OpenAI's legacy Completions, a prompt (text or token ids) continued as is.

No chat template, tools or grammar: the prompt is encoded (or its ids checked against the
vocabulary) and generated from, `n` choices together, written back by `CompletionWriter`
(openai_writer.py).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mlxhost.wire.chunks import CompletionFormat
from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.fields import Skipped
from mlxhost.wire.inert import excerpt
from mlxhost.wire.openai import CompletionRequest
from mlxhost.wire.parsing import parse_body, too_long
from mlxhost.worker.api.answer import respond_choices
from mlxhost.worker.api.openai_writer import CompletionWriter
from mlxhost.worker.api.request import (
    cache_namespace,
    check_characters,
    choice_generations,
    generation_request,
)
from mlxhost.worker.api.serving import read_body, serving

__all__ = ["completions"]


async def completions(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    skipped = Skipped()
    completion = parse_body(CompletionRequest, await read_body(request, service), context, skipped)
    if isinstance(completion.prompt, str):
        check_characters(service, "prompt", len(completion.prompt))
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
    namespace = cache_namespace(request, completion)
    generation = generation_request(completion, prompt, service, "prompt", namespace)
    fmt = CompletionFormat(service.model_id, len(prompt), include_usage=completion.wants_usage_chunk())
    n = completion.n or 1
    response = await respond_choices(
        request,
        service,
        choice_generations(generation, n),
        CompletionWriter(fmt),
        [None] * n,
        bool(completion.stream),
    )
    response.headers.update(skipped.headers())
    return response
