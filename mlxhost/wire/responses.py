"""Request bodies of OpenAI's Responses API (POST /v1/responses), validated strictly.

As with Chat Completions (openai.py), a field mlxhost does not implement is skipped and named when
the SDK defines it, refused by name when not (fields.py). What the API has but a local model
cannot do parses into an `Unsupported*` model, so the route can say what happens to it: a hosted
tool (web search) is skipped and named, an image or a file as input is refused with a 400 that
names the field and says why, instead of pydantic's list of the shapes it expected.

Items and content parts are unions told apart by their `type`; a message may leave its `type`
out (OpenAI's "easy" input message). The union tags below are no field's name, so an error's
`param` reads `input[2].content[0].text` and not the tag's name in between.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from mlxhost.wire.openai import MAX_TOOLS, FunctionName, JSONSchema, MaxTokens
from mlxhost.wire.parsing import MAX_MESSAGES, register_schema

__all__ = [
    "INCLUDABLE",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "FunctionTool",
    "FunctionToolChoice",
    "InputItem",
    "JSONObjectTextFormat",
    "JSONSchemaTextFormat",
    "MessageItem",
    "NamespaceTool",
    "ReasoningConfig",
    "ReasoningItem",
    "ResponsesRequest",
    "TextConfig",
    "UnsupportedItem",
    "UnsupportedPart",
    "UnsupportedTextFormat",
    "UnsupportedTool",
    "UnsupportedToolChoice",
]

# What `include` may name: the openai SDK's ResponseIncludable (a test keeps the two in step).
INCLUDABLE = frozenset({
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
    "reasoning.encrypted_content", "message.output_text.logprobs",
})  # fmt: skip

MAX_METADATA = 16  # OpenAI's limits: 16 pairs, keys of 64 characters, values of 512
MAX_CLIENT_METADATA = 32
CallId = Annotated[str, Field(min_length=1, max_length=256)]
ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


UNSUPPORTED = "unsupported_kind"  # the union tag of a type that is refused by name


class _Unsupported(BaseModel):
    # Any fields: it is refused for its type, whatever else it says.
    model_config = ConfigDict(extra="allow", strict=True)
    type: str


def _kind(default: str, known: dict[str, str]) -> Any:
    """A discriminator: the union tag for a value's `type` (`default` when it has none)."""

    def kind(value: Any) -> str:
        if isinstance(value, dict):
            found = value.get("type", default)
        elif isinstance(value, BaseModel):
            found = getattr(value, "type", default)
        else:
            found = default  # not an object: the default member's error says what is expected
        if not isinstance(found, str):
            return known[default]
        return known.get(found, UNSUPPORTED)

    return Discriminator(kind)


# -- Content parts ---------------------------------------------------------------------------------


class InputTextPart(_Strict):
    type: Literal["input_text"]
    text: str


class OutputTextPart(_Strict):
    """An earlier answer's text, as a Response's output carries it (sent back as input)."""

    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class RefusalPart(_Strict):
    type: Literal["refusal"]
    refusal: str


class UnsupportedPart(_Unsupported):
    """input_image, input_file, input_audio: a text model's worker cannot read them."""


ContentPart = Annotated[
    (
        Annotated[InputTextPart, Tag("input_text_part")]
        | Annotated[OutputTextPart, Tag("output_text_part")]
        | Annotated[RefusalPart, Tag("refusal_part")]
        | Annotated[UnsupportedPart, Tag(UNSUPPORTED)]
    ),
    _kind(
        "input_text",
        {"input_text": "input_text_part", "output_text": "output_text_part", "refusal": "refusal_part"},
    ),
]
Content = Annotated[list[ContentPart], Field(max_length=MAX_MESSAGES)]


# -- Input items -----------------------------------------------------------------------------------


class MessageItem(_Strict):
    type: Literal["message"] | None = None
    role: Literal["user", "system", "developer", "assistant"]
    content: str | Content
    id: CallId | None = None  # an output message sent back has its id, status and phase
    status: ItemStatus | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: CallId
    name: FunctionName
    arguments: str
    id: CallId | None = None
    status: ItemStatus | None = None
    namespace: FunctionName | None = None  # the namespace tool it is of

    def qualified_name(self) -> str:
        """The name the model called it by (see NamespaceTool)."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: CallId
    output: str | Content
    id: CallId | None = None
    status: ItemStatus | None = None


class SummaryPart(_Strict):
    type: Literal["summary_text"]
    text: str


class ReasoningTextPart(_Strict):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Strict):
    """An earlier answer's reasoning: it renders into the assistant turn that follows it."""

    type: Literal["reasoning"]
    id: CallId | None = None
    summary: Annotated[list[SummaryPart], Field(max_length=MAX_MESSAGES)] = []
    content: Annotated[list[ReasoningTextPart], Field(max_length=MAX_MESSAGES)] | None = None
    encrypted_content: str | None = None
    status: ItemStatus | None = None


class UnsupportedItem(_Unsupported):
    """Hosted tools' calls and outputs, item references: nothing here can run or resolve them."""


