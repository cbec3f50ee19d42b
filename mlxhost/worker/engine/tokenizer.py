"""The model's tokenizer, one copy per thread that uses it, and the prompt limits it tells.

The event loop never waits on a tokenizer: chat templates are rendered and prompts encoded in one
tokenizer thread of their own, and the generation thread decodes with a private copy of the
tokenizer, so the two never share one (fast tokenizers raise "Already borrowed" when two threads
use one at once) and no lock is ever taken on the event loop.

The routes refuse an oversized prompt before encoding it, by the model's context length and the
most characters one token stands for; both are read here, once, at load.

A client's text is text: a chat prompt is rendered with transformers' `sanitize_control_tokens`,
so a control token typed in a message, a tool result, a tool's description or schema, a name or a
system prompt is encoded as its characters, and only what the chat template itself writes becomes
a control token (a user cannot close their turn and forge a system turn, an assistant turn or a
tool call). Ordinary text renders to the same tokens as without it, so prefix caching is as
before. `encode` (a completion's raw prompt) parses special tokens: that is its contract.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from mlxhost.worker.engine.output import Markers
from mlxhost.worker.engine.tool_formats import tool_format

__all__ = ["ChatPrompt", "Tokenizer", "chat_ids", "context_length", "control_tokens", "longest_token"]

logger = logging.getLogger("mlxhost.engine")

T = TypeVar("T")


@dataclass(frozen=True)
class ChatPrompt:
    ids: list[int]
    thinking: bool  # the prompt leaves the model inside a think block (its template opened one)


class Tokenizer:
    """The tokenizer `mlx_lm.load` returned: encoding off the event loop, and a private decoder."""

    def __init__(self, tokenizer: Any) -> None:
        self._encoder = tokenizer  # the tokenizer thread's: chat templates and encoding
        # Only when the tokenizer cannot be copied do the two threads share it, under this lock.
        self.lock: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        self.decoder = self._private_decoder()  # the generation thread's: detokenizing and logprobs
        self.vocab_size = len(tokenizer)
        # The most characters one token stands for: a prompt of n characters is at least
        # n / max_token_chars tokens, which rejects an oversized prompt before encoding it.
        self.max_token_chars = longest_token(tokenizer)
        # What the model writes around its reasoning and its tool calls, and how a call's body
        # reads (mlx-lm picks both from the chat template and vocabulary at load).
        self.has_thinking = bool(getattr(tokenizer, "has_thinking", False))
        self.has_tool_calling = bool(getattr(tokenizer, "has_tool_calling", False))
        self.tool_parser: Callable[[str, Any], Any] | None = getattr(tokenizer, "tool_parser", None)
        markers = Markers(
            getattr(tokenizer, "think_start", None) if self.has_thinking else None,
            getattr(tokenizer, "think_end", None) if self.has_thinking else None,
            getattr(tokenizer, "tool_call_start", None) if self.has_tool_calling else None,
            getattr(tokenizer, "tool_call_end", None) if self.has_tool_calling else None,
        )
        # The control tokens a model may write (its special tokens, and its template's markers),
        # by id: their text comes out marked (textstream.py), so that it never reads as an
        # answer; but a piece of a marker spelled in several tokens comes as text, for the parser
        # to find the marker (output.py: Markers.pieces).
        control = control_tokens(tokenizer)
        pieces = {t for t in control.values() if any(t in m and t != m for m in markers.strings())}
        self.control = {i: t for i, t in control.items() if t not in pieces}
        self.markers = dataclasses.replace(markers, pieces=tuple(sorted(pieces, key=len, reverse=True)))
        # The think block's markers as token ids (one token each in most families, several in
        # some): what a thinking budget needs to see the block open and to close it.
        self.think_ids = _think_ids(tokenizer) if self.has_thinking else None
        # The family's call syntax by the name of mlx-lm's parser module ("qwen3_coder"), and
        # what forces and streams it (None: a syntax calls cannot be forced in, and stream whole).
        # load() records the type it inferred or was told (laguna's parser is glm47's module).
        named = (getattr(tokenizer, "init_kwargs", None) or {}).get("tool_parser_type")
        module = getattr(self.tool_parser, "__module__", "") or ""
        self.tool_parser_type = (named or module.rsplit(".", 1)[-1]) if self.tool_parser is not None else None
        self.tool_format = tool_format(self.tool_parser_type)
        # One encode at a time, off the event loop (see _run). Made in the generation thread,
        # which loads the model: anyio binds the limiter to the event loop at its first use.
        self._limiter = anyio.CapacityLimiter(1)
        self._token_ids: dict[str, int] = {}  # token_id's answers

    def warm(self) -> None:
        """Compile the chat template now, while the model loads: the first request (the one that
        waited through a crash, say) would otherwise pay for it, 20-30 ms of a small template."""
        with contextlib.suppress(Exception), self.lock:  # a template that wants more than this
            self._encoder.apply_chat_template([{"role": "user", "content": "."}], add_generation_prompt=True)

    async def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        def encode() -> list[int]:
            with self.lock:
                return chat_ids(self._encoder, list(messages))

        return await self._run(encode)

    async def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        template_args: Mapping[str, Any] | None = None,
    ) -> ChatPrompt:
        """The generation prompt of a conversation, with tools and template switches (thinking).

        Raises the template's own error (jinja2's TemplateError) when it refuses the conversation.
        """
        encoder = self._encoder

        def render() -> ChatPrompt:
            with self.lock:
                ids = chat_ids(
                    encoder,
                    [dict(m) for m in messages],
                    [dict(t) for t in tools] if tools else None,
                    template_args or {},
                )
            thinking = False
            if getattr(encoder, "has_thinking", False):
                # Searching the ids from the end finds the last marker in a few steps.
                start, end = encoder.rfind_think_start(ids), encoder.rfind_think_end(ids)
                thinking = start > end
            return ChatPrompt(ids, thinking)

        return await self._run(render)

    async def encode(self, text: str) -> list[int]:
        def encode() -> list[int]:
            with self.lock:
                return list(self._encoder.encode(text))

        return await self._run(encode)

    async def render_many(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]], template_args: Mapping[str, Any]
    ) -> list[list[int]]:
        """Each conversation's generation prompt, in one hop to the tokenizer thread."""
        encoder = self._encoder

        def render() -> list[list[int]]:
            with self.lock:
                return [chat_ids(encoder, [dict(m) for m in messages], None, template_args) for messages in conversations]

        return await self._run(render)

    async def token_id(self, word: str) -> int:
        """The id of the token that spells `word` (its first token, when it takes several);
        looked up once (a reranker asks for "yes" and "no" on every request)."""
        if (known := self._token_ids.get(word)) is not None:
            return known
        encoder = self._encoder

        def find() -> int:
            with self.lock:
                found = encoder.convert_tokens_to_ids(word)
                if isinstance(found, int) and found != getattr(encoder, "unk_token_id", None):
                    return found
                return int(encoder.encode(word, add_special_tokens=False)[0])

        self._token_ids[word] = found = await self._run(find)
        return found

    async def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, with the tokenizer's special tokens (an embedding model's closing
        token is added there), in one hop to the tokenizer thread."""

        # A fast tokenizer's Rust batch (what its own encode calls, one text at a time) takes
        # less than half the time of a loop over 64 short texts.
        backend = getattr(self._encoder, "backend_tokenizer", None)

        def encode() -> list[list[int]]:
            with self.lock:
                if backend is not None:
                    return [encoding.ids for encoding in backend.encode_batch(list(texts))]
                return [list(self._encoder.encode(text)) for text in texts]

        return await self._run(encode)

    async def _run(self, encode: Callable[[], T]) -> T:
        # Always in the tokenizer thread, however short the prompt: how long a template takes
        # to render depends on more than its characters (100,000 empty messages took seconds),
        # and the hop costs well under a millisecond. One at a time: the tokenizer is not safe
        # to share between threads, and a long encode must not hold a thread per request.
        return await anyio.to_thread.run_sync(encode, limiter=self._limiter)

    def _private_decoder(self) -> Any:
        try:
            return copy.deepcopy(self._encoder)
        except Exception as exc:  # a tokenizer class that cannot be copied: share it, locked
            logger.warning("the tokenizer cannot be copied (%s); sharing it under a lock", exc)
            self.lock = threading.Lock()
            return self._encoder


def chat_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    template_args: Mapping[str, Any] | None = None,
) -> list[int]:
    """The generation prompt's ids, every string the client sent encoded as text (see the module)."""
    args = dict(template_args or {})
    if getattr(tokenizer, "_chat_template", None) is None:
        return list(
            tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, sanitize_control_tokens=True, **args
            )
        )
    # mlx-lm renders a few families with a Python template of its own (deepseek_v32), which
    # transformers' sanitizing never sees: the same marking and encoding, done around it. These
    # are transformers' own helpers, private ones: a rename fails loudly here, at the first prompt.
    from transformers.utils.chat_template_utils import _get_control_token_patterns, mark_control_tokens

    hf = tokenizer._tokenizer
    pattern, _ = _get_control_token_patterns(hf._get_control_tokens(hf.chat_template or ""))
    text = tokenizer.apply_chat_template(
        mark_control_tokens(messages, pattern),
        tools=mark_control_tokens(tools, pattern),
        add_generation_prompt=True,
        tokenize=False,
        **mark_control_tokens(args, pattern),
    )
    return list(hf(text, add_special_tokens=False, sanitize_control_tokens=True)["input_ids"])


