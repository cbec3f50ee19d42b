"""What the embeddings and rerank routes share: the task check, inputs made token lists that
fit, and running a request's inputs in the engine's pooled passes until done or the client leaves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
from starlette.requests import Request
from starlette.responses import Response

from mlxhost.wire.embeddings import MAX_REQUEST_TOKENS, task_refused
from mlxhost.wire.errors import InternalError, InvalidRequest
from mlxhost.wire.headers import SESSION_HEADER
from mlxhost.worker.api.serving import Serving, cancel_on_disconnect, read_body, serving
from mlxhost.worker.engine.pooled_work import Kind, PooledWork

__all__ = ["check_task", "fit", "not_served", "run_pooled", "token_lists"]


def check_task(service: Serving, task: str) -> None:
    """A 400 naming `model` when the model does not serve `task`."""
    if task not in service.kind.tasks:
        raise task_refused(service.model_id, task, service.kind.tasks)


def not_served(task: str) -> Callable[[Request], Awaitable[Response]]:
    """The route of a task the model does not serve: the body read, then the 400 naming `model`."""

    async def refuse(request: Request) -> Response:
        service = serving(request)
        await read_body(request, service)
        check_task(service, task)
        raise AssertionError("unreachable: the model serves the task")

    return refuse


async def token_lists(service: Serving, texts: Sequence[str], prefix: str = "") -> list[list[int]]:
    """Each text encoded (in the tokenizer thread), `prefix` before it."""
    return await service.engine.tokenizer.encode_many([prefix + text for text in texts])


def fit(service: Serving, inputs: list[list[int]], param: str, truncate: bool) -> list[list[int]]:
    """The inputs checked against the vocabulary, the context and the request's token budget;
    cut to the context where `truncate` asks for it, refused by name otherwise."""
    engine = service.engine
    vocab, context = engine.vocab_size, engine.context_length
    for at, ids in enumerate(inputs):
        if not ids:
            raise InvalidRequest(f"{param}[{at}] encodes to no tokens", param=param)
        if max(ids) >= vocab:
            raise InvalidRequest(
                f"{param}[{at}]: token id {max(ids)} is not in the model's vocabulary (0 to {vocab - 1})",
                param=param,
            )
        if context is not None and len(ids) > context:
            if truncate:
                inputs[at] = ids[:context]
                continue
            raise InvalidRequest(
                f"{param}[{at}] is {len(ids)} tokens, and the model's context is {context} tokens "
                "(send truncate: true to cut it to fit)",
                param=param,
                code="context_length_exceeded",
            )
    total = sum(len(ids) for ids in inputs)
    if total > MAX_REQUEST_TOKENS:
        raise InvalidRequest(
            f"{param}: {total} tokens in all, over the limit of {MAX_REQUEST_TOKENS} a request",
            param=param,
        )
    return inputs


async def run_pooled(
    request: Request,
    service: Serving,
    kind: Kind,
    inputs: list[list[int]],
    pooling: str = "last",
    yes_no: tuple[int, int] | None = None,
) -> PooledWork | None:
    """The inputs' results, or None when the client left first (its inputs not yet in a pass
    are dropped). A worker shutting down or failing under the work raises its error."""
    work = PooledWork(kind, inputs, pooling, yes_no, tag=request.headers.get(SESSION_HEADER))
    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_disconnect, request, tg.cancel_scope)
        await service.engine.pool(work)
        tg.cancel_scope.cancel()
    if not work.finished or work.cancel_reason is not None:
        return None
    if work.error is not None:
        raise InternalError(work.error)
    return work
