"""POST /v1/rerank (and /rerank): the Cohere/Jina shape that vLLM and llama.cpp serve.

A decoder reranker (Qwen3-Reranker) judges each document in a prompt of its own, rendered by the
model's chat template: a system turn that asks for "yes" or "no", a user turn holding the
instruction, the query and the document, and the assistant's turn opened with thinking off. The
score is the probability of "yes" against "no" as the next token. The prompts run in the engine's
pooled passes, many documents to one pass; results come back sorted by score, best first.
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxhost.wire.embeddings import RerankRequest
from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.parsing import parse_body
from mlxhost.worker.api.answer import CLIENT_CLOSED_REQUEST
from mlxhost.worker.api.pooling import check_task, fit, run_pooled
from mlxhost.worker.api.serving import read_body, serving

__all__ = ["SYSTEM", "rerank", "rerank_conversation"]

# Qwen3-Reranker's, from its model card: the model was trained on exactly these words.
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


NO_THINKING = {"enable_thinking": False}


async def _too_long(
    tokenizer: Any, query: str, instruction: str, instructed: bool, fixed: int, context: int
) -> InvalidRequest:
    """The 400 for a query or instruction that leaves no room for any document, naming the longer."""
    query_tokens = len(await tokenizer.encode(query))
    instruction_tokens = len(await tokenizer.encode(instruction))
    param, tokens = ("instruction", instruction_tokens) if instructed and instruction_tokens > query_tokens else (
        "query", query_tokens
    )
    return InvalidRequest(
        f"{param} is {tokens} tokens: with the rest of the reranking prompt every document's prompt "
        f"would be at least {fixed} tokens, and the model's context is {context} tokens; shorten the "
        f"{param} (rerank does not truncate)",
        param=param,
        code="context_length_exceeded",
    )


def rerank_conversation(instruction: str, query: str, document: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"},
    ]


async def rerank(request: Request) -> Response:
    service = serving(request)
    body = parse_body(RerankRequest, await read_body(request, service))
    check_task(service, "rerank")
    tokenizer = service.engine.tokenizer
    documents = body.texts()
    instruction = body.instruction or DEFAULT_INSTRUCTION
    # What every document's prompt holds besides the document, checked before a document is
    # tokenized: a query too long for the context is the query's fault, said in one step, not
    # after a thousand documents were encoded.
    fixed = len((await tokenizer.render_many([rerank_conversation(instruction, body.query, "")], NO_THINKING))[0])
    context = service.engine.context_length
    if context is not None and fixed >= context:
        raise await _too_long(tokenizer, body.query, instruction, body.instruction is not None, fixed, context)
    conversations = [rerank_conversation(instruction, body.query, d) for d in documents]
    prompts = await tokenizer.render_many(conversations, NO_THINKING)
    for at, ids in enumerate(prompts):
        if context is not None and len(ids) > context:
            # No truncate here: a prompt cut to fit would lose its question, so the advice is the
            # document's own size.
            raise InvalidRequest(
                f"documents[{at}] is about {len(ids) - fixed} tokens, and beside the query and "
                f"instruction ({fixed} tokens of every prompt) at most {context - fixed} fit the "
                f"model's context of {context} tokens: shorten it (rerank does not truncate)",
                param=f"documents[{at}]",
                code="context_length_exceeded",
            )
    prompts = fit(service, prompts, "documents", truncate=False)
    yes_no = (await tokenizer.token_id("yes"), await tokenizer.token_id("no"))
    work = await run_pooled(request, service, "score", prompts, yes_no=yes_no)
    if work is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    ranked = sorted(range(len(documents)), key=lambda i: -work.results[i])
    if body.top_n is not None:
        ranked = ranked[: body.top_n]
    results: list[dict[str, Any]] = []
    for index in ranked:
        result: dict[str, Any] = {"index": index, "relevance_score": float(work.results[index])}
        if body.return_documents is not False:
            result["document"] = {"text": documents[index]}
        results.append(result)
    usage = {"prompt_tokens": work.tokens, "total_tokens": work.tokens}
    return JSONResponse(
        {"id": f"rerank-{uuid.uuid4().hex}", "model": service.model_id, "results": results, "usage": usage}
    )
