"""How the two OpenAI formats write their choices: `ChatWriter` (Chat Completions) and
`CompletionWriter` (legacy Completions), whole or as their stream of chunks (wire/chunks.py)."""

from __future__ import annotations

import dataclasses

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mlxhost.wire.chunks import DONE, AnswerFinish, ChatFormat, CompletionFormat, Delta, sse
from mlxhost.wire.errors import APIError
from mlxhost.worker.api.writer import Answer
from mlxhost.worker.engine.parts import CallArguments, CallBegun, Output, Text

__all__ = ["ChatWriter", "CompletionWriter"]


class _OpenAIStreamEnd:
    """How both OpenAI formats end a choice and a stream: a finish chunk per choice, then usage
    (when asked for) and `[DONE]`; a failure is an error frame and `[DONE]`."""

    fmt: ChatFormat | CompletionFormat

    def finished(self, index: int, final: Delta, finish: AnswerFinish) -> Iterable[bytes]:
        return [sse(self.fmt.finish_chunk(finish, index))]

    def closing(self, finals: Sequence[Delta]) -> Iterable[bytes]:
        if self.fmt.include_usage:
            return [sse(self.fmt.usage_chunk(*finals)), DONE]
        return [DONE]

    def failure(self, error: APIError) -> Iterable[bytes]:
        return [sse(error.body()), DONE]


@dataclass
class ChatWriter(_OpenAIStreamEnd):
    fmt: ChatFormat
    n: int = 1  # choices

    def opening(self) -> Iterable[bytes]:
        return [sse(self.fmt.first_chunk(index)) for index in range(self.n)]

    def output(self, index: int, out: Output, delta: Delta) -> Iterable[bytes]:
        frames = []
        logprobs = bool(delta.logprobs)  # sent with the first content chunk, or one of their own
        for part in out.parts:
            if isinstance(part, Text) and part.kind == "reasoning":
                frames.append(sse(self.fmt.reasoning_chunk(part.text, index)))
            elif isinstance(part, Text):
                frames.append(sse(self.fmt.content_chunk(delta if logprobs else Delta(), part.text, index)))
                logprobs = False
            # A call's index counts its choice's calls: one parser reads each choice.
            elif isinstance(part, CallBegun):
                frames.append(sse(self.fmt.tool_call_start_chunk(part.index, part.id, part.name, index)))
            elif isinstance(part, CallArguments):
                frames.append(sse(self.fmt.tool_call_arguments_chunk(part.index, part.text, index)))
        if logprobs:
            frames.append(sse(self.fmt.content_chunk(delta, "", index)))
        return frames

    def whole(self, answers: Sequence[Answer]) -> dict[str, Any]:
        choices = [
            self.fmt.whole_choice(
                index,
                answer.output.content,
                answer.logprobs,
                answer.final,
                reasoning=answer.output.reasoning,
                tool_calls=tuple(answer.output.tool_calls),
                finish_reason=answer.finish,
            )
            for index, answer in enumerate(answers)
        ]
        return self.fmt.whole_body(choices, *(answer.final for answer in answers))


@dataclass
class CompletionWriter(_OpenAIStreamEnd):
    fmt: CompletionFormat

    def opening(self) -> Iterable[bytes]:
        return []

    def output(self, index: int, out: Output, delta: Delta) -> Iterable[bytes]:
        # The answer's text (control tokens taken out), with the delta's logprobs.
        return [sse(self.fmt.content_chunk(dataclasses.replace(delta, text=out.content), index))]

    def whole(self, answers: Sequence[Answer]) -> dict[str, Any]:
        choices = [
            self.fmt.text_choice(index, answer.output.content, answer.logprobs, answer.final.finish_reason)
            for index, answer in enumerate(answers)
        ]
        return self.fmt.whole_body(choices, *(answer.final for answer in answers))
