"""Running a generation and answering with it, whole or streamed, in any dialect.

A generation lives exactly as long as someone wants it. Streaming: the session is opened inside
the response body, which Starlette cancels when the client disconnects. Whole answers: a watcher
task waits for `http.disconnect` while the result is collected and cancels the collection.

What is dialect-specific is the `Writer`: how output becomes frames or a body. What is not lives
here: keep-alives during a long prefill, merging output that comes faster than `stream_interval`,
sorting text into answer, reasoning and tool calls (output.py), the finish reason, and failures.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from mlxhost.config import Settings
from mlxhost.wire.chunks import KEEPALIVE, AnswerFinish, Delta, TokenLogprob
from mlxhost.wire.errors import APIError, InternalError, ServiceUnavailable
from mlxhost.wire.headers import SESSION_HEADER
from mlxhost.worker.engine import Engine, EngineStopped
from mlxhost.worker.generation import GenerationRequest
from mlxhost.worker.output import Output, OutputParser

__all__ = ["Answer", "Serving", "Writer", "respond", "shutting_down"]

CLIENT_CLOSED_REQUEST = 499  # nginx's code; nobody reads it, but the access log does


@dataclass
class Serving:
    """What the routes need, kept on `app.state.serving`."""

    engine: Engine
    settings: Settings
    model_id: str
    accepting: bool = True


@dataclass
class Answer:
    """A finished generation, for a whole response."""

    output: Output
    logprobs: list[TokenLogprob] | None
    final: Delta
    finish: AnswerFinish


class Writer(Protocol):
    """One dialect's way of writing a generation."""

    def opening(self) -> Iterable[bytes]:
        """The frames a stream starts with."""
        ...

    def output(self, out: Output, delta: Delta) -> Iterable[bytes]:
        """Frames for new output (`delta` carries its logprobs and the running token count)."""
        ...

    def closing(self, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        """The frames after the last output: the finish, usage, the stream's end."""
        ...

    def failure(self, error: APIError) -> Iterable[bytes]:
        """The frames that end a stream whose generation failed or was stopped."""
        ...

    def whole(self, answer: Answer) -> dict[str, Any]:
        """The body of a whole response."""
        ...


async def respond(
    request: Request,
    service: Serving,
    generation: GenerationRequest,
    writer: Writer,
    parser: OutputParser | None,
    stream: bool,
) -> Response:
    """Run `generation` and answer with it; `parser` None: all its text is the answer."""
    tag = request.headers.get(SESSION_HEADER)
    if stream:
        return StreamingResponse(
            _stream(service, generation, writer, parser, tag),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
    return await _whole(request, service, generation, writer, parser, tag)


def _sorted(parser: OutputParser | None, delta: Delta) -> Output:
    if parser is None:
        return Output(content=delta.text)
    out = parser.feed(delta.text) if delta.text else Output()
    if delta.finish_reason is not None:
        out.add(parser.finish())
    return out


def _finish(parser: OutputParser | None, final: Delta) -> AnswerFinish:
    if final.finish_reason == "length":
        return "length"
    return "tool_calls" if parser is not None and parser.calls_made else "stop"


async def _stream(
    service: Serving, generation: GenerationRequest, writer: Writer, parser: OutputParser | None, tag: str | None
) -> AsyncIterator[bytes]:
    try:
        async for frame in _frames(service, generation, writer, parser, tag):
            yield frame
    except EngineStopped:
        for frame in writer.failure(shutting_down()):
            yield frame


async def _frames(
    service: Serving, generation: GenerationRequest, writer: Writer, parser: OutputParser | None, tag: str | None
) -> AsyncIterator[bytes]:
    settings = service.settings
    ended = object()
    last_frame = float("-inf")
    async with service.engine.generate(generation, tag) as session:
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
            wait = last_frame + settings.stream_interval - anyio.current_time()
            if wait > 0 and delta.finish_reason is None:
                # Tokens that come faster than `stream_interval` go out as one frame: past a
                # hundred frames a second nobody sees the difference, but the CPU does.
                await session.wait_ended(wait)
                delta = session.merge_ready(delta)
            out = _sorted(parser, delta)
            if out or delta.logprobs:
                for frame in writer.output(out, delta):
                    yield frame
                last_frame = anyio.current_time()
            if delta.finish_reason is None:
                continue
            if delta.finish_reason in ("stop", "length"):
                frames = writer.closing(delta, _finish(parser, delta))
            else:
                frames = writer.failure(_failure(delta))
            for frame in frames:
                yield frame
            return


async def _whole(
    request: Request,
    service: Serving,
    generation: GenerationRequest,
    writer: Writer,
    parser: OutputParser | None,
    tag: str | None,
) -> Response:
    output = Output()
    logprobs: list[TokenLogprob] | None = [] if generation.logprobs is not None else None
    final: Delta | None = None
    async with service.engine.generate(generation, tag) as session:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_disconnect, request, tg.cancel_scope)
            async for delta in session:
                output.add(_sorted(parser, delta))
                if logprobs is not None and delta.logprobs:
                    logprobs.extend(delta.logprobs)
                final = delta if delta.finish_reason else final
            tg.cancel_scope.cancel()
    if final is None:
        return Response(status_code=CLIENT_CLOSED_REQUEST)
    if final.finish_reason not in ("stop", "length"):
        raise _failure(final)
    return JSONResponse(writer.whole(Answer(output, logprobs, final, _finish(parser, final))))


async def _cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def shutting_down() -> ServiceUnavailable:
    return ServiceUnavailable("the server is shutting down; the generation was stopped", code="shutting_down")


def _failure(final: Delta) -> APIError:
    if final.finish_reason == "cancelled":
        if final.error == "shutdown":
            return shutting_down()
        return ServiceUnavailable(f"the generation was cancelled ({final.error})", code="cancelled")
    return InternalError(final.error or "the generation failed")
