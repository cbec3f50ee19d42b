"""Constrained decoding: an output a request requires, enforced token by token with llguidance.

A request's `response_format` (a JSON object, a JSON schema) or a forced `tool_choice` becomes a
`GrammarSpec`. `Grammars` compiles it for the model's tokenizer in a worker thread, so a large
schema never stalls the event loop, and keeps the result in a small LRU cache. The compiled
`Grammar` hands each sequence a fresh logits processor; BatchGenerator calls it once per step in
the generation thread, where it feeds the matcher the newest token and masks every token the
grammar does not allow next. Rows without one keep to the batched path, so constrained and free
sequences share a batch.

Errors::

    GrammarError  a schema or grammar that cannot be enforced, or that no output satisfies (a
                  reference that requires itself without end, see satisfiable.py); `param` names
                  the request field

llguidance's own MLX helper applies the mask with a Metal kernel, which the CPU backend lacks;
the mask goes through numpy and `mx.where` here instead, which both backends run.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import anyio
import anyio.to_thread
import mlx.core as mx
import numpy as np
from llguidance import LLMatcher, LLParserLimits, LLTokenizer
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

from mlxhost.worker.engine.satisfiable import why_unsatisfiable

__all__ = ["Grammar", "GrammarError", "GrammarProcessor", "GrammarSpec", "Grammars", "ToolSpec", "closed"]

logger = logging.getLogger("mlxhost.engine")

# The cost of compiling a schema grows with its size, and with the square of an object's optional
# properties (llguidance enumerates which of them may come next): these bounds keep a compile
# well under a second. They admit what OpenAI's strict mode admits (5,000 properties in all).
MAX_SCHEMA_CHARS: Final = 512 * 1024
MAX_DEPTH: Final = 64  # nested JSON levels; llguidance's own parser stops at 128
MAX_PROPERTIES: Final = 5000
MAX_OPTIONAL_PROPERTIES: Final = 1000  # in one object

# JSON is written as Python's json.dumps and Qwen-family models write it: ", " and ": ", no other
# whitespace. Any whitespace the grammar allows, a model may loop on until max_tokens (small and
# random-weight models do: a bounded pattern of a few spaces or a line break and indent per position
# still let the demo model spend 120 tokens on it); a fixed layout also keeps outputs comparable.
_JSON_OPTIONS: Final = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
    # Whatever llguidance cannot enforce is refused rather than skipped ("lenient" would ignore
    # unknown keywords), so an output the grammar allows always validates.
    "lenient": False,
    "coerce_one_of": False,
}
# Short errors: the verbose form dumps the parser state and the whole grammar into the message.
_LIMITS: Final = LLParserLimits(verbose_errors=False)
_MAX_MESSAGE = 500


class GrammarError(Exception):
    """A schema or grammar llguidance refuses; `param` names the request field it came from."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: Mapping[str, Any] | None  # the function's JSON schema (None: any object)
    param: str | None = None  # the request field of its parameters, for errors (None: the spec's)


@dataclass(frozen=True)
class GrammarSpec:
    """What the output must be. Hashable via `key()` (the JSON of it) for the cache."""

    kind: Literal["json_object", "json_schema", "tool_calls"]
    param: str  # the request field to name in errors, e.g. "response_format.json_schema.schema"
    schema: Mapping[str, Any] | None = None  # json_schema
    tools: tuple[ToolSpec, ...] = ()  # tool_calls: one of these (by name) per call
    parallel: bool = True  # tool_calls: one or more calls (False: exactly one)
    call_start: str = "<tool_call>"  # tool_calls: the model's tags around each call
    call_end: str = "</tool_call>"

    def key(self) -> str:
        """The spec as JSON; raises ValueError or TypeError for a schema that is not JSON.

        Key order is kept, not sorted: llguidance writes properties in schema order, so two
        schemas that differ only in order are different grammars. `param` is left out, since
        it does not change the grammar.
        """
        return json.dumps(
            {
                "kind": self.kind,
                "schema": self.schema,
                "tools": [[t.name, t.parameters] for t in self.tools],
                "parallel": self.parallel,
                "call_start": self.call_start,
                "call_end": self.call_end,
            },
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=False,
        )


class Grammar:
    """A compiled grammar; each sequence gets its own matcher through `processor()`."""

    def __init__(self, matcher: LLMatcher, vocab_size: int, eos: list[int]) -> None:
        # Never advanced: every sequence starts from a copy, which shares the compiled grammar.
        self._matcher = matcher
        self._vocab_size = vocab_size
        self._eos = eos

    def processor(self) -> GrammarProcessor:
        """A fresh per-sequence logits processor (see `GrammarProcessor` for the call protocol)."""
        return GrammarProcessor(self._matcher.deep_copy(), self._vocab_size, self._eos)


class GrammarProcessor:
    """Masks one sequence's logits to what its grammar allows next.

    BatchGenerator calls it once per decode step with the sequence's token context: the first
    call with the prompt alone, each later one with the token sampled at the previous step
    appended. Runs in the generation thread only.

    A grammar that cannot go on (llguidance in error, a limit reached, no token allowed) ends the
    sequence with EOS, and says why in `failure`: the output so far does not satisfy it, and the
    engine must not report the ending as a plain stop.
    """

    def __init__(self, matcher: LLMatcher, vocab_size: int, eos: list[int]) -> None:
        self._matcher = matcher
        self._vocab_size = vocab_size
        self._eos = eos
        self._bitmask = allocate_token_bitmask(1, vocab_size)
        self._seen: int | None = None  # context length at the last call; None before the first
        self.failure: str | None = None

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        width = logits.shape[-1]
        allowed = None
        if self.failure is None:
            try:
                self._advance(tokens)
                allowed = self._allowed()
            except Exception as exc:
                logger.exception("grammar matcher failed; ending the sequence")
                self.failure = f"the grammar matcher failed ({type(exc).__name__})"
            if allowed is not None and not allowed[:width].any():
                # Only tokens past the logits' width: the model cannot write any of them.
                logger.warning("grammar allows no token the model can write; ending the sequence")
                self.failure, allowed = "the grammar allows no token the model can write", None
        if allowed is None:
            # Raising here would end the whole engine; ending this one sequence is enough.
            self.failure = self.failure or "the grammar cannot go on"
            allowed = np.zeros(self._vocab_size, dtype=np.bool_)
            allowed[[t for t in self._eos if t < self._vocab_size]] = True
        return mx.where(mx.array(_fit(allowed, width)), logits, -mx.inf)

    def _advance(self, tokens: mx.array) -> None:
        length = tokens.shape[0]
        if self._matcher.is_stopped():
            # Past the end: the sequence sampled EOS, and BatchGenerator runs one more step (with
            # EOS in the context) before it drops the row.
            return
        if self._seen is None:  # the first call: only the prompt, nothing generated yet
            self._seen = length
            return
        new: list[int] = tokens[self._seen :].tolist()  # type: ignore[assignment]
        self._seen = length
        if new and not self._matcher.consume_tokens(new):
            logger.warning("grammar refused a token; ending the sequence: %s", self._error())

    def _allowed(self) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """The tokens allowed next, or None (and `failure` said) when there are none: the matcher
        is in error (it never leaves it) or at a dead end."""
        if not self._matcher.is_error():
            fill_next_token_bitmask(self._matcher, self._bitmask)
        if self._matcher.is_error():
            logger.warning("grammar failed; ending the sequence: %s", self._error())
            self.failure = f"llguidance: {self._error()}"
            return None
        # Bit i of word w is token 32w + i; int32 words are little-endian on every MLX platform.
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")[: self._vocab_size]
        if not bits.any():  # a dead end (what compiles has a first token: see _refuse_dead_start)
            logger.warning("grammar allows no token; ending the sequence")
            self.failure = "the grammar allows no next token"
            return None
        return bits.view(np.bool_)

    def _error(self) -> str:
        return " ".join(self._matcher.get_error().replace("<non-verbose/>", "").split())[:_MAX_MESSAGE]


def _fit(allowed: np.ndarray[Any, np.dtype[np.bool_]], width: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    # The logits may be wider than the tokenizer's vocabulary (padded embeddings): those ids stand
    # for no text, so they are never allowed. Or narrower: the model cannot write the rest anyway.
    if allowed.shape[0] >= width:
        return allowed[:width]
    return np.concatenate([allowed, np.zeros(width - allowed.shape[0], dtype=np.bool_)])


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
        except _ToolRefused as exc:
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
            _check(spec.schema, spec.param)
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


# The keywords whose values are schemas, lists of schemas, or maps of names to schemas.
_SUBSCHEMA: Final = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_SUBSCHEMA_LISTS: Final = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS: Final = ("properties", "$defs", "definitions", "patternProperties")


def closed(schema: Any) -> Any:
    """A schema as OpenAI's strict mode reads it: an object whose schema lists its properties and
    says nothing of others allows no others (`additionalProperties: false`), at every level.

    Strict schemas are meant to be written that way, but clients often leave it out; without it a
    model may go on inventing keys until it runs out of tokens.
    """
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if key in out:
            out[key] = closed(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: closed(s) for name, s in out[key].items()}
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    return out


def _json_grammar(schema: Mapping[str, Any], param: str) -> str:
    try:
        return LLMatcher.grammar_from_json_schema(_with_options(schema))
    except (TypeError, ValueError) as exc:
        raise GrammarError(_message(str(exc)), param) from None


def _with_options(schema: Mapping[str, Any]) -> dict[str, Any]:
    # Only the top level's "x-guidance" counts: ours replaces whatever the client sent there.
    return {**{k: v for k, v in schema.items() if k != "x-guidance"}, "x-guidance": _JSON_OPTIONS}


def _tool_calls_grammar(spec: GrammarSpec, tokenizer: LLTokenizer) -> str:
    """The Hermes/Qwen form mlx-lm's json_tools parser reads, call after call:

        <tool_call>
        {"name": "<name>", "arguments": {...}}
        </tool_call>

    The body is one JSON schema, an anyOf with one branch per tool, each an object whose "name"
    is that tool's and whose "arguments" are its parameters (llguidance keeps "name" first).
    """
    if not spec.tools:
        raise GrammarError("no tools to call", spec.param)
    branches = []
    for i, tool in enumerate(spec.tools):
        if not isinstance(tool.name, str) or not tool.name:
            raise GrammarError("every tool needs a name", spec.param)
        parameters = {"type": "object"} if tool.parameters is None else tool.parameters
        if not isinstance(parameters, Mapping):
            raise GrammarError(f"tool '{tool.name}': the parameters must be a JSON object", spec.param)
        _check(parameters, spec.param)
        # The parameters move into a larger document: their local references must follow.
        arguments = _rebase(parameters, f"#/anyOf/{i}/properties/arguments")
        branches.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    body = json.dumps({"anyOf": branches, "x-guidance": _JSON_OPTIONS}, ensure_ascii=False)
    start, end = _tag(spec.call_start, tokenizer), _tag(spec.call_end, tokenizer)
    # Laid out as chat templates write a call: the tags on lines of their own, calls a line apart.
    rules = [
        "start: call (NL call)*" if spec.parallel else "start: call",
        f"call: {start} NL body NL {end}",
        f"body: %json {body}",
        'NL: "\\n"',
    ]
    return LLMatcher.grammar_from_lark("\n".join(rules))


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


class _ToolRefused(GrammarError):
    """A tool_calls spec refused for one tool's parameters: `tool` is its index in spec.tools."""

    def __init__(self, message: str, spec: GrammarSpec, tool: int) -> None:
        super().__init__(message, spec.tools[tool].param or spec.param)
        self.tool = tool


@dataclass(frozen=True)
class _Refusal:
    """A cached refusal: the request a later hit comes from names its own fields."""

    message: str
    tool: int | None = None  # the index in spec.tools of the tool it is about

    def error(self, spec: GrammarSpec) -> GrammarError:
        if self.tool is None:
            return GrammarError(self.message, spec.param)
        return _ToolRefused(self.message, spec, self.tool)


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
            raise _ToolRefused(_message(f"tool '{tool.name}': {' '.join(errors)}"), spec, i)


def _refuse_unsatisfiable_tool(spec: GrammarSpec) -> None:
    # Every tool, not only those the grammar could still call: a forced call to a tool that no
    # arguments satisfy is the client's mistake, whichever tool the model would have picked.
    for i, tool in enumerate(spec.tools):
        if tool.parameters is not None and (why := why_unsatisfiable(tool.parameters)) is not None:
            raise _ToolRefused(f"tool '{tool.name}': {why.replace('the schema', 'its parameters')}", spec, i)


def _refuse_dead_start(matcher: LLMatcher, param: str) -> None:
    """Refuse a grammar that allows no first token: generation would end at once, writing ''."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8))
    if matcher.is_error() or not bits.any():
        error = matcher.get_error().replace("<non-verbose/>", "")
        why = f" (llguidance: {' '.join(error.split())[:_MAX_MESSAGE]})" if error.strip() else ""
        raise GrammarError(f"no JSON value satisfies the schema: it allows no first token{why}", param)


def _message(error: str) -> str:
    error = " ".join(error.split())
    if len(error) > _MAX_MESSAGE:
        error = error[:_MAX_MESSAGE] + "…"
    return f"the schema cannot be enforced: {error}"


def _check(schema: Mapping[str, Any], param: str) -> None:
    """Refuse, before compiling, what would take llguidance too long (see MAX_*)."""
    properties = 0
    for node, depth in _walk(schema):
        if depth > MAX_DEPTH:
            raise GrammarError(f"the schema is nested too deeply (over {MAX_DEPTH} levels)", param)
        if isinstance(node, Mapping) and isinstance(node.get("properties"), Mapping):
            names = node["properties"]
            properties += len(names)
            required = node.get("required")
            optional = len(set(names) - set(required)) if isinstance(required, list) else len(names)
            if optional > MAX_OPTIONAL_PROPERTIES:
                raise GrammarError(
                    f"an object in the schema has over {MAX_OPTIONAL_PROPERTIES} optional properties", param
                )
    if properties > MAX_PROPERTIES:
        raise GrammarError(f"the schema has over {MAX_PROPERTIES} properties", param)


def _walk(value: Any) -> Iterator[tuple[Any, int]]:
    # Iterative: a hostile schema may be nested deeper than Python's recursion limit.
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        if depth > MAX_DEPTH:
            continue
        if isinstance(node, Mapping):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, (Mapping, list)))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, (Mapping, list)))


# Keywords whose values are data, not schemas: a "$ref" in there is a value to match, not a link.
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
# Keywords whose values map names to schemas: every value is a schema, whatever its name.
_SCHEMA_MAPS: Final = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)


def _rebase(schema: Any, prefix: str) -> Any:
    """`schema` with its local references ("#", "#/...") made relative to `prefix`, the place
    the schema is moved to (depth already bounded by `_check`)."""
    if isinstance(schema, list):
        return [_rebase(s, prefix) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for name, value in schema.items():
        if name == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            out[name] = prefix + value[1:]
        elif name in _DATA_KEYWORDS:
            out[name] = value
        elif name in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[name] = {k: _rebase(v, prefix) for k, v in value.items()}
        else:
            out[name] = _rebase(value, prefix)
    return out
