"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the shared pipeline.

A Messages body becomes a `Conversation` (conversation.py) as a chat body does; only the shapes
differ. Anthropic keeps a turn's parts as typed blocks, so a user turn that answers tool calls
(`tool_result` blocks) becomes one `tool` message per result, then a user message with the turn's
text; an assistant turn's `tool_use` blocks become its `tool_calls`, its `thinking` blocks its
`reasoning_content`. The answer is written back as blocks too: thinking, text, then one
`tool_use` block per call, whole or as Anthropic's stream of block events.

What mlxhost cannot do is refused with a 400 naming the field, never dropped: image and document
blocks, and a final assistant turn to be continued (prefill), which chat templates cannot render.
Anthropic's server tools (web search) run on Anthropic's side: they are skipped and named in the
answer's `x-mlxhost-ignored` header. Context editing (`context_management`) is done here, on the
conversation before it renders: old thinking and old tool results are cleared as Anthropic would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxhost.wire.anthropic import (
    ClearThinking,
    ClearToolUses,
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
    ToolUses,
    UnsupportedBlock,
    UnsupportedEdit,
)
from mlxhost.wire.anthropic import ToolChoice as ToolChoiceBody
from mlxhost.wire.chunks import AnswerFinish, Delta, ToolCall
from mlxhost.wire.dialect import Dialect, sse_error, sse_event
from mlxhost.wire.errors import APIError, InvalidRequest
from mlxhost.wire.inert import excerpt
from mlxhost.wire.fields import Skipped, known_type
from mlxhost.wire.openai import parse_body, too_long
from mlxhost.worker.answer import Answer, Serving, respond
from mlxhost.worker.conversation import (
    Conversation,
    OutputFormat,
    Prepared,
    Tool,
    ToolChoice,
    effort_budget,
    prepare,
    tool_call_message,
)
from mlxhost.worker.output import Output
from mlxhost.worker.routes import (
    GenerationSettings,
    _check_characters,
    _generation_request,
    _namespace,
    read_body,
    serving,
)

