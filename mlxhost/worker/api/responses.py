"""POST /v1/responses: OpenAI's Responses API over the shared pipeline.

The body (wire/responses.py) becomes a `Conversation`: `instructions` a system turn first, input
messages turns, `function_call` items an assistant turn's tool calls, `function_call_output` items
tool turns, and a `reasoning` item the reasoning of the assistant turn after it. From there it
runs as Chat Completions does (prepare, generate, `respond`); `ResponsesWriter`
(responses_writer.py) writes the output as a Response object, whole or as its stream of typed
events.

`previous_response_id` continues a response this worker stored (see `ResponseStore`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlxhost.wire.errors import InvalidRequest
from mlxhost.wire.fields import Skipped, known_type
from mlxhost.wire.headers import CACHE_SCOPE_HEADER
from mlxhost.wire.inert import excerpt
from mlxhost.wire.parsing import parse_body, too_long
from mlxhost.wire.responses import (
    INCLUDABLE,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    FunctionToolChoice,
    JSONObjectTextFormat,
    JSONSchemaTextFormat,
    MessageItem,
    NamespaceTool,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    UnsupportedItem,
    UnsupportedPart,
    UnsupportedTextFormat,
    UnsupportedTool,
    UnsupportedToolChoice,
)
from mlxhost.worker.api.answer import respond
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
from mlxhost.worker.api.request import GenerationSettings, check_characters, generation_request
from mlxhost.worker.api.responses_writer import ResponsesWriter, echo
from mlxhost.worker.api.serving import Serving, read_body, serving
from mlxhost.worker.engine.generation import GenerationRequest
from mlxhost.worker.engine.parts import Output

__all__ = ["ResponseStore", "responses", "responses_conversation"]

STORED_RESPONSES = 1000

Message = dict[str, Any]  # a template-ready message (see conversation.py)


async def responses(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    skipped = Skipped()
    body = parse_body(ResponsesRequest, await read_body(request, service), context, skipped)
    _refuse_unsupported(body, skipped)
    scope = request.headers.get(CACHE_SCOPE_HEADER, "")
    store = response_store(request)
    history: list[Message] = []
    if body.previous_response_id is not None:
        found = store.get(scope, body.previous_response_id)
        if found is None:
            raise InvalidRequest(
                f"previous_response_id: no stored response '{excerpt(body.previous_response_id)}' (a "
                "response made with store false, one this worker has forgotten, or one from before it "
                "restarted)",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history = found
    conversation, turn = responses_conversation(body, history)
    # Each message renders to at least one token.
    if context is not None and len(conversation.messages) >= context:
        count = len(conversation.messages)
        raise too_long("input", f"{count} messages are at least {count} tokens", context)
    check_characters(service, "input", sum(_characters(m) for m in conversation.messages))
    prepared = await prepare(service.engine, conversation)
    generation = _generation(body, prepared.prompt, service, scope, prepared)

    def keep(response_id: str, output: Output) -> None:
        store.put(scope, response_id, [*history, *turn, _assistant_message(output)])

    writer = ResponsesWriter(
        service.model_id, len(prepared.prompt), echo(body), keep if body.stores() else None, namespaces(body)
    )
    response = await respond(
        request, service, generation, writer, prepared.parser(service.engine), bool(body.stream)
    )
    response.headers.update(skipped.headers())
    return response


class ResponseStore:
    """The conversations of stored responses (store: true), by caller and id: the most recent
    `capacity` of them, each its messages up to and including that response's output.

    It lives in the worker's memory: a restart (a crash, an idle unload, a new deploy) forgets
    every stored response, and a client that continues one then gets a 400 for its
    previous_response_id and must resend the conversation. That is acceptable for now: mlxhost
    serves local and development use, OpenAI's own store is no more than a convenience (clients
    that manage their own state, or use store false, never depend on it), and the stored
    messages are the ones the prompt cache keeps warm in this same process anyway.

    Conversations share their earlier messages (which are never changed once stored), so a long
    chain of responses costs a list of references per response, not a copy of its text.
    """

    def __init__(self, capacity: int = STORED_RESPONSES) -> None:
        self.capacity = capacity
        self._conversations: OrderedDict[tuple[str, str], list[Message]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._conversations)

    def get(self, scope: str, response_id: str) -> list[Message] | None:
        """The stored conversation, or None; a caller's (`scope`'s) responses are its own."""
        key = (scope, response_id)
        found = self._conversations.get(key)
        if found is not None:
            self._conversations.move_to_end(key)
        return found

    def put(self, scope: str, response_id: str, messages: list[Message]) -> None:
        self._conversations[(scope, response_id)] = messages
        self._conversations.move_to_end((scope, response_id))
        while len(self._conversations) > self.capacity:
            self._conversations.popitem(last=False)


def response_store(request: Request) -> ResponseStore:
    """The app's store, made on first use."""
    state = request.app.state
    store = getattr(state, "response_store", None)
    if store is None:
        store = state.response_store = ResponseStore()
    return store  # type: ignore[no-any-return]


