"""POST /v1/responses: OpenAI's Responses API over the shared pipeline.

The body (wire/responses.py) becomes a `Conversation`: `instructions` a system turn first, input
messages turns, `function_call` items an assistant turn's tool calls, `function_call_output` items
tool turns, and a `reasoning` item the reasoning of the assistant turn after it. From there it
runs as Chat Completions does (prepare, generate, `respond`); `ResponsesWriter` writes the output
as a Response object, whole or as its stream of typed events:

    response.created, response.in_progress
    per output item, in the order the model wrote them:
      reasoning      output_item.added, content_part.added, reasoning_text.delta..., .done,
                     content_part.done, output_item.done
      message        the same, with output_text.delta... and output_text.done
      function_call  output_item.added, function_call_arguments.delta, .done, output_item.done
    response.completed, or response.incomplete (max_output_tokens), with the whole Response;
    a failure: an `error` event, then response.failed

`previous_response_id` continues a response this worker stored (see `ResponseStore`).
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response

from mlxhost.wire.chunks import AnswerFinish, Delta, ToolCall
from mlxhost.wire.dialect import sse_event
from mlxhost.wire.errors import APIError, InvalidRequest
from mlxhost.wire.headers import CACHE_SCOPE_HEADER
from mlxhost.wire.inert import excerpt
from mlxhost.wire.openai import parse_body, too_long
from mlxhost.wire.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionToolChoice,
    JSONObjectTextFormat,
    JSONSchemaTextFormat,
    MessageItem,
    ReasoningItem,
    RefusalPart,
    ResponsesRequest,
    UnsupportedItem,
    UnsupportedPart,
    UnsupportedTextFormat,
    UnsupportedTool,
    UnsupportedToolChoice,
)
from mlxhost.worker.answer import Answer, respond
from mlxhost.worker.conversation import (
    Conversation,
    OutputFormat,
    Tool,
    ToolChoice,
    prepare,
    tool_call_message,
)
from mlxhost.worker.generation import GenerationRequest
from mlxhost.worker.grammar import Grammar
from mlxhost.worker.output import Output
from mlxhost.worker.routes import (
    GenerationSettings,
    Serving,
    _check_characters,
    _generation_request,
    read_body,
    serving,
)

__all__ = ["ResponseStore", "ResponsesWriter", "responses", "responses_conversation"]

STORED_RESPONSES = 1000

Message = dict[str, Any]  # a template-ready message (see conversation.py)


async def responses(request: Request) -> Response:
    service = serving(request)
    context = service.engine.context_length
    body = parse_body(ResponsesRequest, await read_body(request, service), context)
    _refuse_unsupported(body)
    scope = request.headers.get(CACHE_SCOPE_HEADER, "")
    store = response_store(request)
    history: list[Message] = []
    if body.previous_response_id is not None:
        found = store.get(scope, body.previous_response_id)
        if found is None:
            raise InvalidRequest(
                f"previous_response_id: no stored response '{excerpt(body.previous_response_id)}' (a response "
                "made with store false, one this worker has forgotten, or one from before it restarted)",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history = found
    conversation, turn = responses_conversation(body, history)
    # Each message renders to at least one token.
    if context is not None and len(conversation.messages) >= context:
        count = len(conversation.messages)
        raise too_long("input", f"{count} messages are at least {count} tokens", context)
    _check_characters(service, "input", sum(_characters(m) for m in conversation.messages))
    prepared = await prepare(service.engine, conversation)
    generation = _generation(body, prepared.prompt, service, scope, prepared.grammar)

    def keep(response_id: str, output: Output) -> None:
        store.put(scope, response_id, [*history, *turn, _assistant_message(output)])

    writer = ResponsesWriter(
        service.model_id, len(prepared.prompt), _echo(body), keep if body.stores() else None
    )
    return await respond(
        request, service, generation, writer, prepared.parser(service.engine), bool(body.stream)
    )


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


def _refuse_unsupported(body: ResponsesRequest) -> None:
    """What the Responses API has but a local text model cannot do, refused by its field."""
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
        if isinstance(tool, UnsupportedTool):
            raise _unsupported(
                f"tools[{i}].type",
                f"'{excerpt(tool.type)}' tools are not supported: mlxhost has function tools only",
            )
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
        Tool(t.name, t.description, t.parameters)
        for t in body.tools or ()
        if not isinstance(t, UnsupportedTool)
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
        template_args=template_args,
        messages_param="input",
    )
    return conversation, turn


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
            names[item.call_id] = item.name
            calls = tool_call_message([(item.call_id, item.name, item.arguments)])
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
    body: ResponsesRequest, prompt: list[int], service: Serving, scope: str, grammar: Grammar | None
) -> GenerationRequest:
    settings = GenerationSettings(body.max_output_tokens, "max_output_tokens", body.temperature, body.top_p)
    return _generation_request(settings, prompt, service, "input", (scope, ""), grammar=grammar)


def _assistant_message(output: Output) -> Message:
    """A response's output as the assistant turn a continuation renders."""
    message: Message = {"role": "assistant", "content": output.content}
    if output.reasoning:
        message["reasoning_content"] = output.reasoning
    if output.tool_calls:
        message["tool_calls"] = tool_call_message([(c.id, c.name, c.arguments) for c in output.tool_calls])
    return message


