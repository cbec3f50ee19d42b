"""A generation's text, split as it streams into the answer, its reasoning, and its tool calls.

A model that thinks writes its reasoning between markers (`<think>` … `</think>`, or its family's),
and one that calls a tool writes each call between its own (`<tool_call>` … `</tool_call>`, or its
family's; Mistral's calls have no end marker and run to the end); mlx-lm's tokenizer knows both,
and the parser for the call's body. This reads the text as it comes and sorts it into `Part`s, in
the order written: the answer and the reasoning go out as they arrive; a call is announced once
its family's format (tool_formats/) can tell its name, its arguments follow as they complete, and
it ends when its body parsed at its end marker. A tail that could be the start of a marker is
held back until the next text tells.

A control token the model wrote comes marked (engine/textstream.py): it changes the mode where it
is a marker the mode awaits, it is kept in a call's body (a family's inner markup, `<arg_key>`),
and anywhere else it is dropped, never answer or reasoning text: a closing marker with no call
open, a call's inner markup outside one, a stray `<|system|>`.

mlx-lm's own splitter lives inside its HTTP server module (not an API it offers), so this is our
own, kept to the markers the tokenizer names.
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlxhost.wire.chunks import ToolCall
from mlxhost.worker.engine.parts import CallArguments, CallBegun, CallEnded, Output
from mlxhost.worker.engine.textstream import control_pieces

if TYPE_CHECKING:
    from mlxhost.worker.engine.tool_formats import ToolFormat

__all__ = ["Markers", "OutputParser", "new_call_id"]

logger = logging.getLogger("mlxhost.engine")

ToolParser = Callable[[str, Any], Any]  # mlx-lm's: a call's body (and the tools) -> {name, arguments}


@dataclass(frozen=True)
class Markers:
    """The marker strings a model writes around its reasoning and its tool calls (None: it has none)."""

    think_start: str | None = None
    think_end: str | None = None
    call_start: str | None = None
    call_end: str | None = None
    # Control tokens that are pieces of a marker spelled in several tokens (Kimi K3's
    # `<|open|>tools<|sep|>`): they come as text, for the marker to be found, and where one
    # stands alone in an answer or reasoning it is dropped there.
    pieces: tuple[str, ...] = ()

    def strings(self) -> tuple[str, ...]:
        return tuple(m for m in (self.think_start, self.think_end, self.call_start, self.call_end) if m)


class _Mode(enum.Enum):
    ANSWER = "answer"
    REASONING = "reasoning"
    CALL = "call"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


# A call body being written is read again for streaming once it grew by this fraction of itself.
REREAD_FRACTION = 64


class OutputParser:
    """Feed it text as it comes (`feed`), then `finish`; each returns what is now known of it.

    `parse_call` is None when calls are not to be read (no tools were offered, or `tool_choice`
    was "none"): then their markers are just text; `forced`: a grammar holds the output to calls.
    `fmt` is the family's syntax, which tells a
    call's name and arguments while its body is still being written (tool_formats/): with it, a
    call is announced (`CallBegun`) as soon as its name is known and its arguments follow as they
    complete; without it, a call comes whole at its end marker. `reasoning` says the prompt left
    the model inside a think block (a template that opens it in the generation prompt).
    """

    def __init__(
        self,
        markers: Markers,
        parse_call: ToolParser | None = None,
        tools: Sequence[Any] | None = None,
        reasoning: bool = False,
        fmt: ToolFormat | None = None,
        forced: bool = False,
    ) -> None:
        self._markers = markers
        # A family with no end marker (Mistral) writes its calls to the end of the output.
        self._parse_call = parse_call if markers.call_start else None
        self._tools = tools
        self._fmt = fmt
        # A grammar holds the output to calls: what the output ends inside of (a start marker
        # spelled in several tokens, cut by max_tokens) is a call begun, not text.
        self._forced = forced and self._parse_call is not None
        self._thinks = bool(markers.think_start and markers.think_end)
        self._mode = _Mode.REASONING if reasoning and self._thinks else _Mode.ANSWER
        self._held = ""  # text not yet sorted: a marker may be starting in it
        self._call = ""  # the body of the call being written
        self._call_text = ""  # the same without the control tokens in it: what an unreadable call says
        self._read_at = 0  # its length when it was last read for streaming
        self._begun: list[_Begun] = []  # the calls of that body announced so far
        # Just past a marker: the newlines a template writes after one are layout, not text.
        self._trim = self._mode is _Mode.REASONING
        self.calls_made = 0
        self.calls_begun = 0  # every call announced or made: the next call's index
        self.calls_cut = 0  # calls the text ended inside of
        self.dropped = 0  # control tokens written where they mean nothing: never text
        self._ids: set[str] = set()  # the ids its calls went out with

    def feed(self, text: str) -> Output:
        out = Output()
        for plain, token in control_pieces(text):
            if plain:
                self._feed_text(out, plain)
            if token is not None:
                self._feed_token(out, token)
        if self._mode is _Mode.CALL:
            self._stream_call(out)
        return out

    def _feed_token(self, out: Output, token: str) -> None:
        """A control token: a marker the mode awaits crosses it, a call's body keeps it, and
        anything else is dropped (text held for a marker that a token cannot continue is text)."""
        held, self._held = self._held, ""
        self._emit(out, held)
        if token in self._awaited():
            self._cross(token, out)
        elif self._mode is _Mode.CALL:
            self._call += token
        else:
            self.dropped += 1

    def _feed_text(self, out: Output, text: str) -> None:
        text = self._held + text
        self._held = ""
        while text:
            markers = self._awaited()
            found = [(at, m) for m in markers if (at := text.find(m)) >= 0]
            if found:
                at, marker = min(found)
                self._emit(out, text[:at])
                text = text[at + len(marker) :]
                self._cross(marker, out)
                continue
            keep = max((_partial(text, m) for m in markers), default=0)
            self._emit(out, text[: len(text) - keep])
            self._held = text[len(text) - keep :]
            break

    def finish(self) -> Output:
        """The text ended: whatever is held is what it is; a call never closed is dropped."""
        out = Output()
        held, self._held = self._held, ""
        if self._mode is _Mode.CALL:
            self._call += held
            self._call_text += held
            if not self._markers.call_end and self._read_call(out, cut=True):
                return out  # a family whose calls end with the output (Mistral), complete
            # Cut off (by max_tokens, or a stop string): not a call the client could make, and its
            # markup is not an answer either (as text it would read as one, ahead of the calls
            # that did complete). The finish reason says the output was cut. In a family that
            # writes several calls in one section (Kimi, MiniMax), those it finished are whole.
            finished = self._finished_calls()
            for i, call in enumerate(finished):
                self._end_finished(out, i, call)
            self.calls_made += len(finished)
            logger.info("a tool call was cut off before its end marker; it is dropped")
            self.calls_cut += max(1, len(self._begun) - len(finished))
            for begun in self._begun[len(finished) :]:
                out.call_part(CallEnded(begun.index, None))
            self._end_call()
        elif not (self._forced and self._mode is _Mode.ANSWER and held):
            self._emit(out, held)
        return out

    def _finished_calls(self) -> list[ToolCall]:
        """The calls of a cut body its format reads as finished (their arguments whole JSON): the
        leading ones, up to the first that is not."""
        if self._fmt is None:
            return []
        finished = []
        for partial in self._fmt.partial(self._call, self._tools):
            try:
                arguments = json.loads(partial.arguments) if partial.name is not None else None
            except ValueError:
                arguments = None
            if not isinstance(arguments, dict):
                break
            assert partial.name is not None
            finished.append(ToolCall(partial.id or "", partial.name, partial.arguments))
        return finished

    def _end_finished(self, out: Output, i: int, call: ToolCall) -> None:
        if i < len(self._begun):
            begun = self._begun[i]
            if len(call.arguments) > len(begun.sent):
                out.call_part(CallArguments(begun.index, call.arguments[len(begun.sent) :]))
            out.call_part(CallEnded(begun.index, ToolCall(begun.id, call.name, call.arguments)))
            return
        index = self.calls_begun
        self.calls_begun += 1
        call = ToolCall(self._unique(call.id), call.name, call.arguments)
        out.call_part(CallBegun(index, call.id, call.name))
        out.call_part(CallArguments(index, call.arguments))
        out.call_part(CallEnded(index, call))

    def _awaited(self) -> list[str]:
        """The markers that would change the mode now."""
        m = self._markers
        if self._mode is _Mode.REASONING:
            return [m.think_end] if m.think_end else []
        if self._mode is _Mode.CALL:
            return [m.call_end] if m.call_end else []
        starts = [m.think_start if self._thinks else None, m.call_start if self._parse_call else None]
        return [s for s in starts if s]

    def _emit(self, out: Output, text: str) -> None:
        if self._mode is not _Mode.CALL:
            for piece in self._markers.pieces:
                if piece in text:
                    self.dropped += text.count(piece)
                    text = text.replace(piece, "")
        if self._trim and self._mode is not _Mode.CALL:  # a call's body is kept as written
            text = text.lstrip("\n")
            self._trim = not text
        if not text:
            return
        if self._mode is _Mode.REASONING:
            out.text("reasoning", text)
        elif self._mode is _Mode.CALL:
            self._call += text
            self._call_text += text
        else:
            out.text("content", text)

    def _cross(self, marker: str, out: Output) -> None:
        m = self._markers
        self._trim = True
        if self._mode is _Mode.REASONING:
            self._mode = _Mode.ANSWER
        elif self._mode is _Mode.CALL:
            self._read_call(out, cut=False)
            self._end_call()
        elif marker == m.think_start:
            self._mode = _Mode.REASONING
        else:
            self._mode = _Mode.CALL

    def _stream_call(self, out: Output) -> None:
        """Announce the body's calls whose names are known, and send what is new of their arguments."""
        if self._fmt is None:
            return
        # Each reading parses the whole body so far: read at every token, a long call would cost
        # O(n^2) (a 15,000-character file written by a tool call took 3.3 s of the event loop).
        # Read again once the body grew by a REREAD_FRACTION of itself: a short call at every
        # token, a long one's arguments in pieces of about that fraction; its end reads it whole.
        if len(self._call) - self._read_at < len(self._call) // REREAD_FRACTION:
            return
        self._read_at = len(self._call)
        for i, partial in enumerate(self._fmt.partial(self._call, self._tools)):
            if i == len(self._begun):
                if partial.name is None:
                    break
                begun = _Begun(self.calls_begun, self._unique(partial.id), partial.name)
                self.calls_begun += 1
                self._begun.append(begun)
                out.call_part(CallBegun(begun.index, begun.id, begun.name))
            begun = self._begun[i]
            if partial.arguments.startswith(begun.sent) and len(partial.arguments) > len(begun.sent):
                out.call_part(CallArguments(begun.index, partial.arguments[len(begun.sent) :]))
                begun.sent = partial.arguments

    def _read_call(self, out: Output, cut: bool) -> bool:
        """Read the finished body: end the calls it holds (announced or not); False if it does not
        parse. `cut`: the output ended inside it, so a body that does not parse is not text."""
        assert self._parse_call is not None
        try:
            parsed = self._parse_call(self._call, self._tools)
            items = parsed if isinstance(parsed, list) else [parsed]
            calls = [_tool_call(item) for item in items]
        except Exception as exc:  # each parser raises its own kind of error on a malformed body
            logger.info("a tool call did not parse (%s)", type(exc).__name__)
            calls = [None]
        if any(call is None for call in calls):
            if cut:
                return False
            for begun in self._begun:
                out.call_part(CallEnded(begun.index, None))
            if not self._begun and self._call_text.strip():
                # Its words are the answer; its markup (the call's markers, its inner tokens) is not.
                logger.info("answering an unreadable tool call as text")
                out.text("content", self._call_text)
            return False
        for i, call in enumerate(calls):
            assert call is not None
            if i < len(self._begun):
                begun = self._begun[i]
                if call.name != begun.name or not call.arguments.startswith(begun.sent):
                    # A format's reader and mlx-lm's parser disagree: the stream already said
                    # otherwise, and the whole call is what the client gets in the end.
                    logger.warning("a streamed tool call differs from the call read at its end")
                call = ToolCall(begun.id, call.name, call.arguments)
                rest = call.arguments[len(begun.sent) :] if call.arguments.startswith(begun.sent) else ""
            else:
                call = ToolCall(self._unique(call.id), call.name, call.arguments)
                begun = _Begun(self.calls_begun, call.id, call.name)
                self.calls_begun += 1
                out.call_part(CallBegun(begun.index, call.id, call.name))
                rest = call.arguments
            if rest:
                out.call_part(CallArguments(begun.index, rest))
            out.call_part(CallEnded(begun.index, call))
        for begun in self._begun[len(calls) :]:  # announced by the reader, not there in the end
            out.call_part(CallEnded(begun.index, None))
        self.calls_made += len(calls)
        return True

    def _unique(self, model_id: str | None) -> str:
        """The id a call goes out with: the model's own where its family writes one (Kimi's
        `functions.NAME:i`), unless this output already used it (the model numbers calls across
        the conversation, and may repeat), else a fresh one."""
        call_id = model_id if model_id and model_id not in self._ids else new_call_id()
        self._ids.add(call_id)
        return call_id

    def _end_call(self) -> None:
        self._call = ""
        self._call_text = ""
        self._read_at = 0
        self._begun = []
        self._mode = _Mode.ANSWER


@dataclass
class _Begun:
    index: int
    id: str
    name: str
    sent: str = ""  # the arguments' text sent so far


def _tool_call(item: Any) -> ToolCall | None:
    if not isinstance(item, dict) or not isinstance(name := item.get("name"), str) or not name:
        return None
    arguments = item.get("arguments", {})
    if not isinstance(arguments, str):
        try:
            # A number past a float's range (a model may write 1e999; llguidance cannot bound an
            # open number schema) parses as inf, which JSON has no way to write: no call.
            arguments = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        except ValueError:
            return None
    call_id = item.get("id")
    return ToolCall(call_id if isinstance(call_id, str) and call_id else new_call_id(), name, arguments)


def _partial(text: str, marker: str) -> int:
    """The length of the longest tail of `text` that is a proper prefix of `marker`."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
