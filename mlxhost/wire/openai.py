"""Request bodies of the OpenAI-compatible routes, validated strictly (parsing.py).

Pydantic does the checking and also gives the JSON Schema that /openapi.json serves. The models
declare only what mlxhost implements (`extra="forbid"`); a field they lack is skipped and named
when an official SDK defines it, and refused by name otherwise (fields.py has the policy).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.parsing import MAX_MESSAGES, MAX_STOP, register_schema

__all__ = ["ChatCompletionRequest", "CompletionRequest"]

MAX_TOOLS = 128
MAX_CHOICES = 8  # `n`: choices are sequences of one batch, so a few cost little more than one

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
StopString = Annotated[str, Field(min_length=1, max_length=512)]
# A request may ask for more than fits (it gets what fits, see worker/api/request.py), but not for a
# number no count of tokens could be.
MaxTokens = Annotated[int, Field(ge=1, le=2**31 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool | None = None


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class TextFormat(_Strict):
    type: Literal["text"]


class JSONObjectFormat(_Strict):
    type: Literal["json_object"]


FunctionName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
JSONSchema = dict[str, Any]


class JSONSchemaSpec(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    name: FunctionName
    description: str | None = None
    schema_: JSONSchema | None = Field(default=None, alias="schema")
    strict: bool | None = None


class JSONSchemaFormat(_Strict):
    type: Literal["json_schema"]
    json_schema: JSONSchemaSpec


class FunctionCall(_Strict):
    name: FunctionName
    arguments: str


class ToolCallItem(_Strict):
    id: Annotated[str, Field(min_length=1, max_length=256)]
    type: Literal["function"]
    function: FunctionCall


class FunctionDef(_Strict):
    name: FunctionName
    description: str | None = None
    parameters: JSONSchema | None = None
    strict: bool | None = None


class ToolDef(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: FunctionName


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: (
        str | Annotated[list[TextPart], Field(min_length=1, max_length=MAX_MESSAGES, fail_fast=True)] | None
    ) = None
    name: str | None = None
    tool_calls: Annotated[list[ToolCallItem], Field(max_length=MAX_TOOLS)] | None = None  # assistant
    tool_call_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None  # tool
    # The reasoning of an earlier assistant turn, as this server (and others) answered it.
    reasoning_content: str | None = None
    reasoning: str | None = None

    @model_validator(mode="after")
    def _fits_role(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("content is required, except in an assistant message with tool_calls")
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only an assistant message has tool_calls")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class _Generation(_Strict):
    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    max_tokens: MaxTokens | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    min_p: Probability | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP, fail_fast=True)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: Annotated[float, Field(ge=0.01, le=10.0)] | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    n: Annotated[int, Field(ge=1, le=MAX_CHOICES)] | None = None
    # Token id (as a string, as OpenAI has it) -> a bias added to its logit.
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    # Keeps this request's prompt-cache entries apart from those of requests without the same salt.
    cache_salt: Annotated[str, Field(min_length=1, max_length=256)] | None = None

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def wants_usage_chunk(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(_Generation):
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES, fail_fast=True)]
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    response_format: Annotated[
        TextFormat | JSONObjectFormat | JSONSchemaFormat, Field(discriminator="type")
    ] | None = None
    tools: Annotated[list[ToolDef], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def logprobs_count(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs:
                raise InvalidRequest("top_logprobs needs logprobs set to true", param="top_logprobs")
            return None
        return self.top_logprobs or 0


class CompletionRequest(_Generation):
    prompt: str | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1, fail_fast=True)]
    logprobs: Annotated[int, Field(ge=0, le=20)] | None = None

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def logprobs_count(self) -> int | None:
        return self.logprobs


register_schema(
    [
        ChatCompletionRequest, CompletionRequest, ChatMessage, TextPart, StreamOptions, ToolDef, FunctionDef,
        NamedToolChoice, NamedFunction, ToolCallItem, FunctionCall, JSONSchemaFormat, JSONSchemaSpec,
        JSONObjectFormat,
    ],  # fmt: skip
    nested={
        (ChatCompletionRequest, "messages"): ChatMessage,
        (ChatCompletionRequest, "stream_options"): StreamOptions,
        (CompletionRequest, "stream_options"): StreamOptions,
        (ChatMessage, "content"): TextPart,
        (ChatMessage, "tool_calls"): ToolCallItem,
        (ToolCallItem, "function"): FunctionCall,
        (ChatCompletionRequest, "tools"): ToolDef,
        (ToolDef, "function"): FunctionDef,
        (ChatCompletionRequest, "tool_choice"): NamedToolChoice,
        (NamedToolChoice, "function"): NamedFunction,
    },
    lists=["messages", "content", "stop", "prompt", "tools", "tool_calls"],
    schemas=["parameters", "schema", "response_format", "logit_bias"],
    dialects={ChatCompletionRequest: "chat", CompletionRequest: "completions"},
    keyed=["logit_bias"],  # a map whose keys name the entry an error is about
)