def control_tokens(tokenizer: Any) -> dict[int, str]:
    """Added tokens that are special, or that the chat template writes, by id (whitespace ones,
    Gemma's newline tokens, are text)."""
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    template = getattr(hf, "chat_template", None) or ""
    if not isinstance(template, str):
        template = " ".join(str(t) for t in (template.values() if isinstance(template, dict) else template))
    try:
        added = hf.added_tokens_decoder
    except AttributeError:
        return {}
    return {
        int(token_id): token.content
        for token_id, token in added.items()
        if len(token.content) > 1 and not token.content.isspace() and (token.special or token.content in template)
    }


def longest_token(tokenizer: Any) -> int | None:
    # Each vocabulary entry is written as the characters (byte-level BPE: the bytes) it matches,
    # so no token covers more characters of a prompt than the longest entry has.
    try:
        return max(map(len, tokenizer.get_vocab()), default=0) or None
    except Exception:  # a tokenizer without a readable vocabulary: no bound, encode to know
        return None


def context_length(model: Any) -> int | None:
    args = getattr(model, "args", None)
    for name in ("max_position_embeddings", "context_length", "max_seq_len"):
        value = getattr(args, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _think_ids(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    start, end = getattr(tokenizer, "think_start_tokens", None), getattr(tokenizer, "think_end_tokens", None)
    if not start or not end:
        return None
    return tuple(int(t) for t in start), tuple(int(t) for t in end)
