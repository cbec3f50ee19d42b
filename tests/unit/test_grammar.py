"""Grammars on the tiny model: whatever its random weights would write, the output must parse.

Free output of the demo model is garbage, so a constrained output that parses and validates is
the grammar's doing. Generation runs through mlx-lm's real BatchGenerator, constrained rows side
by side with free ones, at temperature 1.0. The schemas and tools a grammar refuses, and its
cache, are in test_grammar_errors.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jsonschema_rs
import mlx.core as mx
import numpy as np
import pytest
from llguidance import LLMatcher, LLParserLimits
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_sampler
from mlx_lm.tool_parsers.json_tools import parse_tool_call

from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams
from mlxhost.worker.engine.grammar import GrammarError, GrammarSpec, ToolSpec
from mlxhost.worker.engine.grammar_compiler import Grammars
from mlxhost.worker.engine.grammar_mask import Grammar
from mlxhost.worker.engine.options import EngineOptions
from tests.unit.grammar_helpers import WEATHER, compile_, grammars_fixture, loaded_fixture  # noqa: F401

Processor = Callable[[mx.array, mx.array], mx.array]

PET: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "owner": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}, "vip": {"type": "boolean"}},
            "required": ["city", "vip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "kind", "age", "tags", "owner"],
    "additionalProperties": False,
}
# Local references: the grammar moves these parameters into a larger schema, and must move the
# references with them.
LOOKUP: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"$ref": "#/$defs/short"}, "limit": {"$ref": "#/$defs/limits/count"}},
    "required": ["query", "limit"],
    "additionalProperties": False,
    "$defs": {
        "short": {"type": "string", "maxLength": 10},
        "limits": {"count": {"type": "integer", "minimum": 1, "maximum": 5}},
    },
}
TOOLS = (ToolSpec("get_weather", WEATHER), ToolSpec("lookup", LOOKUP))


def generate(
    loaded: tuple[Any, Any], rows: Sequence[list[Processor]], max_tokens: int
) -> list[tuple[list[int], str]]:
    """Each row's tokens (EOS dropped) and finish reason, all rows in one batch at temperature 1."""
    model, tokenizer = loaded
    mx.random.seed(0)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Answer in JSON."}], add_generation_prompt=True
    )
    eos = sorted(tokenizer.eos_token_ids)
    generator = BatchGenerator(model, stop_tokens=[[t] for t in eos], completion_batch_size=64)
    try:
        uids = generator.insert(
            [list(prompt)] * len(rows),
            max_tokens=[max_tokens] * len(rows),
            samplers=[make_sampler(temp=1.0)] * len(rows),
            logits_processors=[list(r) for r in rows],
        )
        tokens: dict[int, list[int]] = {u: [] for u in uids}
        finished: dict[int, str] = {}
        while len(finished) < len(uids):
            for response in generator.next()[1]:
                tokens[response.uid].append(response.token)
                if response.finish_reason is not None:
                    finished[response.uid] = response.finish_reason
    finally:
        generator.close()
    return [([t for t in tokens[u] if t not in eos], finished[u]) for u in uids]


def text_of(loaded: tuple[Any, Any], ids: list[int]) -> str:
    # The exact text, special tokens included, as the grammar saw it.
    return str(
        loaded[1]._tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    )


def test_json_schema_outputs_parse_and_validate_beside_free_rows(
    loaded: tuple[Any, Any], grammars: Grammars
) -> None:
    grammar = compile_(grammars, GrammarSpec("json_schema", "response_format.json_schema.schema", PET))
    rows = [[grammar.processor()] if i % 5 else [] for i in range(30)]
    results = generate(loaded, rows, max_tokens=400)

    validator = jsonschema_rs.validator_for(PET)
    constrained = [(r, res) for r, res in zip(rows, results, strict=True) if r]
    assert len(constrained) == 24
    for _, (ids, finish) in constrained:
        text = text_of(loaded, ids)
        assert finish == "stop", text  # the grammar ended it: EOS, not the length limit
        output = json.loads(text)
        assert validator.is_valid(output), text
        assert list(output) == list(PET["properties"])  # in schema order
    free = [res for r, res in zip(rows, results, strict=True) if not r]
    assert all(ids or finish == "stop" for ids, finish in free)
    assert sum(len(ids) for ids, _ in free) > 0


def calls_in(text: str, start: str = "<tool_call>", end: str = "</tool_call>") -> list[str]:
    """The bodies between the tags; nothing but whitespace may lie outside them."""
    pattern = re.escape(start) + "(.*?)" + re.escape(end)
    assert re.sub(pattern, "", text, flags=re.DOTALL).strip() == "", text
    return re.findall(pattern, text, flags=re.DOTALL)


def test_tool_calls_parse_and_validate_against_the_named_tool(
    loaded: tuple[Any, Any], grammars: Grammars
) -> None:
    single = compile_(grammars, GrammarSpec("tool_calls", "tools", tools=TOOLS, parallel=False))
    many = compile_(grammars, GrammarSpec("tool_calls", "tools", tools=TOOLS, parallel=True))
    # (Tags that are not single tokens, written out as text: the families' tests.)
    rows = [[g.processor()] for g in [single] * 6 + [many] * 4] + [[]] * 3
    results = generate(loaded, rows, max_tokens=400)

    validators = {t.name: jsonschema_rs.validator_for(dict(t.parameters or {})) for t in TOOLS}
    counts = []
    for i, (ids, finish) in enumerate(results[:10]):
        text = text_of(loaded, ids)
        if 6 <= i < 10 and finish == "length":
            # One or more calls: the grammar lets a model go on calling, so random weights may
            # run to the limit; the calls it finished must still be sound.
            text = text[: text.rindex("</tool_call>") + len("</tool_call>")]
        else:
            assert finish == "stop", text
        bodies = calls_in(text)
        counts.append(len(bodies))
        for body in bodies:
            call = parse_tool_call(body)
            assert list(call) == ["name", "arguments"], body
            assert validators[call["name"]].is_valid(call["arguments"]), body
    assert counts[:6] == [1] * 6  # parallel=False: exactly one call
    assert min(counts[6:]) >= 1
    assert all(ids for ids, _ in results[10:])  # the free rows generated too


def replay(grammar: Grammar, ids: list[int], vocab_size: int) -> Iterator[np.ndarray[Any, Any]]:
    """Drive a processor as BatchGenerator does: the prompt first, then one token more each step;
    yields the allowed-token mask before each token and after the last."""
    processor = grammar.processor()
    prompt = [1, 4, 5]
    logits = mx.zeros((1, vocab_size))
    for n in range(len(ids) + 1):
        masked = processor(mx.array(prompt + ids[:n]), logits)
        assert masked.shape == (1, vocab_size)
        yield np.isfinite(np.array(masked[0]))


def accepts(loaded: tuple[Any, Any], grammar: Grammar, text: str) -> bool:
    """Whether every token of `text` is allowed in turn, and EOS after it."""
    model, tokenizer = loaded
    ids = tokenizer._tokenizer.encode(text, add_special_tokens=False)
    masks = list(replay(grammar, ids, model.args.vocab_size))
    if not all(mask[token] for mask, token in zip(masks, ids, strict=False)):
        return False
    return all(masks[-1][t] for t in tokenizer.eos_token_ids)


def test_what_the_grammars_accept_and_refuse(loaded: tuple[Any, Any], grammars: Grammars) -> None:
    json_object = compile_(grammars, GrammarSpec("json_object", "response_format"))
    assert accepts(loaded, json_object, '{"a": [1, {"b": null}], "c": "x"}')
    assert not accepts(loaded, json_object, "[1, 2]")
    # One layout, json.dumps's: whitespace a model could loop on is not allowed anywhere.
    assert not accepts(loaded, json_object, '{\n  "a": 1\n}')
    assert not accepts(loaded, json_object, '{"a":1}')
    assert not accepts(loaded, json_object, '{"a":  1}')

    calls = compile_(grammars, GrammarSpec("tool_calls", "tools", tools=TOOLS))
    weather = '{"name": "get_weather", "arguments": {"location": "Oslo", "unit": "celsius", "days": 2}}'
    lookup = '{"name": "lookup", "arguments": {"query": "tea", "limit": 3}}'
    lookup_reversed = '{"arguments": {"query": "tea", "limit": 3}, "name": "lookup"}'
    assert accepts(loaded, calls, f"<tool_call>\n{weather}\n</tool_call>")
    assert accepts(
        loaded, calls, f"<tool_call>\n{weather}\n</tool_call>\n<tool_call>\n{lookup}\n</tool_call>"
    )
    assert not accepts(loaded, calls, f"<tool_call>\n{weather}\n</tool_call>\n")  # then EOS or a call
    assert not accepts(loaded, calls, f"<tool_call>\n{lookup_reversed}\n</tool_call>")  # "name" comes first
    assert not accepts(loaded, calls, f"<tool_call>{lookup}</tool_call>")  # as templates lay it out
    assert not accepts(loaded, calls, '<tool_call>{"name": "lookup", "arguments": {"query": 1}}</tool_call>')
    assert not accepts(loaded, calls, '<tool_call>{"name": "other", "arguments": {}}</tool_call>')
    assert not accepts(loaded, calls, weather)

    # A client's "x-guidance" cannot loosen the grammar: "lenient" would skip keywords it cannot
    # enforce instead of refusing the schema.
    lenient = {"type": "string", "not": {"const": "x"}, "x-guidance": {"lenient": True}}
    with pytest.raises(GrammarError):
        compile_(grammars, GrammarSpec("json_schema", "response_format.json_schema.schema", lenient))


def test_the_processor_ends_a_sequence_it_cannot_follow_with_eos(
    loaded: tuple[Any, Any], grammars: Grammars
) -> None:
    model, tokenizer = loaded
    grammar = compile_(grammars, GrammarSpec("json_object", "response_format"))
    eos = sorted(tokenizer.eos_token_ids)
    bad = tokenizer._tokenizer.encode("hello", add_special_tokens=False)[:1]
    *_, after = replay(grammar, bad, model.args.vocab_size)  # a token the mask forbade
    assert list(np.flatnonzero(after)) == eos

    # After the grammar ends, only EOS; and the step BatchGenerator runs after EOS is no error.
    done = tokenizer._tokenizer.encode("{}", add_special_tokens=False)
    masks = list(replay(grammar, [*done, eos[0]], model.args.vocab_size))
    assert list(np.flatnonzero(masks[-2])) == eos
    assert list(np.flatnonzero(masks[-1])) == eos


def test_logits_wider_than_the_vocabulary_are_masked_to_it(loaded: tuple[Any, Any]) -> None:
    model, tokenizer = loaded
    width = model.args.vocab_size + 64  # padded embeddings, as many real models have
    grammar = compile_(Grammars(tokenizer, width), GrammarSpec("json_object", "response_format"))
    (first,) = replay(grammar, [], width)
    assert first.shape == (width,) and first.any()
    assert not first[model.args.vocab_size :].any()


def test_recursive_schemas_with_finite_values_are_enforced(
    loaded: tuple[Any, Any], grammars: Grammars
) -> None:
    tree = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["n", "kids"],
        "additionalProperties": False,
    }
    grammar = compile_(grammars, GrammarSpec("json_schema", "p", tree))
    assert accepts(loaded, grammar, '{"n": 1, "kids": [{"n": 2, "kids": []}, {"n": 3, "kids": []}]}')
    assert not accepts(loaded, grammar, '{"n": 1, "kids": [{"n": 2}]}')

    linked = {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "next": {"$ref": "#/$defs/node"}},
        "required": ["v"],
        "additionalProperties": False,
        "$defs": {"node": {"$ref": "#"}},
    }
    grammar = compile_(grammars, GrammarSpec("json_schema", "p", linked))
    assert accepts(loaded, grammar, '{"v": 1, "next": {"v": 2}}')


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the engine hands results over with loop.call_soon_threadsafe


@pytest.mark.anyio
async def test_a_grammar_that_fails_while_generating_ends_in_an_error_not_a_stop(
    tiny_model: Path, loaded: tuple[Any, Any], grammars: Grammars
) -> None:
    # A lexer allowed five states compiles and gives a first mask, then fails a few tokens in:
    # as llguidance does when a large schema reaches one of its limits. The processor ends the
    # sequence with EOS; before, that was a "stop" with half an object as the answer.
    model, tokenizer = loaded
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    source = LLMatcher.grammar_from_json_schema(schema)
    limits = LLParserLimits(max_lexer_states=5, verbose_errors=False)
    matcher = LLMatcher(grammars._tokenizer("p"), source, log_level=0, limits=limits)
    assert not matcher.is_error()
    grammar = Grammar(matcher, model.args.vocab_size, sorted(tokenizer.eos_token_ids))
    async with Engine.open(tiny_model, EngineOptions(prompt_cache_entries=0)) as engine:
        prompt = await engine.encode("Answer in JSON.")
        request = GenerationRequest(prompt, 64, SamplingParams(temperature=0.0), grammar=grammar)
        async with engine.generate(request) as session:
            deltas = [delta async for delta in session]
        # The engine goes on serving: the next sequence, unconstrained, ends as usual.
        async with engine.generate(GenerationRequest(prompt, 4, SamplingParams(temperature=0.0))) as session:
            after = [delta async for delta in session]
    final = deltas[-1]
    assert final.finish_reason == "error", final
    assert final.error is not None and "too many states" in final.error, final.error
    assert final.error.startswith("the output could not be kept to its schema: llguidance: ")
    assert after[-1].finish_reason == "length"