def _refuse_unsupported(body: ResponsesRequest, skipped: Skipped) -> None:
    """What the Responses API has but a local text model cannot do: refused by its field, or
    skipped by name where leaving it out changes nothing the client relies on."""
    if isinstance(body.input, list):
        for i, item in enumerate(body.input):
            if isinstance(item, UnsupportedItem):
                raise _unsupported(
                    f"input[{i}].type",
                    f"'{excerpt(item.type)}' items are not supported: mlxhost takes "
                    "messages, function calls and their outputs, and reasoning",
                )
            if isinstance(item, MessageItem):
                where, parts = "content", item.content
            elif isinstance(item, FunctionCallOutputItem):
                where, parts = "output", item.output
            else:
                continue
            for j, part in enumerate(parts if isinstance(parts, list) else ()):
                if isinstance(part, UnsupportedPart):
                    raise _unsupported(
                        f"input[{i}].{where}[{j}].type",
                        f"'{excerpt(part.type)}' content is not supported: this model reads text only",
                    )
    for i, tool in enumerate(body.tools or ()):
        inner = tool.tools if isinstance(tool, NamespaceTool) else ()
        for j, each in [(None, tool), *enumerate(inner)]:
            if not isinstance(each, UnsupportedTool):
                continue
            # A hosted tool (web search) the host cannot run: the model is not offered it, as
            # a provider without it would do. One no SDK knows is a mistake.
            where = f"tools[{i}]" if j is None else f"tools[{i}].tools[{j}]"
            if not known_type("responses", "tools", each.type):
                raise _unsupported(
                    f"{where}.type",
                    f"'{excerpt(each.type)}' is no tool type of the Responses API: mlxhost runs "
                    "function tools",
                )
            skipped.add(f"tools.{each.type}" if j is None else f"tools.namespace.{each.type}")
    for i, entry in enumerate(body.include or ()):
        if entry not in INCLUDABLE:
            # Named in x-mlxhost-ignored, an unknown entry would read there as something else
            # ("x, temperature" as if temperature were skipped): refused, by its place.
            raise _unsupported(
                f"include[{i}]",
                f"'{excerpt(entry)}' is not something a response can include: one of "
                + ", ".join(sorted(INCLUDABLE)),
            )
        skipped.add(f"include.{entry}")  # nothing more than the answer itself to include
    if isinstance(body.tool_choice, UnsupportedToolChoice):
        kind = excerpt(body.tool_choice.type)
        raise _unsupported(
            "tool_choice.type",
            f"'{kind}' is not supported: choose auto, none, required or a function by name",
        )
    if body.text is not None and isinstance(body.text.format, UnsupportedTextFormat):
        raise _unsupported(
            "text.format.type",
            f"'{excerpt(body.text.format.type)}' is not supported: text, json_object or json_schema",
        )


