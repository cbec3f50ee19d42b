"""Running a generation and answering with it, whole or streamed, in any dialect.

A request may ask for several choices (OpenAI's `n`): each is a session of its own, submitted
together so that they batch, and read by its own task; the answer has them all. Sessions live
exactly as long as someone wants them, in one task group per request. Streaming: the group runs
around the response (`_EventStream`), whose body Starlette cancels when the client disconnects.
Whole answers: a watcher task waits for `http.disconnect` while the choices are collected and
cancels the collection. Leaving the group, however it is left, cancels every session.

What is dialect-specific is the writer (writer.py): how output becomes frames or a body
(`Writer` for one choice, `ChoicesWriter` for several). What is not lives here: keep-alives during
a long prefill, merging output that comes faster than the frame interval
(`Serving.frame_interval`), sorting text into answer, reasoning and tool calls (output.py), the
finish reason, and failures: one choice that fails ends the stream (or the answer) with the
error.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from mlxhost.wire.chunks import KEEPALIVE, AnswerFinish, Delta, TokenLogprob
from mlxhost.wire.errors import APIError, InternalError, ServiceUnavailable
from mlxhost.wire.headers import SESSION_HEADER
from mlxhost.worker.api.serving import Serving, cancel_on_disconnect, shutting_down
from mlxhost.worker.api.writer import Answer, ChoicesWriter, Writer
from mlxhost.worker.engine.engine import EngineStopped
from mlxhost.worker.engine.generation import GenerationRequest, GenerationSession
from mlxhost.worker.engine.output import OutputParser
from mlxhost.worker.engine.parts import Output
from mlxhost.worker.engine.textstream import strip_control

__all__ = ["respond", "respond_choices"]

CLIENT_CLOSED_REQUEST = 499  # nginx's code; nobody reads it, but the access log does

_Frames = Sequence[bytes]


async def respond(
    request: Request,
    service: Serving,
    generation: GenerationRequest,
    writer: Writer,
    parser: OutputParser | None,
    stream: bool,
) -> Response:
    """Run `generation` and answer with it; `parser` None: all its text is the answer."""
    return await respond_choices(request, service, [generation], _OneChoice(writer), [parser], stream)


async def respond_choices(
    request: Request,
    service: Serving,
    generations: Sequence[GenerationRequest],
    writer: ChoicesWriter,
    parsers: Sequence[OutputParser | None],
    stream: bool,
) -> Response:
    """Run `generations` together, one per choice, each read by its parser (a fresh one each:
    parsers keep state), and answer with all of them."""
    tag = request.headers.get(SESSION_HEADER)
    pieces = service.engine.tokenizer.markers.pieces
    choices = [_Choice(i, g, p, pieces) for i, (g, p) in enumerate(zip(generations, parsers, strict=True))]
    if stream and len(choices) == 1:
        return StreamingResponse(
            _one_stream(service, choices[0], writer, tag),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
    if stream:
        return _EventStream(_Streaming(service, choices, writer, tag).run)
    return await _whole(request, service, choices, writer, tag)


async def _one_stream(
    service: Serving, choice: _Choice, writer: ChoicesWriter, tag: str | None
) -> AsyncIterator[bytes]:
    """The stream of a single choice, the common case, read in the response's own task.

    Several choices need a task each (`_Streaming`); one does not, and the hop through a task and
    a channel per frame costs every stream CPU and latency the benchmark sees (the isolated path's
    c8 throughput fell from about 0.72 to 0.59 of raw mlx-lm's, its TTFT doubled).
    """
    settings = service.settings
    ended = object()
    last_frame = float("-inf")
    try:
        async with service.engine.generate(choice.generation, tag) as session:
            for frame in writer.opening():
                yield frame
            while True:
                delta: Any = session.ready()
                if delta is None:
                    # Comments keep proxies and clients from timing out during a long prefill.
                    with anyio.move_on_after(settings.keepalive_seconds):
                        delta = await anext(session, ended)
                if delta is None:
                    yield KEEPALIVE
                    continue
                if delta is ended:
                    return
                wait = last_frame + service.frame_interval() - anyio.current_time()
                if wait > 0 and delta.finish_reason is None:
                    # Tokens that come faster than the frame interval go out as one frame.
                    await session.wait_ended(wait)
                    delta = session.merge_ready(delta)
                out = choice.sort(delta)
                if out or delta.logprobs:
                    for frame in writer.output(0, out, delta):
                        yield frame
                    last_frame = anyio.current_time()
                if delta.finish_reason is None:
                    continue
                if delta.finish_reason in ("stop", "length"):
                    frames = [*writer.finished(0, delta, choice.finish(delta)), *writer.closing([delta])]
                else:
                    frames = list(writer.failure(_failure(delta)))
                for frame in frames:
                    yield frame
                return
    except EngineStopped:
        for frame in writer.failure(shutting_down()):
            yield frame


@dataclass
class _OneChoice:
    """A one-choice `Writer` as a `ChoicesWriter`: its closing is its only choice's finish."""

    writer: Writer

    def opening(self) -> Iterable[bytes]:
        return self.writer.opening()

    def output(self, index: int, out: Output, delta: Delta) -> Iterable[bytes]:
        return self.writer.output(out, delta)

    def finished(self, index: int, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        return self.writer.closing(final, finish)

    def closing(self, finals: Sequence[Delta]) -> Iterable[bytes]:
        return ()

    def failure(self, error: APIError) -> Iterable[bytes]:
        return self.writer.failure(error)

    def whole(self, answers: Sequence[Answer]) -> dict[str, Any]:
        [answer] = answers
        return self.writer.whole(answer)


@dataclass
class _Choice:
    """One choice: its generation, the reader of its text, and what came of it."""

    index: int
    generation: GenerationRequest
    parser: OutputParser | None  # None: all the text is the answer
    pieces: tuple[str, ...] = ()  # control tokens that come as text (Markers.pieces): not an answer either
    final: Delta | None = None  # the delta that ended it
    output: Output = field(default_factory=Output)  # all of it, for a whole answer
    logprobs: list[TokenLogprob] | None = None

    def sort(self, delta: Delta) -> Output:
        if self.parser is None:
            text = strip_control(delta.text)
            for piece in self.pieces:
                text = text.replace(piece, "")
            return Output(content=text)
        out = self.parser.feed(delta.text) if delta.text else Output()
        if delta.finish_reason is not None:
            out.add(self.parser.finish())
        return out

    def finish(self, final: Delta) -> AnswerFinish:
        if final.finish_reason == "length":
            return "length"
        return "tool_calls" if self.parser is not None and self.parser.calls_made else "stop"

    def failed(self) -> bool:
        return self.final is not None and self.final.finish_reason not in ("stop", "length")

    async def collect(self, session: GenerationSession, scope: anyio.CancelScope) -> None:
        """Read the whole output; a failure cancels `scope` (every choice): the answer is lost."""
        if self.generation.logprobs is not None:
            self.logprobs = []
        async for delta in session:
            self.output.add(self.sort(delta))
            if self.logprobs is not None and delta.logprobs:
                self.logprobs.extend(delta.logprobs)
            self.final = delta if delta.finish_reason else self.final
        if self.failed():
            scope.cancel()

    def answer(self) -> Answer:
        assert self.final is not None
        return Answer(self.output, self.logprobs, self.final, self.finish(self.final))


@contextlib.asynccontextmanager
async def _sessions(
    service: Serving, choices: Sequence[_Choice], tag: str | None
) -> AsyncIterator[list[GenerationSession]]:
    """Every choice's session, all submitted before any is read so they start in one batch;
    all cancelled on leaving."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(service.engine.generate(c.generation, tag)) for c in choices]


class _EventStream(StreamingResponse):
    """An SSE response whose frames `produce` sends. It runs in a task group around the response,
    not inside the body iterator: a task group must not stay open across an async generator's
    `yield` (the generator may be closed later, from another task). So when Starlette stops the
    body (the client left), the group is cancelled, and every task `produce` started with it."""

    def __init__(
        self, produce: Callable[[MemoryObjectSendStream[_Frames]], Coroutine[Any, Any, None]]
    ) -> None:
        self._produce = produce
        self._frames: MemoryObjectReceiveStream[_Frames] | None = None
        super().__init__(
            self._body(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No buffer: a producer waits for the client, and its session's output merges meanwhile
        # (generation.py), so a slow client gets fewer, larger frames.
        sender, self._frames = anyio.create_memory_object_stream[_Frames]()
        with self._frames:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._produce, sender)
                await super().__call__(scope, receive, send)
                tg.cancel_scope.cancel()

    async def _body(self) -> AsyncIterator[bytes]:
        assert self._frames is not None
        async for frames in self._frames:
            for frame in frames:
                yield frame


class _Streaming:
    """The frames of one stream: each choice's, as they come, and keep-alives while none do."""

    def __init__(
        self, service: Serving, choices: Sequence[_Choice], writer: ChoicesWriter, tag: str | None
    ) -> None:
        self._service = service
        self._choices = choices
        self._writer = writer
        self._tag = tag
        self._error: APIError | None = None  # the first choice's failure ends the stream
        self._last_activity = 0.0  # when output last came or a frame last went out
        self._sending = 0  # frames waiting for the client
        self._out: MemoryObjectSendStream[_Frames] | None = None

    async def run(self, out: MemoryObjectSendStream[_Frames]) -> None:
        self._out = out
        async with out:
            try:
                async with _sessions(self._service, self._choices, self._tag) as sessions:
                    await self._send(self._writer.opening())
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._keep_alive)
                        async with anyio.create_task_group() as reading:
                            for choice, session in zip(self._choices, sessions, strict=True):
                                reading.start_soon(self._read, choice, session, reading.cancel_scope)
                        tg.cancel_scope.cancel()
            except EngineStopped:
                self._error = shutting_down()
            if self._error is not None:
                await self._send(self._writer.failure(self._error))
            elif all(c.final is not None for c in self._choices):
                await self._send(self._writer.closing([c.final for c in self._choices if c.final]))

    async def _read(self, choice: _Choice, session: GenerationSession, scope: anyio.CancelScope) -> None:
        last_frame = float("-inf")
        async for delta in session:
            self._last_activity = anyio.current_time()
            wait = last_frame + self._service.frame_interval() - anyio.current_time()
            if wait > 0 and delta.finish_reason is None:
                # Tokens that come faster than the frame interval go out as one frame: past a
                # hundred frames a second nobody sees the difference, but the CPU does.
                await session.wait_ended(wait)
                delta = session.merge_ready(delta)
            out = choice.sort(delta)
            frames: list[bytes] = []
            if out or delta.logprobs:
                frames += self._writer.output(choice.index, out, delta)
            if delta.finish_reason in ("stop", "length"):
                choice.final = delta
                frames += self._writer.finished(choice.index, delta, choice.finish(delta))
            await self._send(frames)
            if out or delta.logprobs:
                last_frame = anyio.current_time()
            if delta.finish_reason is not None:
                if choice.final is None:
                    self._error = self._error or _failure(delta)
                    scope.cancel()  # the stream ends here: the other choices are not wanted
                return

    async def _keep_alive(self) -> None:
        # Comments keep proxies and clients from timing out during a long prefill. None is sent
        # while frames wait for the client: it is not reading anyway, and a comment queued then
        # could follow the frame that ends the stream.
        period = self._service.settings.keepalive_seconds
        self._last_activity = anyio.current_time()
        while True:
            quiet = anyio.current_time() - self._last_activity
            if quiet < period:
                await anyio.sleep(period - quiet)
            elif self._sending:
                await anyio.sleep(period)
            else:
                await self._send([KEEPALIVE])

    async def _send(self, frames: Iterable[bytes]) -> None:
        frames = list(frames)
        if not frames:
            return
        assert self._out is not None
        self._sending += 1
        try:
            await self._out.send(frames)
        finally:
            self._sending -= 1
            self._last_activity = anyio.current_time()


async def _whole(
    request: Request,
    service: Serving,
    choices: Sequence[_Choice],
    writer: ChoicesWriter,
    tag: str | None,
) -> Response:
    async with _sessions(service, choices, tag) as sessions, anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_disconnect, request, tg.cancel_scope)
        async with anyio.create_task_group() as collecting:
            for choice, session in zip(choices, sessions, strict=True):
                collecting.start_soon(choice.collect, session, collecting.cancel_scope)
        tg.cancel_scope.cancel()
    failed = next((c.final for c in choices if c.failed()), None)
    if failed is not None:
        raise _failure(failed)
    if any(c.final is None for c in choices):
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    return JSONResponse(writer.whole([c.answer() for c in choices]))


def _failure(final: Delta) -> APIError:
    if final.finish_reason == "cancelled":
        if final.error == "shutdown":
            return shutting_down()
        return ServiceUnavailable(f"the generation was cancelled ({final.error})", code="cancelled")
    return InternalError(final.error or "the generation failed")
