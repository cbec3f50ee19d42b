"""What every family's tool-format tests share: the tools, a sampler that walks a family's forced-
call grammar with random tokens, and the checks that what it wrote is read back as valid calls and
streams as deltas that assemble to the whole call.

The sampler needs no model: at each step it picks a random token among those the grammar allows
(so it tries far stranger outputs than a model would), which makes "every forced call parses and
validates" a property of the grammar and the family's mlx-lm parser alone.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema_rs
import numpy as np
from llguidance import LLMatcher, LLTokenizer
from tokenizers import Tokenizer

from mlxhost.worker.engine.grammar import ToolSpec
from mlxhost.worker.engine.tool_formats import PartialCall, ToolFormat

__all__ = [
    "TOOLS",
    "GrammarSampler",
    "assert_streams",
    "bodies_of",
    "openai_tools",
    "read_calls",
]

# Bounded, so that a random walk ends: every string has a maxLength or an enum, every array a
# maxItems. Between them they hold each JSON type, a nested object, an optional property, an enum
# without a type, and a tool with no parameters.
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "get_weather",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "units": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "add",
        {
            "type": "object",
            "properties": {
                "a": {"type": "number", "minimum": -1000, "maximum": 1000},
                "b": {"type": "integer"},
            },
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "tag_files",
        {
            "type": "object",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
                "force": {"type": "boolean"},
                "meta": {
                    "type": "object",
                    "properties": {"k": {"type": "string", "maxLength": 5}},
                    "required": ["k"],
                    "additionalProperties": False,
                },
            },
            "required": ["paths", "force"],
            "additionalProperties": False,
        },
    ),
    ToolSpec("ping", {"type": "object", "properties": {}, "additionalProperties": False}),
)


def openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The tools as chat templates and mlx-lm's parsers see them: OpenAI's function form."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "parameters": dict(t.parameters or {"type": "object"})},
        }
        for t in tools
    ]


class GrammarSampler:
    """Walks a family's forced-call grammar for one tokenizer (a demo model's tokenizer.json)."""

    def __init__(self, tokenizer_json: Path, eos: int = 2) -> None:
        text = Path(tokenizer_json).read_text(encoding="utf-8")
        self.hf = Tokenizer.from_str(text)
        self.vocab_size = self.hf.get_vocab_size()
        self.eos = eos
        self.lltokenizer = LLTokenizer(text, n_vocab=self.vocab_size, eos_token=[eos])
        self.texts = [self.hf.decode([t], skip_special_tokens=False) for t in range(self.vocab_size)]

    def tag(self, text: str) -> str:
        # As the grammar compiler renders a marker: by id when it is one token.
        ids = self.lltokenizer.tokenize_str(text, parse_special=True)
        return f"<[{ids[0]}]>" if len(ids) == 1 else json.dumps(text, ensure_ascii=False)

    def grammar(self, fmt: ToolFormat, tools: Sequence[ToolSpec], parallel: bool) -> str:
        return LLMatcher.grammar_from_lark(fmt.grammar(tools, parallel, self.tag, "tools"))

    def sample(self, grammar: str, seed: int, max_tokens: int = 2000, closing: str = "") -> str:
        """One random output of `grammar`; fails if it cannot end within `max_tokens`.

        Where the grammar allows ending (end of text) it mostly ends; where it allows going on
        with `closing` (a section's end marker, inside which more calls may come) it mostly goes
        that way, so that a walk writes a few calls, not dozens."""
        rng = random.Random(seed)
        matcher = LLMatcher(self.lltokenizer, grammar, log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        ids: list[int] = []
        text = ""
        for _ in range(max_tokens):
            if matcher.is_stopped():
                break
            bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
            allowed = np.flatnonzero(bits[: self.vocab_size]).tolist()
            assert allowed, f"the grammar allows no token after {text!r}"
            if self.eos in allowed and (len(allowed) == 1 or rng.random() < 0.7):
                break
            choices = [t for t in allowed if t != self.eos]
            closers = [t for t in choices if _continues(text, self.texts[t], closing)] if closing else []
            token = rng.choice(closers if closers and rng.random() < 0.7 else choices)
            assert matcher.consume_token(token), matcher.get_error()
            ids.append(token)
            text += self.texts[token]  # near enough to steer by; the result is decoded whole
        else:
            raise AssertionError(
                f"no end in {max_tokens} tokens: {self.hf.decode(ids, skip_special_tokens=False)!r}"
            )
        return self.hf.decode(ids, skip_special_tokens=False)


def _continues(text: str, piece: str, marker: str) -> bool:
    """Whether `piece` after `text` writes more of `marker` (starting it, or going on with it)."""
    if not piece:
        return False
    for begun in range(min(len(text), len(marker) - 1), -1, -1):
        if begun == 0 or text.endswith(marker[:begun]):
            rest = marker[begun:]
            if rest.startswith(piece) or piece.startswith(rest):
                return True
    return False


def bodies_of(fmt: ToolFormat, text: str) -> list[str]:
    """The call bodies in `text` (each between the family's markers), and nothing but whitespace
    outside them. A family with no end marker (Mistral) has one body: the rest of the text."""
    bodies = []
    rest = text
    while rest.strip():
        assert rest.lstrip().startswith(fmt.call_start), f"text outside a call: {rest!r}"
        rest = rest.lstrip()[len(fmt.call_start) :]
        if not fmt.call_end:
            bodies.append(rest)
            break
        end = rest.index(fmt.call_end)
        bodies.append(rest[:end])
        rest = rest[end + len(fmt.call_end) :]
    return bodies


def read_calls(fmt: ToolFormat, text: str, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The calls in a forced output, by the family's own mlx-lm parser, each checked against its
    tool's schema: {"name", "arguments"} with arguments a dict."""
    by_name = {t.name: t for t in tools}
    calls = []
    for body in bodies_of(fmt, text):
        for call in fmt.parse(body, openai_tools(tools)):
            assert call["name"] in by_name, (call, text)
            schema = dict(by_name[call["name"]].parameters or {"type": "object"})
            arguments = call["arguments"]
            assert isinstance(arguments, dict), (call, text)
            assert jsonschema_rs.validator_for(schema).is_valid(arguments), (call, text)
            calls.append(call)
    return calls


def assert_streams(fmt: ToolFormat, body: str, tools: Sequence[ToolSpec], seed: int) -> list[PartialCall]:
    """Read `body` at random prefixes, as a stream would: every call's name, once known, never
    changes, and its arguments only ever grow, each a prefix of the finished call's JSON text.
    Returns what the whole body reads as."""
    rng = random.Random(seed)
    forms = openai_tools(tools)
    final = [(c["name"], json.dumps(c["arguments"], ensure_ascii=False)) for c in fmt.parse(body, forms)]
    cuts = sorted({rng.randrange(len(body) + 1) for _ in range(12)} | set(range(0, len(body) + 1, 7)))
    seen: list[PartialCall] = []
    for cut in cuts:
        partial = fmt.partial(body[:cut], forms)
        assert len(partial) >= len(seen) - 0, (body[:cut], partial, seen)
        assert len(partial) <= len(final), (body[:cut], partial, final)
        for i, call in enumerate(partial):
            name, arguments = final[i]
            if call.name is not None:
                assert call.name == name, (body[:cut], call, final[i])
            else:
                assert call.arguments == "", (body[:cut], call)
            assert arguments.startswith(call.arguments), (body[:cut], call.arguments, arguments)
            if i < len(seen):
                assert call.arguments.startswith(seen[i].arguments), (body[:cut], call, seen[i])
        seen = partial
    return seen