def _unsupported(param: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{param}: {why}", param=param, code="unsupported_value")


def responses_conversation(
    body: ResponsesRequest, history: list[Message]
) -> tuple[Conversation, list[Message]]:
    """The conversation to render (`instructions`, `history`, this input) and this input's own
    messages (what a stored response adds to `history`: the instructions are not carried over,
    as OpenAI has it)."""
    turn = _input_messages(body, history)
    messages = [*history, *turn]
    if body.instructions is not None:
        messages.insert(0, {"role": "system", "content": body.instructions})
    tools = tuple(
        Tool(name, t.description, t.parameters, param=f"{field}.parameters")
        for name, t, field in function_tools(body)
    )
    choice = body.tool_choice
    if choice is None:
        tool_choice = ToolChoice("auto")
    elif isinstance(choice, str):
        tool_choice = ToolChoice(choice)
    else:
        assert isinstance(choice, FunctionToolChoice)
        tool_choice = ToolChoice("named", choice.name)
    fmt = body.text.format if body.text is not None else None
    output_format = None
    if isinstance(fmt, JSONObjectTextFormat):
        output_format = OutputFormat("json_object", "text.format")
    elif isinstance(fmt, JSONSchemaTextFormat):
        output_format = OutputFormat("json_schema", "text.format.schema", fmt.schema_)
    template_args: dict[str, Any] = {}
    thinking = None
    effort = body.reasoning.effort if body.reasoning is not None else None
    if effort is not None:
        template_args["reasoning_effort"] = effort
        thinking = effort != "none"
    conversation = Conversation(
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        output_format=output_format,
        thinking=thinking,
        thinking_budget=effort_budget(effort),
        template_args=template_args,
        messages_param="input",
    )
    return conversation, turn


def function_tools(body: ResponsesRequest) -> list[tuple[str, FunctionTool, str]]:
    """The function tools offered to the model, by the names it calls them: a namespace tool's
    as `namespace.name`, as the call items it answers with say them apart; each with its field
    in the request ("tools[2]", "tools[3].tools[0]"), for errors."""
    out: list[tuple[str, FunctionTool, str]] = []
    for i, tool in enumerate(body.tools or ()):
        if isinstance(tool, FunctionTool):
            out.append((tool.name, tool, f"tools[{i}]"))
        elif isinstance(tool, NamespaceTool):
            out += [
                (f"{tool.name}.{t.name}", t, f"tools[{i}].tools[{j}]")
                for j, t in enumerate(tool.tools)
                if isinstance(t, FunctionTool)
            ]
    return out


def namespaces(body: ResponsesRequest) -> dict[str, tuple[str, str]]:
    """Each namespaced function's qualified name -> (namespace, name)."""
    return {
        f"{tool.name}.{t.name}": (tool.name, t.name)
        for tool in body.tools or ()
        if isinstance(tool, NamespaceTool)
        for t in tool.tools
        if isinstance(t, FunctionTool)
    }


def _input_messages(body: ResponsesRequest, history: list[Message]) -> list[Message]:
    if isinstance(body.input, str):
        return [{"role": "user", "content": body.input}]
    # A tool result's template may want the function's name: the call it answers says it.
    names = {c["id"]: c["function"]["name"] for m in history for c in m.get("tool_calls", ())}
    out: list[Message] = []
    # Reasoning items' text, for the assistant turn that follows them; with none, it is dropped.
    reasoning = ""
    for item in body.input:
        if isinstance(item, MessageItem):
            role = "system" if item.role == "developer" else item.role
            message: Message = {"role": role, "content": _text(item.content)}
            if role == "assistant" and reasoning:
                message["reasoning_content"] = reasoning
            reasoning = ""
            out.append(message)
        elif isinstance(item, FunctionCallItem):
            name = item.qualified_name()
            names[item.call_id] = name
            calls = tool_call_message([(item.call_id, name, item.arguments)])
            last = out[-1] if out else None
            # Parallel calls, and the text before them, are one assistant turn. (Only this input's
            # own turns are extended: stored ones are shared, and never change.)
            if last is not None and last["role"] == "assistant" and not reasoning:
                last["tool_calls"] = [*last.get("tool_calls", ()), *calls]
            else:
                message = {"role": "assistant", "content": "", "tool_calls": calls}
                if reasoning:
                    message["reasoning_content"] = reasoning
                reasoning = ""
                out.append(message)
        elif isinstance(item, FunctionCallOutputItem):
            result: Message = {"role": "tool", "content": _text(item.output), "tool_call_id": item.call_id}
            if item.call_id in names:
                result["name"] = names[item.call_id]
            out.append(result)
        elif isinstance(item, ReasoningItem):
            text = "\n\n".join(part.text for part in item.content or item.summary)
            reasoning = f"{reasoning}\n\n{text}" if reasoning and text else reasoning or text
    return out


def _text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.refusal if isinstance(part, RefusalPart) else part.text for part in content)


def _characters(message: Message) -> int:
    count = len(message.get("content", "")) + len(message.get("reasoning_content", ""))
    for call in message.get("tool_calls", ()):
        arguments = call["function"]["arguments"]
        count += len(arguments) if isinstance(arguments, str) else len(str(arguments))
    return count


def _generation(
    body: ResponsesRequest, prompt: list[int], service: Serving, scope: str, prepared: Prepared
) -> GenerationRequest:
    settings = GenerationSettings(body.max_output_tokens, "max_output_tokens", body.temperature, body.top_p)
    return generation_request(
        settings,
        prompt,
        service,
        "input",
        (scope, ""),
        grammar=prepared.grammar,
        thinking_budget=prepared.thinking_budget,
    )


def _assistant_message(output: Output) -> Message:
    """A response's output as the assistant turn a continuation renders."""
    message: Message = {"role": "assistant", "content": output.content}
    if output.reasoning:
        message["reasoning_content"] = output.reasoning
    if output.tool_calls:
        message["tool_calls"] = tool_call_message([(c.id, c.name, c.arguments) for c in output.tool_calls])
    return message
