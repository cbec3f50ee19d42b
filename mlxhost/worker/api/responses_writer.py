"""The Responses API's output: a Response object, whole or as its stream of typed events.

    response.created, response.in_progress
    per output item, in the order the model wrote them:
      reasoning      output_item.added, content_part.added, reasoning_text.delta..., .done,
                     content_part.done, output_item.done
      message        the same, with output_text.delta... and output_text.done
      function_call  output_item.added, function_call_arguments.delta, .done, output_item.done
    response.completed, or response.incomplete (max_output_tokens), with the whole Response;
    a failure: an `error` event, then response.failed

The route that reads the request and runs it is responses.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from mlxhost.wire.chunks import AnswerFinish, Delta, ToolCall
from mlxhost.wire.dialect import sse_event
from mlxhost.wire.errors import APIError
from mlxhost.wire.responses import FunctionToolChoice, ResponsesRequest
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.parts import CallArguments, CallBegun, CallEnded, Output, Text

__all__ = ["ResponsesWriter", "echo", "new_id"]


def echo(body: ResponsesRequest) -> dict[str, Any]:
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


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


ItemKind = Literal["message", "reasoning"]


@dataclass
class ResponsesWriter:
    """A generation as a Response object, whole or streamed as typed events."""

    model: str
    prompt_tokens: int
    settings: dict[str, Any]  # the request's, echoed in every Response object
    keep: Callable[[str, Output], None] | None = None  # stores a finished response (store: true)
    # A namespaced function's qualified name -> (namespace, name), as its call item says them.
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))
    _sequence: int = 0
    _items: list[dict[str, Any]] = field(default_factory=list)  # the stream's output items so far
    _open: dict[str, Any] | None = None  # the message or reasoning item text is streaming into
    _text: str = ""  # the open item's text so far
    _calls: dict[int, dict[str, Any]] = field(default_factory=dict)  # call items streaming, by call index
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
        for part in out.parts:
            if isinstance(part, Text):
                frames += self._text_delta("reasoning" if part.kind == "reasoning" else "message", part.text)
            elif isinstance(part, CallBegun):
                frames += self._close("completed")
                frames += self._call_begun(part)
            elif isinstance(part, CallArguments):
                frames += self._call_arguments(part)
            else:
                frames += self._call_ended(part)
        return frames

    def closing(self, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        status = _status(finish)
        item_status = "incomplete" if status == "incomplete" else "completed"
        frames = self._close(item_status)
        for index in list(self._calls):  # a call cut off: it ends as far as it got
            frames += self._call_ended(CallEnded(index, None))
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
        for part in out.parts:  # in the order the model wrote them
            if isinstance(part, Text) and part.kind == "reasoning":
                items.append(_reasoning_item(new_id("rs"), part.text, "completed"))
            elif isinstance(part, Text):
                items.append(_message_item(new_id("msg"), part.text, "completed"))
            elif isinstance(part, CallEnded) and part.call is not None:
                items.append(_call_item(new_id("fc"), part.call, "completed", self.namespaces))
        if not any(item["type"] == "message" for item in items) and not out.tool_calls and not out.reasoning:
            items.append(_message_item(new_id("msg"), "", "completed"))
        if status == "incomplete" and items and items[-1]["type"] != "function_call":
            items[-1]["status"] = "incomplete"  # the text it was writing when it was cut
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
            item = _message_item(new_id("msg"), "", "in_progress")
        else:
            item = _reasoning_item(new_id("rs"), "", "in_progress")
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

    def _call_begun(self, part: CallBegun) -> list[bytes]:
        item = _call_item(new_id("fc"), ToolCall(part.id, part.name, ""), "in_progress", self.namespaces)
        self._items.append(item)
        self._calls[part.index] = item
        output_index = len(self._items) - 1
        return [self._event("response.output_item.added", output_index=output_index, item=item)]

    def _call_arguments(self, part: CallArguments) -> list[bytes]:
        item = self._calls[part.index]
        item["arguments"] += part.text
        where = {"item_id": item["id"], "output_index": self._items.index(item)}
        return [self._event("response.function_call_arguments.delta", **where, delta=part.text)]

    def _call_ended(self, part: CallEnded) -> list[bytes]:
        item = self._calls.pop(part.index, None)
        if item is None:
            return []
        if part.call is not None:
            item["arguments"] = part.call.arguments
        item["status"] = "completed" if part.call is not None else "incomplete"
        where = {"item_id": item["id"], "output_index": self._items.index(item)}
        return [
            self._event("response.function_call_arguments.done", **where, arguments=item["arguments"]),
            self._event("response.output_item.done", output_index=where["output_index"], item=item),
        ]

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


def _call_item(
    item_id: str, call: ToolCall, status: str, namespaces: dict[str, tuple[str, str]]
) -> dict[str, Any]:
    item = {
        "type": "function_call",
        "id": item_id,
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }
    if call.name in namespaces:
        item["namespace"], item["name"] = namespaces[call.name]
    return item
