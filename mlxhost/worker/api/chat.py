"""POST /v1/chat/completions: validate, translate, generate, answer.

Nothing here waits on the event loop for the size of a request: a large body is sized up before
pydantic builds it (see wire/openai.py), a prompt that cannot fit is refused before the chat
template renders it, and rendering and encoding run in the engine's tokenizer thread. Building the
generation is generation.py's and running it and answering answer.py's, for every dialect; the
conversation pipeline (tools, grammar, reasoning) is conversation.py's; `ChatWriter`
(openai_writer.py) writes the chunks. The route takes `n`: that many choices, one generation each,
run together in the batch.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlxhost.wire.chunks import ChatFormat
from mlxhost.wire.fields import Skipped
from mlxhost.wire.openai import ChatCompletionRequest, ChatMessage, JSONObjectFormat, JSONSchemaFormat
from mlxhost.wire.parsing import parse_body, too_long
from mlxhost.worker.api.answer import respond_choices
from mlxhost.worker.api.conversation import (
    Conversation,
    OutputFormat,
    Tool,
    ToolChoice,
    effort_budget,
    prepare,
    tool_call_message,
)
from mlxhost.worker.api.openai_writer import ChatWriter
from mlxhost.worker.api.request import (
    cache_namespace,
    check_characters,
    choice_generations,
    generation_request,
)
from mlxhost.worker.api.serving import read_body, serving

__all__ = ["chat_completions", "chat_conversation"]


async def chat_completions(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    skipped = Skipped()
    chat = parse_body(ChatCompletionRequest, await read_body(request, service), context, skipped)
    # Each message renders to at least one token.
    if context is not None and len(chat.messages) >= context:
        count = len(chat.messages)
        raise too_long("messages", f"{count} messages are at least {count} tokens", context)
    check_characters(service, "messages", sum(len(m.text()) for m in chat.messages))
    prepared = await prepare(service.engine, chat_conversation(chat))
    generation = generation_request(
        chat,
        prepared.prompt,
        service,
        "messages",
        cache_namespace(request, chat),
        grammar=prepared.grammar,
        thinking_budget=prepared.thinking_budget,
    )
    fmt = ChatFormat(service.model_id, len(prepared.prompt), include_usage=chat.wants_usage_chunk())
    n = chat.n or 1
    parsers = [prepared.parser(service.engine) for _ in range(n)]
    response = await respond_choices(
        request, service, choice_generations(generation, n), ChatWriter(fmt, n), parsers, bool(chat.stream)
    )
    response.headers.update(skipped.headers())
    return response


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