__all__ = ["MessagesWriter", "count_tokens", "messages", "messages_conversation"]

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
    generation = _generation_request(
        sampling,
        prepared.prompt,
        service,
        "messages",
        _namespace(request, sampling),
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
    _check_characters(service, "messages", chars)
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
        _apply_edits(out, body.context_management.edits or (), skipped, names)
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


# What a cleared tool result says instead, so the model knows something was there.
CLEARED_RESULT = "[tool result cleared to save context]"
DEFAULT_KEEP_TOOL_USES = 3  # Anthropic's defaults for clear_tool_uses_20250919
DEFAULT_TRIGGER_TOKENS = 100_000


def _apply_edits(
    messages: list[dict[str, Any]], edits: Sequence[Any], skipped: Skipped, names: dict[str, str]
) -> None:
    """Anthropic's context editing, made on the conversation before it renders. The token
    trigger of clear_tool_uses is checked against the rendered prompt, in `_prepare`."""
    for edit in edits:
        if isinstance(edit, ClearThinking):
            keep = 1 if edit.keep is None else None if edit.keep == "all" else edit.keep.value
            if keep is not None:
                turns = [m for m in messages if m["role"] == "assistant" and "reasoning_content" in m]
                for message in turns[: max(0, len(turns) - keep)]:
                    del message["reasoning_content"]
        elif isinstance(edit, ClearToolUses):
            if isinstance(edit.trigger, ToolUses):
                results = sum(1 for m in messages if m["role"] == "tool")
                if results > edit.trigger.value:
                    clear_tool_uses(messages, edit)
        elif isinstance(edit, UnsupportedEdit):
            if not known_type("messages", "edits", edit.type):
                raise InvalidRequest(
                    f"context_management.edits: '{excerpt(edit.type)}' is no context edit of the "
                    "Messages API",
                    param="context_management.edits",
                )
            skipped.add(f"context_management.edits.{edit.type}")


def clear_tool_uses(messages: list[dict[str, Any]], edit: ClearToolUses) -> None:
    """Replace all but the last `keep` tool results (and, if asked, their calls' inputs)."""
    keep = edit.keep.value if edit.keep is not None else DEFAULT_KEEP_TOOL_USES
    excluded = set(edit.exclude_tools or ())
    results = [m for m in messages if m["role"] == "tool" and m.get("name") not in excluded]
    cleared = {m["tool_call_id"] for m in results[: max(0, len(results) - keep)]}
    for message in results[: max(0, len(results) - keep)]:
        message["content"] = CLEARED_RESULT
    inputs = edit.clear_tool_inputs
    if not inputs:
        return
    for message in messages:
        for call in message.get("tool_calls", ()):
            function = call["function"]
            if call["id"] in cleared and (inputs is True or function["name"] in inputs):
                function["arguments"] = {}


def token_trigger(body: CountTokensRequest) -> tuple[int, ClearToolUses] | None:
    """The prompt length past which a clear_tool_uses edit applies, when it counts tokens."""
    for edit in body.context_management.edits or () if body.context_management else ():
        if isinstance(edit, ClearToolUses) and not isinstance(edit.trigger, ToolUses):
            return (edit.trigger.value if edit.trigger is not None else DEFAULT_TRIGGER_TOKENS), edit
    return None


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
        tools.append(Tool(tool.name, tool.description, tool.input_schema))
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


@dataclass
class MessagesWriter:
    """A generation as Anthropic writes a message: whole, or as its stream of block events."""

    model: str
    prompt_tokens: int
    id: str = field(default_factory=lambda: f"msg_{uuid.uuid4().hex[:24]}")
    _open: str | None = None  # the kind of block being streamed ("thinking" or "text"), if one is
    _blocks: int = 0  # blocks started so far: each has its index

    def opening(self) -> Iterable[bytes]:
        # How much of the prompt the cache served is known once the generation starts: the
        # message_delta at the end tells the split (its usage replaces this one's).
        usage = _usage(self.prompt_tokens, Delta())
        start = {"type": "message_start", "message": self._message([], None, None, usage)}
        return [sse_event(start), sse_event({"type": "ping"})]

    def output(self, out: Output, delta: Delta) -> Iterable[bytes]:
        frames = []
        if out.reasoning:
            frames += self._into("thinking", {"type": "thinking_delta", "thinking": out.reasoning})
        if out.content:
            frames += self._into("text", {"type": "text_delta", "text": out.content})
        for call in out.tool_calls:
            frames += self._close()
            block = _tool_use(call)
            arguments = json.dumps(block["input"], ensure_ascii=False)
            frames.append(self._start({**block, "input": {}}))
            frames.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
            frames.append(sse_event({"type": "content_block_stop", "index": self._blocks - 1}))
        return frames

    def closing(self, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        reason, sequence = _stop_reason(final, finish)
        ending = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": _usage(self.prompt_tokens, final),
        }
        return [*self._close(), sse_event(ending), sse_event({"type": "message_stop"})]

    def failure(self, error: APIError) -> Iterable[bytes]:
        return [sse_error(error, Dialect.MESSAGES)]

    def whole(self, answer: Answer) -> dict[str, Any]:
        out = answer.output
        content: list[dict[str, Any]] = []
        if out.reasoning:
            content.append({"type": "thinking", "thinking": out.reasoning, "signature": ""})
        if out.content:
            content.append({"type": "text", "text": out.content})
        content += [_tool_use(call) for call in out.tool_calls]
        reason, sequence = _stop_reason(answer.final, answer.finish)
        return self._message(content, reason, sequence, _usage(self.prompt_tokens, answer.final))

    def _message(
        self, content: list[dict[str, Any]], reason: str | None, sequence: str | None, usage: dict[str, int]
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": usage,
        }

    def _into(self, kind: str, delta: dict[str, Any]) -> list[bytes]:
        """`delta` in a block of `kind`: the open one, or a new one after closing another."""
        frames = []
        if self._open != kind:
            frames += self._close()
            empty = {"type": "thinking", "thinking": "", "signature": ""} if kind == "thinking" else None
            frames.append(self._start(empty or {"type": "text", "text": ""}))
            self._open = kind
        frames.append(self._delta(delta))
        return frames

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        frames = []
        if self._open == "thinking":
            # Anthropic signs its thinking so that it can be handed back unchanged; nothing here
            # checks a signature, so it is empty.
            frames.append(self._delta({"type": "signature_delta", "signature": ""}))
        self._open = None
        return [*frames, sse_event({"type": "content_block_stop", "index": self._blocks - 1})]

    def _start(self, block: dict[str, Any]) -> bytes:
        self._blocks += 1
        return sse_event({"type": "content_block_start", "index": self._blocks - 1, "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_event({"type": "content_block_delta", "index": self._blocks - 1, "delta": delta})


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = json.loads(call.arguments)
    except ValueError:
        arguments = None
    # Anthropic's input is always an object; a call whose arguments are not one (only a model not
    # held by a grammar writes such) has no input the client could use.
    return {
        "type": "tool_use",
        "id": _tool_use_id(call.id),
        "name": call.name,
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else f"toolu_{call_id.removeprefix('call_')}"


def _stop_reason(final: Delta, finish: AnswerFinish) -> tuple[str, str | None]:
    """Anthropic's stop_reason, and the stop sequence that ended the message if one did."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if final.stop_sequence is not None:
        return "stop_sequence", final.stop_sequence
    return "end_turn", None


def _usage(prompt_tokens: int, final: Delta) -> dict[str, int]:
    # Anthropic counts the prompt tokens read from its cache apart from input_tokens.
    cached = final.cached_tokens
    return {
        "input_tokens": prompt_tokens - cached,
        "output_tokens": final.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }
