"""Request bodies of the pooled routes: `/v1/embeddings` (OpenAI's) and `/v1/rerank` (the
Cohere/Jina shape that vLLM and llama.cpp serve too), validated strictly as every other body is.

Neither dialect's SDK table applies: a field these models lack is refused by name. The limits are
OpenAI's (2,048 inputs a request, 300,000 tokens over all of them); each input must also fit the
model's context, which only the worker knows.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.parsing import register_schema

__all__ = [
    "MAX_DOCUMENTS",
    "MAX_INPUTS",
    "MAX_REQUEST_TOKENS",
    "EmbeddingRequest",
    "RerankDocument",
    "RerankRequest",
    "task_refused",
]

MAX_INPUTS = 2048  # OpenAI's: inputs in one embeddings request
MAX_REQUEST_TOKENS = 300_000  # OpenAI's: tokens over all of one request's inputs
MAX_DOCUMENTS = 1000  # Cohere's: documents in one rerank request

# The route a task is asked for by, for an error that says where to go instead.
TASK_ROUTES = {"generate": "/v1/chat/completions", "embed": "/v1/embeddings", "rerank": "/v1/rerank"}

TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_REQUEST_TOKENS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class EmbeddingRequest(_Strict):
    # A string, strings, token ids, or lists of token ids: OpenAI's four forms.
    input: str | list[str] | TokenIds | list[TokenIds]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None
    # mlxhost's: "query" puts the model's query instruction before each input (Qwen3-Embedding's
    # card asks for it on queries, not on the documents they are compared with).
    input_type: Literal["query", "document"] | None = None
    # mlxhost's (text-embeddings-inference's name): cut an input longer than the context to fit,
    # instead of refusing it. Off unless asked: a silently cut input is a wrong vector.
    truncate: bool | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _at_most(cls, value: object) -> object:
        # Before the union: its members' errors would bury this one.
        if isinstance(value, list) and len(value) > MAX_INPUTS and not all(isinstance(v, int) for v in value):
            raise ValueError(f"at most {MAX_INPUTS} inputs in one request, not {len(value)}")
        return value

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list of texts or a list of token lists; a 400 naming the empty one."""
        given = self.input
        if isinstance(given, str):
            items: list[str] | list[list[int]] = [given]
        elif given and all(isinstance(item, int) for item in given):
            items = [given]  # type: ignore[list-item]  # one list of token ids
        else:
            items = given  # type: ignore[assignment]
        if not items:
            raise InvalidRequest("input must not be an empty list", param="input")
        for at, item in enumerate(items):
            if len(item) == 0:
                where = "input" if isinstance(given, str) else f"input[{at}]"
                raise InvalidRequest(f"{where} must not be empty", param="input")
        return items


class RerankDocument(_Strict):
    text: str


class RerankRequest(_Strict):
    model: str | None = None
    query: Annotated[str, Field(min_length=1)]
    documents: Annotated[list[str | RerankDocument], Field(min_length=1, max_length=MAX_DOCUMENTS)]
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool | None = None  # vLLM's default: true
    # mlxhost's: the task the reranker judges relevance for (Qwen3-Reranker's "Instruct").
    instruction: Annotated[str, Field(min_length=1)] | None = None

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]


register_schema(
    [EmbeddingRequest, RerankRequest, RerankDocument],
    nested={(RerankRequest, "documents"): RerankDocument},
    lists=["input", "documents"],
    token_lists=["input"],
)


def task_refused(model: str, task: str, tasks: tuple[str, ...]) -> InvalidRequest:
    """The 400, naming `model`, for a model asked for a task it does not serve."""
    serves = " and ".join(TASK_ROUTES[t] for t in tasks)
    return InvalidRequest(
        f"the model '{model}' does not serve {TASK_ROUTES[task]}: it serves {serves}",
        param="model",
        code="model_not_supported",
    )
