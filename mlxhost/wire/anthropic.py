"""Request bodies of the Anthropic Messages routes (POST /v1/messages, /v1/messages/count_tokens).

Shaped as Anthropic's API reference (and its SDK's `types/`) has them, validated as strictly as
the OpenAI bodies in openai.py: a field mlxhost does not implement is refused by name.

Content blocks and tools that Anthropic has but mlxhost cannot serve (images, documents, its
server tools) still parse, as `UnsupportedBlock` and `ServerTool`, so that the worker can refuse
a block by name and position ("messages[0].content[1]: image blocks are not supported") and skip
a server tool by name, instead of pydantic listing every type the one at hand is not. Fields the
models lack but the SDK defines (`cache_control`: mlxhost's prompt cache needs no breakpoints;
`service_tier`, `speed`, `inference_geo`: there is one local model) are skipped and named
(fields.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from mlxhost.wire.openai import MAX_TOOLS, JSONSchema, MaxTokens, StopString
from mlxhost.wire.parsing import MAX_MESSAGES, register_schema

__all__ = [
    "ClearThinking",
    "ClearToolUses",
    "ContextManagement",
    "CountTokensRequest",
    "CustomTool",
    "MessagesRequest",
    "RedactedThinkingBlock",
    "ServerTool",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "ToolUses",
    "UnsupportedBlock",
    "UnsupportedEdit",
]

# Anthropic sets no small limit; each stop string is searched for at every token.
MAX_STOP_SEQUENCES = 16

ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")]
ToolUseId = Annotated[str, Field(min_length=1, max_length=256)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TextBlock(_Strict):
    type: Literal["text"]
    text: str


class UnsupportedBlock(BaseModel):
    """A content block of a type mlxhost does not serve (image, document, search_result, ...)."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: str


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: ToolUseId
    name: Annotated[str, Field(min_length=1, max_length=256)]
    input: dict[str, Any]


def _tool_result_part(value: Any) -> str:
    return "text_block" if _type_of(value) == "text" else "unsupported_block"


ToolResultPart = Annotated[
    Annotated[TextBlock, Tag("text_block")] | Annotated[UnsupportedBlock, Tag("unsupported_block")],
    Discriminator(_tool_result_part),
]


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: ToolUseId
    content: str | Annotated[list[ToolResultPart], Field(max_length=MAX_MESSAGES)] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str


# Tags are not field names, so that an error's `param` leaves them out (see parsing._param).
_BLOCK_TAGS = {
    "text": "text_block",
    "tool_use": "tool_use_block",
    "tool_result": "tool_result_block",
    "thinking": "thinking_block",
    "redacted_thinking": "redacted_thinking_block",
}


def _type_of(value: Any) -> Any:
    return value.get("type") if isinstance(value, dict) else getattr(value, "type", None)


def _block(value: Any) -> str:
    kind = _type_of(value)
    return _BLOCK_TAGS.get(kind, "unsupported_block") if isinstance(kind, str) else "unsupported_block"


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text_block")]
    | Annotated[ToolUseBlock, Tag("tool_use_block")]
    | Annotated[ToolResultBlock, Tag("tool_result_block")]
    | Annotated[ThinkingBlock, Tag("thinking_block")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking_block")]
    | Annotated[UnsupportedBlock, Tag("unsupported_block")],
    Discriminator(_block),
]


class InputMessage(_Strict):
    # A `system` turn mid-conversation (the mid-conversation-system beta, as Claude Code sends it).
    role: Literal["user", "assistant", "system"]
    content: str | Annotated[list[ContentBlock], Field(min_length=1, max_length=MAX_MESSAGES, fail_fast=True)]


class CustomTool(_Strict):
    type: Literal["custom"] | None = None
    name: ToolName
    description: str | None = None
    input_schema: JSONSchema


