"""Turning a `GrammarSpec` into a compiled `Grammar` for the model's tokenizer, with llguidance.

`Grammars` compiles in a worker thread, so a large schema never stalls the event loop, and keeps
the result (a grammar, or the reason it was refused) in a small LRU cache. A JSON schema becomes
llguidance's JSON grammar under fixed options; a forced tool call becomes a Lark grammar around
one JSON body per call. Before anything is compiled, a schema is checked against bounds that keep
a compile well under a second; after, what compiles but no output can satisfy is refused too
(satisfiable.py), so that a model never writes '' or goes on without end.
"""

from __future__ import annotations

import copy
import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import anyio.to_thread
import numpy as np
from llguidance import LLMatcher, LLParserLimits, LLTokenizer

from mlxhost.worker.engine.grammar import MAX_MESSAGE, GrammarError, GrammarSpec
from mlxhost.worker.engine.grammar_mask import Grammar
from mlxhost.worker.engine.satisfiable import why_unsatisfiable
from mlxhost.worker.engine.tool_formats import JSON_OPTIONS, ToolRefused, tool_format
from mlxhost.worker.engine.tool_formats.schemas import MAX_SCHEMA_CHARS, check

__all__ = ["Grammars"]

# Short errors: the verbose form dumps the parser state and the whole grammar into the message.
_LIMITS: Final = LLParserLimits(verbose_errors=False)


class Grammars:
    """Compiles grammars for one tokenizer, off the event loop, and caches them (LRU, bounded)."""

    def __init__(self, tokenizer: Any, vocab_size: int, cache_size: int = 128) -> None:
        # `tokenizer`: mlx-lm's TokenizerWrapper. vocab_size: the model's logits width, which
        # may exceed the tokenizer's own count.
        self._vocab_size = vocab_size
        eos = getattr(tokenizer, "eos_token_ids", None) or [tokenizer.eos_token_id]
        self._eos = sorted(int(t) for t in eos if t is not None)
        # The tokenizer is serialized now, while the model loads and no other thread uses it:
        # later the tokenizer thread encodes with it, and a fast tokenizer used by two threads at
        # once raises "Already borrowed". Building llguidance's tokenizer from it is the slow
        # part (about a second for a large vocabulary): that waits for the first compile.
        self._serialized: str | None = None
        self._unusable = ""
        try:
            backend = copy.copy(tokenizer._tokenizer.backend_tokenizer)
            backend.no_padding()
            backend.no_truncation()
            self._serialized = backend.to_str()
        except Exception as exc:  # a slow (Python) tokenizer: llguidance needs the Rust one
            self._unusable = f"this model's tokenizer cannot be used for constrained output ({exc})"
        self._lltokenizer: LLTokenizer | None = None
        self._cache: OrderedDict[str, Grammar | _Refusal] = OrderedDict()
        self._cache_size = cache_size
        # One compile at a time: the cache is only touched in that thread, and a burst of large
        # schemas queues here instead of taking every worker thread.
        self._limiter = anyio.CapacityLimiter(1)
        self.compile_seconds = 0.0  # the last compile's wall time; 0.0 for a cache hit

    async def compile(self, spec: GrammarSpec) -> Grammar:
        """Validate+compile in a worker thread, cached by spec.key(); raises GrammarError(message,
        spec.param) for a bad or unsupported schema. A refused spec is cached too, so a client
        repeating it costs a lookup."""
        return await anyio.to_thread.run_sync(self._get, spec, limiter=self._limiter)

    def _get(self, spec: GrammarSpec) -> Grammar:
        try:
            key = spec.key()
        except (TypeError, ValueError, RecursionError) as exc:
            raise GrammarError(f"not a JSON schema: {exc}", spec.param) from None
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            self.compile_seconds = 0.0
            if isinstance(cached, _Refusal):
                raise cached.error(spec)
            return cached
        began = time.perf_counter()
        try:
            result: Grammar | _Refusal = self._compile(spec, key)
        except ToolRefused as exc:
            result = _Refusal(exc.message, exc.tool)
        except GrammarError as exc:
            result = _Refusal(exc.message)
        self.compile_seconds = time.perf_counter() - began
        self._cache[key] = result
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        if isinstance(result, _Refusal):
            raise result.error(spec)
        return result

    def _compile(self, spec: GrammarSpec, key: str) -> Grammar:
        if len(key) > MAX_SCHEMA_CHARS:
            raise GrammarError(f"the schema is too large (over {MAX_SCHEMA_CHARS} characters)", spec.param)
        tokenizer = self._tokenizer(spec.param)
        if spec.kind == "json_object":
            source = _json_grammar({"type": "object"}, spec.param)
        elif spec.kind == "json_schema":
            if not isinstance(spec.schema, Mapping):
                raise GrammarError("the schema must be a JSON object", spec.param)
            check(spec.schema, spec.param)
            source = _json_grammar(spec.schema, spec.param)
        elif spec.kind == "tool_calls":
            source = _tool_calls_grammar(spec, tokenizer)
        else:
            raise GrammarError(f"unknown kind of output: {spec.kind!r}", spec.param)
        matcher = LLMatcher(tokenizer, source, log_level=0, limits=_LIMITS)
        if matcher.is_error():
            if spec.kind == "tool_calls":
                _refuse_failing_tool(spec, tokenizer)
            raise GrammarError(_message(matcher.get_error()), spec.param)
        # llguidance's own refusals first (they say which keywords contradict each other), then
        # what it compiles but no output can satisfy: a model would write '' or never finish.
        if spec.kind == "json_schema":
            if (why := why_unsatisfiable(spec.schema)) is not None:
                raise GrammarError(why, spec.param)
        elif spec.kind == "tool_calls":
            _refuse_unsatisfiable_tool(spec)
        _refuse_dead_start(matcher.deep_copy(), spec.param)
        return Grammar(matcher, tokenizer.vocab_size, self._eos)

    def _tokenizer(self, param: str) -> LLTokenizer:
        if self._lltokenizer is None:
            if self._serialized is None:
                raise GrammarError(self._unusable, param)
            try:
                try:
                    built = LLTokenizer(self._serialized, n_vocab=self._vocab_size, eos_token=self._eos)
                except ValueError:
                    # More tokens than logits (a model that never writes its last added tokens):
                    # the mask covers them all, and is cut to the logits' width when applied.
                    built = LLTokenizer(self._serialized, eos_token=self._eos)
            except Exception as exc:
                self._unusable = f"this model's tokenizer cannot be used for constrained output ({exc})"
                self._serialized = None
                raise GrammarError(self._unusable, param) from None
            self._lltokenizer = built
            self._serialized = None  # megabytes, needed once
        return self._lltokenizer


