"""What a dialect writes an answer with: a `Writer` of one choice's frames and body (Messages,
Responses) or a `ChoicesWriter` of several (the OpenAI formats, with `n`), and the `Answer` of a
finished choice it writes a whole body from. answer.py runs the generations and calls them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mlxhost.wire.chunks import AnswerFinish, Delta, TokenLogprob
from mlxhost.wire.errors import APIError
from mlxhost.worker.engine.parts import Output

__all__ = ["Answer", "ChoicesWriter", "Writer"]


@dataclass
class Answer:
    """A finished generation (one choice), for a whole response."""

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


class ChoicesWriter(Protocol):
    """A dialect's way of writing the choices of one request, each told by its index."""

    def opening(self) -> Iterable[bytes]:
        """The frames a stream starts with, for every choice."""
        ...

    def output(self, index: int, out: Output, delta: Delta) -> Iterable[bytes]:
        """Frames for new output of choice `index`."""
        ...

    def finished(self, index: int, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        """The frames after the last output of choice `index`."""
        ...

    def closing(self, finals: Sequence[Delta]) -> Iterable[bytes]:
        """The frames once every choice finished (`finals` by index): usage, the stream's end."""
        ...

    def failure(self, error: APIError) -> Iterable[bytes]:
        """The frames that end a stream one of whose generations failed or was stopped."""
        ...

    def whole(self, answers: Sequence[Answer]) -> dict[str, Any]:
        """The body of a whole response, `answers` by index."""
        ...