class ServerTool(BaseModel):
    """One of Anthropic's server tools (web search, code execution, ...), which mlxhost does not run."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: str


def _tool(value: Any) -> str:
    return "custom_tool" if _type_of(value) in (None, "custom") else "server_tool"


ToolDefinition = Annotated[
    Annotated[CustomTool, Tag("custom_tool")] | Annotated[ServerTool, Tag("server_tool")],
    Discriminator(_tool),
]


class ToolChoiceAuto(_Strict):
    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(_Strict):
    type: Literal["any"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(_Strict):
    type: Literal["tool"]
    name: ToolName
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(_Strict):
    type: Literal["none"]


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone, Field(discriminator="type")
]


class ThinkingEnabled(_Strict):
    type: Literal["enabled"]
    # How long the model may think is not something a chat template can bound: accepted, not enforced.
    budget_tokens: Annotated[int, Field(ge=1)]


class ThinkingDisabled(_Strict):
    type: Literal["disabled"]


class ThinkingAdaptive(_Strict):
    type: Literal["adaptive"]  # the model decides: as its chat template has it


Thinking = Annotated[ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive, Field(discriminator="type")]


class Metadata(_Strict):
    user_id: Annotated[str, Field(max_length=512)] | None = None  # kept in the session's record


class ThinkingTurns(_Strict):
    type: Literal["thinking_turns"]
    value: Annotated[int, Field(ge=0)]


class ClearThinking(_Strict):
    """Drop the thinking of all but the last `keep` assistant turns before the prompt renders."""

    type: Literal["clear_thinking_20251015"]
    keep: Literal["all"] | ThinkingTurns | None = None  # None: Anthropic's default, the last turn's


class InputTokens(_Strict):
    type: Literal["input_tokens"]
    value: Annotated[int, Field(ge=0)]


class ToolUses(_Strict):
    type: Literal["tool_uses"]
    value: Annotated[int, Field(ge=0)]


class ClearToolUses(_Strict):
    """Once the prompt passes `trigger`, replace all but the last `keep` tool results with a note."""

    type: Literal["clear_tool_uses_20250919"]
    trigger: Annotated[InputTokens | ToolUses, Field(discriminator="type")] | None = None
    keep: ToolUses | None = None
    clear_at_least: InputTokens | None = None
    exclude_tools: Annotated[list[ToolName], Field(max_length=128)] | None = None
    clear_tool_inputs: bool | Annotated[list[ToolName], Field(max_length=128)] | None = None


class UnsupportedEdit(BaseModel):
    """An edit mlxhost does not make (compaction, which needs a model call of its own): skipped."""

    model_config = ConfigDict(extra="allow", strict=True)
    type: str


def _edit(value: Any) -> str:
    kind = _type_of(value)
    if kind == "clear_thinking_20251015":
        return "clear_thinking"
    return "clear_tool_uses" if kind == "clear_tool_uses_20250919" else "unsupported_edit"


ContextEdit = Annotated[
    Annotated[ClearThinking, Tag("clear_thinking")]
    | Annotated[ClearToolUses, Tag("clear_tool_uses")]
    | Annotated[UnsupportedEdit, Tag("unsupported_edit")],
    Discriminator(_edit),
]


class ContextManagement(_Strict):
    edits: Annotated[list[ContextEdit], Field(max_length=16)] | None = None


class JSONOutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: JSONSchema = Field(alias="schema")


class OutputConfig(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JSONOutputFormat | None = None


class CountTokensRequest(_Strict):
    """What a prompt is made of: the body of /v1/messages/count_tokens."""

    model: Annotated[str, Field(min_length=1, max_length=256)]
    messages: Annotated[list[InputMessage], Field(min_length=1, max_length=MAX_MESSAGES, fail_fast=True)]
    system: str | Annotated[list[TextBlock], Field(max_length=MAX_MESSAGES)] | None = None
    tools: Annotated[list[ToolDefinition], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    context_management: ContextManagement | None = None

    def system_text(self) -> str:
        if self.system is None or isinstance(self.system, str):
            return self.system or ""
        return "\n\n".join(block.text for block in self.system)


class MessagesRequest(CountTokensRequest):
    """The body of /v1/messages: a prompt and how to generate its answer."""

    max_tokens: MaxTokens
    stop_sequences: (
        Annotated[list[StopString], Field(max_length=MAX_STOP_SEQUENCES, fail_fast=True)] | None
    ) = None
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=0)] | None = None
    stream: bool | None = None
    metadata: Metadata | None = None  # the host keeps user_id in the session's record


register_schema(
    [
        MessagesRequest,
        CountTokensRequest,
        InputMessage,
        TextBlock,
        ToolUseBlock,
        ToolResultBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        CustomTool,
        ToolChoiceAuto,
        ToolChoiceAny,
        ToolChoiceTool,
        ThinkingEnabled,
        Metadata,
        OutputConfig,
        JSONOutputFormat,
        ContextManagement,
        ClearThinking,
        ClearToolUses,
        ThinkingTurns,
        InputTokens,
        ToolUses,
    ],
    nested={
        (MessagesRequest, "messages"): InputMessage,
        (CountTokensRequest, "messages"): InputMessage,
        (MessagesRequest, "tools"): CustomTool,
        (CountTokensRequest, "tools"): CustomTool,
        (MessagesRequest, "system"): TextBlock,
        (CountTokensRequest, "system"): TextBlock,
        (MessagesRequest, "metadata"): Metadata,
        (MessagesRequest, "context_management"): ContextManagement,
        (CountTokensRequest, "context_management"): ContextManagement,
        (MessagesRequest, "output_config"): OutputConfig,
        (CountTokensRequest, "output_config"): OutputConfig,
    },
    lists=["stop_sequences", "system", "edits", "exclude_tools"],
    schemas=["input_schema", "format"],
    dialects={MessagesRequest: "messages", CountTokensRequest: "count_tokens"},
)
