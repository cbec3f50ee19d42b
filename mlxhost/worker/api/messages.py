"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the shared pipeline.

A Messages body becomes a `Conversation` (conversation.py) as a chat body does; only the shapes
differ. Anthropic keeps a turn's parts as typed blocks, so a user turn that answers tool calls
(`tool_result` blocks) becomes one `tool` message per result, then a user message with the turn's
text; an assistant turn's `tool_use` blocks become its `tool_calls`, its `thinking` blocks its
`reasoning_content`. The answer is written back as blocks too (messages_writer.py).

What mlxhost cannot do is refused with a 400 naming the field, never dropped: image and document
blocks, and a final assistant turn to be continued (prefill), which chat templates cannot render.
Anthropic's client tools (bash, the text editor, memory) are offered to the model as Anthropic
documents them (wire/anthropic_client_tools.py), for the client to run. Its server tools (web
search) run on Anthropic's side: they are skipped and named in the
answer's `x-mlxhost-ignored` header. Context editing (`context_management`) is done on the
conversation before it renders (context_edits.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxhost.wire.anthropic import (
    CountTokensRequest,
    CustomTool,
    InputMessage,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ThinkingEnabled,
    ToolResultBlock,
    ToolUseBlock,
    UnsupportedBlock,
)
from mlxhost.wire.anthropic import ToolChoice as ToolChoiceBody
from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.anthropic_client_tools import client_tool
from mlxhost.wire.fields import Skipped, known_type
from mlxhost.wire.inert import excerpt
from mlxhost.wire.parsing import parse_body, too_long
from mlxhost.worker.api.answer import respond
from mlxhost.worker.api.context_edits import apply_edits, clear_tool_uses, token_trigger
from mlxhost.worker.api.conversation import (
    Conversation,
    OutputFormat,
    Prepared,
    Tool,
    ToolChoice,
    effort_budget,
    prepare,
    tool_call_message,
)
from mlxhost.worker.api.messages_writer import MessagesWriter
from mlxhost.worker.api.request import (
    GenerationSettings,
    cache_namespace,
    check_characters,
    generation_request,
)
from mlxhost.worker.api.serving import Serving, read_body, serving

__all__ = ["count_tokens", "messages", "messages_conversation"]

# Text blocks of one turn are separate paragraphs to the client (a reminder, then the question):
# joined so, they stay apart in the one string chat templates take.
BLOCK_SEPARATOR = "\n\n"


async def messages(request: Request) -> Response:
    service = serving(request)
    skipped = Skipped()
    context = service.engine.context_length
    body = parse_body(MessagesRequest, await read_body(request, service), context, skipped)
    prepared = await _prepare(service, body, skipped)
    sampling = GenerationSettings(
        body.max_tokens,
        "max_tokens",
        body.temperature,
        body.top_p,
        body.top_k,
        tuple(body.stop_sequences or ()),
    )
    generation = generation_request(
        sampling,
        prepared.prompt,
        service,
        "messages",
        cache_namespace(request, sampling),
        grammar=prepared.grammar,
        thinking_budget=prepared.thinking_budget,
    )
    writer = MessagesWriter(service.model_id, len(prepared.prompt))
    response = await respond(
        request, service, generation, writer, prepared.parser(service.engine), bool(body.stream)
    )
    response.headers.update(skipped.headers())
    return response


async def count_tokens(request: Request) -> Response:
    """The prompt's length in tokens, as /v1/messages would render it (with its tools and switches)."""
    service = serving(request)
    skipped = Skipped()
    context = service.engine.context_length
    body = parse_body(CountTokensRequest, await read_body(request, service), context, skipped)
    prepared = await _prepare(service, body, skipped)
    return JSONResponse({"input_tokens": len(prepared.prompt)}, headers=skipped.headers())


async def _prepare(service: Serving, body: CountTokensRequest, skipped: Skipped) -> Prepared:
    conversation = messages_conversation(body, skipped)
    # A prompt that cannot fit is refused before the template renders it, as for chat: rendering
    # runs one request at a time, and this one could not be served anyway.
    context = service.engine.context_length
    count = len(conversation.messages)
    if context is not None and count >= context:
        raise too_long("messages", f"{count} messages are at least {count} tokens", context)
    chars = sum(len(m["content"]) + len(m.get("reasoning_content", "")) for m in conversation.messages)
    check_characters(service, "messages", chars)
    prepared = await prepare(service.engine, conversation)
    if (trigger := token_trigger(body)) is not None and len(prepared.prompt) > trigger[0]:
        clear_tool_uses(conversation.messages, trigger[1])
        prepared = await prepare(service.engine, conversation)
    return prepared


def messages_conversation(body: CountTokensRequest, skipped: Skipped | None = None) -> Conversation:
    """A Messages body as the shared pipeline takes it; what it skips is added to `skipped`."""
    skipped = skipped if skipped is not None else Skipped()
    out: list[dict[str, Any]] = []
    if system := body.system_text():
        out.append({"role": "system", "content": system})
    names: dict[str, str] = {}  # tool_use id -> the tool's name, for the results that answer it
    last = len(body.messages) - 1
    for i, message in enumerate(body.messages):
        if message.role == "user":
            out += _user_turn(message, f"messages[{i}]", names)
            continue
        if message.role == "system":
            # Where the template allows, a system turn stays where it was sent; where it does not,
            # `prepare` merges it into the user turn before it (conversation.merge_system_turns).
            out.append({"role": "system", "content": _system_text(message, f"messages[{i}]")})
            continue
        if i == last:
            raise InvalidRequest(
                f"messages[{i}]: the last message must be the user's: continuing an assistant message "
                "(prefill) is not supported",
                param=f"messages[{i}]",
                code="unsupported_value",
            )
        out.append(_assistant_turn(message, f"messages[{i}]", names))
    if body.context_management is not None:
        apply_edits(out, body.context_management.edits or (), skipped, names)
    choice, parallel = _tool_choice(body.tool_choice)
    # Adaptive thinking leaves it to the model whether to think: a local model that can, may,
    # within the budget its effort maps to (Anthropic's default effort is high).
    thinking = None if body.thinking is None else body.thinking.type != "disabled"
    effort = body.output_config.effort if body.output_config is not None else None
    budget = None
    if isinstance(body.thinking, ThinkingEnabled):
        budget = body.thinking.budget_tokens
    elif body.thinking is not None and body.thinking.type == "adaptive":
        budget = effort_budget(effort or "high")
    output_format, template_args = None, {}
    if (config := body.output_config) is not None:
        if config.format is not None:
            # Anthropic's structured outputs are strict, as OpenAI's strict mode is.
            output_format = OutputFormat(
                "json_schema", "output_config.format.schema", config.format.schema_, True
            )
        if config.effort is not None:
            template_args["reasoning_effort"] = config.effort
    return Conversation(
        messages=out,
        tools=_tools(body, skipped),
        tool_choice=choice,
        parallel_tool_calls=parallel,
        output_format=output_format,
        thinking=thinking,
        thinking_budget=budget,
        template_args=template_args,
    )


def _system_text(message: InputMessage, param: str) -> str:
    return _texts(message.content, param, "system")


def _user_turn(message: InputMessage, param: str, names: dict[str, str]) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    out: list[dict[str, Any]] = []
    texts = []
    for j, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            # is_error has no place in a chat template's tool message: the result's text says it.
            result: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": block.tool_use_id,
                "content": _result_text(block, f"{param}.content[{j}]"),
            }
            if (name := names.get(block.tool_use_id)) is not None:
                result["name"] = name  # some templates (Gemma, Mistral) name the tool a result is from
            out.append(result)
        else:
            raise _refused(block, f"{param}.content[{j}]", "user")
    if texts:
        out.append({"role": "user", "content": BLOCK_SEPARATOR.join(texts)})
    return out