def _echo(body: ResponsesRequest) -> dict[str, Any]:
    """The request's settings, as every Response object repeats them."""
    choice = body.tool_choice
    if isinstance(choice, FunctionToolChoice):
        tool_choice: Any = {"type": "function", "name": choice.name}
    else:
        tool_choice = choice or "auto"
    fmt = body.text.format if body.text is not None else None
    text_format = fmt.model_dump(by_alias=True, exclude_none=True) if fmt is not None else {"type": "text"}
    reasoning = body.reasoning
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "reasoning": {
            "effort": reasoning.effort if reasoning else None,
            "summary": (reasoning.summary or reasoning.generate_summary) if reasoning else None,
        },
        "store": body.stores(),
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {"format": text_format},
        "tool_choice": tool_choice,
        "tools": [t.model_dump() for t in body.tools or ()],
        "top_p": 1.0 if body.top_p is None else body.top_p,
        "truncation": "disabled",
        "user": body.user,
        "background": False,
    }


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


ItemKind = Literal["message", "reasoning"]


@dataclass
class ResponsesWriter:
    """A generation as a Response object, whole or streamed as typed events."""

    model: str
    prompt_tokens: int
    settings: dict[str, Any]  # the request's, echoed in every Response object
    keep: Callable[[str, Output], None] | None = None  # stores a finished response (store: true)
    id: str = field(default_factory=lambda: _new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    _sequence: int = 0
    _items: list[dict[str, Any]] = field(default_factory=list)  # the stream's output items so far
    _open: dict[str, Any] | None = None  # the message or reasoning item text is streaming into
    _text: str = ""  # the open item's text so far
    _output: Output = field(default_factory=Output)  # all of it, to store

    def opening(self) -> Iterable[bytes]:
        snapshot = self._response("in_progress", [], None)
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def output(self, out: Output, delta: Delta) -> Iterable[bytes]:
        self._output.add(out)
        frames = []
        if out.reasoning:
            frames += self._text_delta("reasoning", out.reasoning)
        if out.content:
            frames += self._text_delta("message", out.content)
        for call in out.tool_calls:
            frames += self._close("completed")
            frames += self._call(call)
        return frames

    def closing(self, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        status = _status(finish)
        item_status = "incomplete" if status == "incomplete" else "completed"
        frames = self._close(item_status)
        if not self._items:  # nothing at all: an empty answer is still an answer
            frames += self._start("message") + self._close(item_status)
        response = self._response(status, self._items, self._usage(final))
        if self.keep is not None:
            self.keep(self.id, self._output)
        return [*frames, self._event(f"response.{status}", response=response)]

    def failure(self, error: APIError) -> Iterable[bytes]:
        # dialect.sse_error's event, numbered in this stream's sequence (the parent's, written
        # without knowing it, says 0), then the Response as it failed: the text it was writing
        # is in it, cut.
        self._settle("incomplete")
        failed = self._response(
            "failed", self._items, None, error={"code": "server_error", "message": error.message}
        )
        return [
            self._event("error", code=error.code, message=error.message, param=error.param),
            self._event("response.failed", response=failed),
        ]

    def whole(self, answer: Answer) -> dict[str, Any]:
        out = answer.output
        status = _status(answer.finish)
        items: list[dict[str, Any]] = []
        if out.reasoning:
            items.append(_reasoning_item(_new_id("rs"), out.reasoning, "completed"))
        if out.content or not (out.reasoning or out.tool_calls):
            items.append(_message_item(_new_id("msg"), out.content, "completed"))
        if status == "incomplete" and items:
            items[-1]["status"] = "incomplete"  # the text it was writing when it was cut
        items += [_call_item(_new_id("fc"), call, "completed") for call in out.tool_calls]
        if self.keep is not None:
            self.keep(self.id, out)
        return self._response(status, items, self._usage(answer.final))

    # -- Streaming -------------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> bytes:
        frame = sse_event({"type": kind, **fields, "sequence_number": self._sequence})
        self._sequence += 1
        return frame

    def _text_delta(self, kind: ItemKind, text: str) -> list[bytes]:
        frames = []
        if self._open is None or self._open["type"] != kind:
            frames += self._close("completed")
            frames += self._start(kind)
        assert self._open is not None
        self._text += text
        where = {"item_id": self._open["id"], "output_index": len(self._items) - 1, "content_index": 0}
        if kind == "message":
            frames.append(self._event("response.output_text.delta", **where, delta=text, logprobs=[]))
        else:
            frames.append(self._event("response.reasoning_text.delta", **where, delta=text))
        return frames

    def _start(self, kind: ItemKind) -> list[bytes]:
        if kind == "message":
            item = _message_item(_new_id("msg"), "", "in_progress")
        else:
            item = _reasoning_item(_new_id("rs"), "", "in_progress")
        part = item["content"].pop()  # the item is announced empty, then its part
        self._items.append(item)
        self._open, self._text = item, ""
        index = len(self._items) - 1
        return [
            self._event("response.output_item.added", output_index=index, item=item),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            ),
        ]

    def _close(self, status: str) -> list[bytes]:
        """The events that finish the open item, if any."""
        text, item = self._text, self._settle(status)
        if item is None:
            return []
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": len(self._items) - 1, "content_index": 0}
        if item["type"] == "message":
            done = self._event("response.output_text.done", **where, text=text, logprobs=[])
        else:
            done = self._event("response.reasoning_text.done", **where, text=text)
        return [
            done,
            self._event("response.content_part.done", **where, part=part),
            self._event("response.output_item.done", output_index=where["output_index"], item=item),
        ]

    def _settle(self, status: str) -> dict[str, Any] | None:
        """The open item, given its text and `status`, and no longer open."""
        item, text = self._open, self._text
        if item is None:
            return None
        self._open = None
        part = _output_text(text) if item["type"] == "message" else _reasoning_text(text)
        item["content"], item["status"] = [part], status
        return item

    def _call(self, call: ToolCall) -> list[bytes]:
        item = _call_item(_new_id("fc"), call, "in_progress")
        item["arguments"] = ""
        self._items.append(item)
        where = {"item_id": item["id"], "output_index": len(self._items) - 1}
        frames = [
            self._event("response.output_item.added", output_index=where["output_index"], item=item),
            self._event("response.function_call_arguments.delta", **where, delta=call.arguments),
            self._event("response.function_call_arguments.done", **where, arguments=call.arguments),
        ]
        item["arguments"], item["status"] = call.arguments, "completed"
        frames.append(self._event("response.output_item.done", output_index=where["output_index"], item=item))
        return frames

    # -- The Response object ---------------------------------------------------------------------

    def _response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": self.model,
            "output": output,
            "usage": usage,
            **self.settings,
        }

    def _usage(self, final: Delta) -> dict[str, Any]:
        return {
            "input_tokens": self.prompt_tokens,
            # The SDK's type requires cache_write_tokens: mlxhost's prompt cache is implicit and
            # does not count what it writes, so none are reported.
            "input_tokens_details": {"cached_tokens": final.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": final.completion_tokens,
            # The model's reasoning is counted with its answer: the two are not told apart by count.
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.prompt_tokens + final.completion_tokens,
        }


def _status(finish: AnswerFinish) -> Literal["completed", "incomplete"]:
    return "incomplete" if finish == "length" else "completed"


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _reasoning_text(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": [_output_text(text)],
    }


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [_reasoning_text(text)],
        "status": status,
    }


def _call_item(item_id: str, call: ToolCall, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }
