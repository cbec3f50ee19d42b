"""Request bodies of the OpenAI-compatible routes, validated strictly.

Pydantic does the checking and also gives the JSON Schema that /openapi.json serves. Every field
we do not implement is refused by name (`extra="forbid"`) rather than silently ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InvalidRequest

__all__ = ["ChatCompletionRequest", "CompletionRequest", "parse_body"]

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
StopString = Annotated[str, Field(min_length=1, max_length=512)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class TextFormat(_Strict):
    type: Literal["text"]


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | Annotated[list[TextPart], Field(min_length=1)]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class _Generation(_Strict):
    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Probability | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=4)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Field(ge=0.01, le=10.0)] | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    n: Literal[1] | None = None

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def wants_usage_chunk(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Generation):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: TextFormat | None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def logprobs_count(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs:
                raise InvalidRequest("top_logprobs needs logprobs set to true", param="top_logprobs")
            return None
        return self.top_logprobs or 0


class CompletionRequest(_Generation):
    prompt: str | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def logprobs_count(self) -> int | None:
        return self.logprobs


_FIELD_NAMES = {
    name
    for model in (ChatCompletionRequest, CompletionRequest, ChatMessage, TextPart, StreamOptions)
    for name in model.model_fields
}


T = TypeVar("T", bound=BaseModel)


def parse_body(model: type[T], body: bytes) -> T:
    """Validate a JSON body, turning the first problem into a 400 that names the field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        raise _invalid_request(exc) from None


def _invalid_request(exc: ValidationError) -> InvalidRequest:
    errors = exc.errors(include_url=False)
    # Of a union's per-member errors, the deepest one is about the member the client meant.
    first = max(
        (e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]), key=lambda e: len(e["loc"])
    )
    if first["type"] == "json_invalid":
        return InvalidRequest(f"the body is not valid JSON: {first['msg']}", code="invalid_json")
    if first["type"] == "model_type" and not first["loc"]:
        return InvalidRequest("the body must be a JSON object", code="invalid_json")
    param = _param(first["loc"])
    if first["type"] == "extra_forbidden":
        parent = _param(first["loc"][:-1])
        param = f"{parent}.{first['loc'][-1]}" if parent else str(first["loc"][-1])
        return InvalidRequest(
            f"unsupported parameter '{param}': mlxhost does not implement it",
            param=param,
            code="unsupported_parameter",
        )
    if first["type"] == "missing":
        return InvalidRequest(f"missing required parameter '{param}'", param=param, code="missing_parameter")
    # A union reports one error per member; say all of them for the same field.
    messages = list(dict.fromkeys(e["msg"] for e in errors if _param(e["loc"]) == param))
    return InvalidRequest(f"{param}: {'; or '.join(messages)}", param=param)


def _param(loc: tuple[Any, ...]) -> str:
    """('messages', 0, 'str', 'content') -> 'messages[0].content', dropping union member tags."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _FIELD_NAMES:
            out += f".{part}" if out else part
    return out