def _assistant_turn(message: InputMessage, param: str, names: dict[str, str]) -> dict[str, Any]:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts, reasoning, calls = [], [], []
    for j, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            calls.append((block.id, block.name, json.dumps(block.input, ensure_ascii=False)))
            names[block.id] = block.name
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif not isinstance(block, RedactedThinkingBlock):  # opaque (encrypted by Anthropic): nothing to show
            raise _refused(block, f"{param}.content[{j}]", "assistant")
    out: dict[str, Any] = {"role": "assistant", "content": BLOCK_SEPARATOR.join(texts)}
    if calls:
        out["tool_calls"] = tool_call_message(calls)
    if reasoning:
        out["reasoning_content"] = BLOCK_SEPARATOR.join(reasoning)
    return out


def _result_text(block: ToolResultBlock, param: str) -> str:
    return _texts(block.content, param, "tool_result")


def _texts(content: str | Sequence[Any] | None, param: str, holder: str) -> str:
    """The text of content that may only hold text: a string, or text blocks."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for k, part in enumerate(content):
        if not isinstance(part, TextBlock):
            raise _refused(part, f"{param}.content[{k}]", holder)
        texts.append(part.text)
    return BLOCK_SEPARATOR.join(texts)


def _refused(block: Any, param: str, holder: str) -> InvalidRequest:
    if isinstance(block, UnsupportedBlock):
        return InvalidRequest(
            f"{param}: {excerpt(block.type)} content blocks are not supported by mlxhost (only text, "
            "tool use and thinking)",
            param=param,
            code="unsupported_value",
        )
    return InvalidRequest(f"{param}: a {holder} message cannot hold a {block.type} block", param=param)


def _tools(body: CountTokensRequest, skipped: Skipped) -> tuple[Tool, ...]:
    tools: list[Tool] = []
    for i, tool in enumerate(body.tools or ()):
        if not isinstance(tool, CustomTool) and (client := client_tool(tool.type)) is not None:
            # A tool the client runs (bash, the text editor): offered as Anthropic documents it.
            name = (tool.model_extra or {}).get("name")
            if name != client.name:
                raise InvalidRequest(
                    f"tools[{i}].name: a {tool.type} tool is named '{client.name}', not '{excerpt(str(name))}'",
                    param=f"tools[{i}].name",
                )
            if any(t.name == client.name for t in tools):
                raise InvalidRequest(f"tools[{i}].name: another tool is named '{client.name}'", param=f"tools[{i}].name")
            tools.append(Tool(client.name, client.description, client.input_schema, param=f"tools[{i}]"))
            continue
        if not isinstance(tool, CustomTool):
            # One of Anthropic's server tools (web search), which runs on Anthropic's side: the
            # model is not offered it here. A type no SDK knows is a mistake.
            if not known_type("messages", "tools", tool.type):
                raise InvalidRequest(
                    f"tools[{i}].type: '{excerpt(tool.type)}' is no tool type of the Messages API: only "
                    "custom tools (a name and an input_schema) run here",
                    param=f"tools[{i}].type",
                    code="unsupported_value",
                )
            skipped.add(f"tools.{tool.type}")
            continue
        if any(t.name == tool.name for t in tools):
            raise InvalidRequest(
                f"tools[{i}].name: another tool is named '{tool.name}'", param=f"tools[{i}].name"
            )
        tools.append(Tool(tool.name, tool.description, tool.input_schema, param=f"tools[{i}].input_schema"))
    return tuple(tools)


def _tool_choice(choice: ToolChoiceBody | None) -> tuple[ToolChoice, bool]:
    """The tool choice, and whether the model may call more than one tool."""
    if choice is None:
        return ToolChoice("auto"), True
    if choice.type == "none":
        return ToolChoice("none"), True
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "any":
        return ToolChoice("required"), parallel
    if choice.type == "tool":
        return ToolChoice("named", choice.name), parallel
    return ToolChoice("auto"), parallel