def _json_grammar(schema: Mapping[str, Any], param: str) -> str:
    try:
        return LLMatcher.grammar_from_json_schema(_with_options(schema))
    except (TypeError, ValueError) as exc:
        raise GrammarError(_message(str(exc)), param) from None


def _with_options(schema: Mapping[str, Any]) -> dict[str, Any]:
    # Only the top level's "x-guidance" counts: ours replaces whatever the client sent there.
    return {**{k: v for k, v in schema.items() if k != "x-guidance"}, "x-guidance": JSON_OPTIONS}


@dataclass(frozen=True)
class _Refusal:
    """A cached refusal: the request a later hit comes from names its own fields."""

    message: str
    tool: int | None = None  # the index in spec.tools of the tool it is about

    def error(self, spec: GrammarSpec) -> GrammarError:
        if self.tool is None:
            return GrammarError(self.message, spec.param)
        return ToolRefused(self.message, spec.tools, self.tool, spec.param)


def _tool_calls_grammar(spec: GrammarSpec, tokenizer: LLTokenizer) -> str:
    """The family's own call syntax (tool_formats/), as llguidance's Lark."""
    fmt = tool_format(spec.format)
    if fmt is None:
        raise GrammarError(f"this model's tool calls ({spec.format}) cannot be forced", spec.param)
    source = fmt.grammar(spec.tools, spec.parallel, lambda text: _tag(text, tokenizer), spec.param)
    return LLMatcher.grammar_from_lark(source)


def _tag(text: str, tokenizer: LLTokenizer) -> str:
    # A tag the model writes as one token (a special token, as <tool_call> is in Qwen's and the
    # demo's vocabularies) is matched by its id: llguidance does not match a quoted string to a
    # special token (its mask allows the token, then consuming it fails).
    if not text:
        return ""
    ids = tokenizer.tokenize_str(text, parse_special=True)
    if len(ids) == 1:
        return f"<[{ids[0]}]>"
    return json.dumps(text, ensure_ascii=False)


def _refuse_failing_tool(spec: GrammarSpec, tokenizer: LLTokenizer) -> None:
    """Raise for the first tool whose parameters llguidance refuses on their own, if any."""
    for i, tool in enumerate(spec.tools):
        parameters = {"type": "object"} if tool.parameters is None else tool.parameters
        try:
            failed, errors = LLMatcher.validate_grammar_with_warnings(
                LLMatcher.grammar_from_json_schema(_with_options(parameters)), tokenizer, limits=_LIMITS
            )
        except (TypeError, ValueError) as exc:
            failed, errors = True, [str(exc)]
        if failed:
            raise ToolRefused(_message(f"tool '{tool.name}': {' '.join(errors)}"), spec.tools, i, spec.param)


def _refuse_unsatisfiable_tool(spec: GrammarSpec) -> None:
    # Every tool, not only those the grammar could still call: a forced call to a tool that no
    # arguments satisfy is the client's mistake, whichever tool the model would have picked.
    for i, tool in enumerate(spec.tools):
        if tool.parameters is not None and (why := why_unsatisfiable(tool.parameters)) is not None:
            raise ToolRefused(
                f"tool '{tool.name}': {why.replace('the schema', 'its parameters')}",
                spec.tools,
                i,
                spec.param,
            )


def _refuse_dead_start(matcher: LLMatcher, param: str) -> None:
    """Refuse a grammar that allows no first token: generation would end at once, writing ''."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8))
    if matcher.is_error() or not bits.any():
        error = matcher.get_error().replace("<non-verbose/>", "")
        why = f" (llguidance: {' '.join(error.split())[:MAX_MESSAGE]})" if error.strip() else ""
        raise GrammarError(f"no JSON value satisfies the schema: it allows no first token{why}", param)


def _message(error: str) -> str:
    error = " ".join(error.split())
    if len(error) > MAX_MESSAGE:
        error = error[:MAX_MESSAGE] + "…"
    return f"the schema cannot be enforced: {error}"