InputItem = Annotated[
    (
        Annotated[MessageItem, Tag("message_item")]
        | Annotated[FunctionCallItem, Tag("function_call_item")]
        | Annotated[FunctionCallOutputItem, Tag("function_call_output_item")]
        | Annotated[ReasoningItem, Tag("reasoning_item")]
        | Annotated[UnsupportedItem, Tag(UNSUPPORTED)]
    ),
    _kind(
        "message",
        {
            "message": "message_item",
            "function_call": "function_call_item",
            "function_call_output": "function_call_output_item",
            "reasoning": "reasoning_item",
        },
    ),
]


# -- Tools, tool choice, text format, reasoning ------------------------------------------------------


class FunctionTool(_Strict):
    type: Literal["function"]
    name: FunctionName
    description: str | None = None
    parameters: JSONSchema | None = None
    strict: bool | None = None


class UnsupportedTool(_Unsupported):
    """Hosted tools (web search, file search, code interpreter, MCP...): mlxhost has none."""


InnerTool = Annotated[
    Annotated[FunctionTool, Tag("function_tool")] | Annotated[UnsupportedTool, Tag(UNSUPPORTED)],
    _kind("function", {"function": "function_tool"}),
]


class NamespaceTool(_Strict):
    """Function tools under a shared name (Codex's `multi_agent_v1`): offered to the model as
    `namespace.name`, and its calls of them answered with `name` and `namespace` apart."""

    type: Literal["namespace"]
    name: FunctionName
    description: str | None = None
    tools: Annotated[list[InnerTool], Field(max_length=MAX_TOOLS)]


Tool = Annotated[
    Annotated[FunctionTool, Tag("function_tool")]
    | Annotated[NamespaceTool, Tag("namespace_tool")]
    | Annotated[UnsupportedTool, Tag(UNSUPPORTED)],
    _kind("function", {"function": "function_tool", "namespace": "namespace_tool"}),
]


class FunctionToolChoice(_Strict):
    type: Literal["function"]
    name: FunctionName


class UnsupportedToolChoice(_Unsupported):
    """A hosted tool, `allowed_tools`, MCP or custom tools forced by name."""


ToolChoiceObject = Annotated[
    (
        Annotated[FunctionToolChoice, Tag("function_choice")]
        | Annotated[UnsupportedToolChoice, Tag(UNSUPPORTED)]
    ),
    _kind("function", {"function": "function_choice"}),
]


class PlainTextFormat(_Strict):
    type: Literal["text"]


class JSONObjectTextFormat(_Strict):
    type: Literal["json_object"]


class JSONSchemaTextFormat(_Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)
    type: Literal["json_schema"]
    name: FunctionName
    schema_: JSONSchema = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class UnsupportedTextFormat(_Unsupported):
    """A format this API may grow (a grammar, say) that mlxhost does not know."""


TextFormat = Annotated[
    (
        Annotated[PlainTextFormat, Tag("text_format")]
        | Annotated[JSONObjectTextFormat, Tag("json_object_format")]
        | Annotated[JSONSchemaTextFormat, Tag("json_schema_format")]
        | Annotated[UnsupportedTextFormat, Tag(UNSUPPORTED)]
    ),
    _kind(
        "text",
        {"text": "text_format", "json_object": "json_object_format", "json_schema": "json_schema_format"},
    ),
]


class TextConfig(_Strict):
    format: TextFormat | None = None


class ReasoningConfig(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # its older name


# -- The request -------------------------------------------------------------------------------------


class ResponsesRequest(_Strict):
    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    input: str | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_MESSAGES)]
    instructions: str | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["auto", "none", "required"] | ToolChoiceObject | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    stream: bool | None = None
    store: bool | None = None  # None: true, as OpenAI has it
    previous_response_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    reasoning: ReasoningConfig | None = None
    metadata: (
        Annotated[
            dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
            Field(max_length=MAX_METADATA),
        ]
        | None
    ) = None
    user: Annotated[str, Field(max_length=256)] | None = None
    truncation: Literal["disabled"] | None = None  # "auto" would drop turns silently: not done
    # What else to include in the answer (encrypted reasoning, logprobs...): there is nothing more
    # to include, so each entry is skipped and named; an entry the SDK does not define (INCLUDABLE)
    # is refused, naming it (the worker checks).
    include: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=16)] | None = None
    # Codex's own (no SDK defines it): who sent the turn, kept in the session's record by the host.
    client_metadata: (
        Annotated[
            dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=8192)]],
            Field(max_length=MAX_CLIENT_METADATA),
        ]
        | None
    ) = None

    def stores(self) -> bool:
        return self.store is not False


register_schema(
    [
        ResponsesRequest,
        MessageItem,
        FunctionCallItem,
        FunctionCallOutputItem,
        ReasoningItem,
        SummaryPart,
        ReasoningTextPart,
        InputTextPart,
        OutputTextPart,
        RefusalPart,
        FunctionTool,
        NamespaceTool,
        FunctionToolChoice,
        TextConfig,
        JSONSchemaTextFormat,
        ReasoningConfig,
    ],
    nested={
        # A union's members differ, so only fields whose objects are one model are walked: a tool
        # (whose `parameters` get a JSON Schema's budget), the text and reasoning settings.
        (ResponsesRequest, "tools"): FunctionTool,
        (ResponsesRequest, "text"): TextConfig,
        (ResponsesRequest, "reasoning"): ReasoningConfig,
    },
    lists=["input", "include"],
    schemas=["format"],  # the text format holds its JSON Schema
    dialects={ResponsesRequest: "responses"},
)
