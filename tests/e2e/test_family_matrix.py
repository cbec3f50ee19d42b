"""Every family's demo variant served by the real engine and routes (in this process, through the
SDKs): forced calls parse and validate, a streamed call assembles to exactly the whole one in each
dialect, a call cut by the token limit ends as each official API ends it, a tool result goes back
in, and a thinking budget holds for the family's think markers.

The families here are those with both a demo variant (demo/families/) and a format
(tool_formats/). Fifty random walks of each grammar are in test_tool_formats.py; the model's own
samples here are fewer (each is a real generation).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from mlxhost.demo.families import FAMILIES, family
from mlxhost.worker.engine.generation import GenerationRequest, SamplingParams, ThinkingBudget
from mlxhost.worker.engine.output import Markers, OutputParser
from mlxhost.worker.engine.parts import Output
from mlxhost.worker.engine.textstream import CONTROL_CLOSE, CONTROL_OPEN, strip_control
from mlxhost.worker.engine.tool_formats import available
from tests.e2e.family_worker import family_worker
from tests.unit.tool_format_helpers import TOOLS, openai_tools

pytestmark = pytest.mark.slow


def _variants() -> list[str]:
    names = []
    for name, module in FAMILIES.items():
        if importlib.util.find_spec(f"mlxhost.demo.families.{module}"):
            try:
                family(name)
            except KeyError:  # its module is there, this family not yet
                continue
            names.append(name)
    return sorted(names)


VARIANTS = _variants()
NAMES = sorted(set(available()) & set(VARIANTS))  # a variant, and a format to force and stream
THINKING = [name for name in VARIANTS if family(name).think is not None]
SEEDS = range(5)
ASK = [{"role": "user", "content": "Use a tool."}]
FUNCTIONS = openai_tools(TOOLS)
VALIDATORS = {t.name: jsonschema_rs.validator_for(dict(t.parameters or {})) for t in TOOLS}
RESPONSES_TOOLS = [{"type": "function", **f["function"]} for f in FUNCTIONS]
ANTHROPIC_TOOLS = [{"name": t.name, "input_schema": dict(t.parameters or {})} for t in TOOLS]
# FunctionGemma's syntax holds flat values only: its calls are forced to the tools without nested
# ones (a nested one is refused, see the last test).
FLAT = {"function_gemma"}


@dataclass(frozen=True)
class Offered:
    """The tools a family is offered, in each dialect's form, and the richest one to force."""

    functions: list[dict[str, Any]]
    responses: list[dict[str, Any]]
    anthropic: list[dict[str, Any]]
    rich: str


def offered(name: str) -> Offered:
    keep = [i for i, t in enumerate(TOOLS) if not (name in FLAT and t.name == "tag_files")]
    return Offered(
        [FUNCTIONS[i] for i in keep],
        [RESPONSES_TOOLS[i] for i in keep],
        [ANTHROPIC_TOOLS[i] for i in keep],
        "get_weather" if name in FLAT else "tag_files",
    )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the engine hands results over with loop.call_soon_threadsafe


@pytest.fixture(scope="module")
def models(family_model: Callable[[str], Path]) -> dict[str, Path]:
    return {name: family_model(name) for name in VARIANTS}


def valid(name: str, arguments: str) -> bool:
    return VALIDATORS[name].is_valid(json.loads(arguments))


@pytest.mark.anyio
@pytest.mark.parametrize("name", NAMES)
async def test_forced_calls_parse_and_validate(models: dict[str, Path], name: str) -> None:
    tools = offered(name)
    async with family_worker(models[name]) as worker:

        async def ask(seed: int, choice: Any, parallel: bool) -> Any:
            reply = await worker.openai.chat.completions.create(
                model="tiny", messages=ASK, tools=tools.functions, tool_choice=choice,  # type: ignore[arg-type]
                parallel_tool_calls=parallel, seed=seed, max_tokens=300, temperature=1.0,
            )  # fmt: skip
            return reply.choices[0]

        named = {"type": "function", "function": {"name": "get_weather"}}
        replies = await asyncio.gather(
            *(ask(seed, named, True) for seed in SEEDS), *(ask(seed, "required", True) for seed in SEEDS)
        )
    for i, choice in enumerate(replies):
        calls = choice.message.tool_calls or []
        assert calls, choice
        assert "<" not in (choice.message.content or "") or choice.message.content is None, choice
        assert all(valid(c.function.name, c.function.arguments) for c in calls), calls
        if i < len(SEEDS):  # named: exactly one call, to that tool
            assert choice.finish_reason == "tool_calls", choice
            assert [c.function.name for c in calls] == ["get_weather"]


@pytest.mark.anyio
@pytest.mark.parametrize("name", NAMES)
async def test_a_streamed_call_is_the_whole_call_in_every_dialect(models: dict[str, Path], name: str) -> None:
    tools = offered(name)
    named = {"type": "function", "function": {"name": tools.rich}}
    async with family_worker(models[name]) as worker:
        chat = {
            "model": "tiny",
            "messages": ASK,
            "tools": tools.functions,
            "tool_choice": named,
            "seed": 3,
            "max_tokens": 300,
        }
        whole = (await worker.openai.chat.completions.create(**chat)).choices[0].message.tool_calls  # type: ignore[arg-type]
        pieces: dict[int, list[Any]] = {}
        async for chunk in await worker.openai.chat.completions.create(**chat, stream=True):  # type: ignore[arg-type]
            for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                pieces.setdefault(delta.index, []).append(delta)
        assert whole is not None and len(pieces) == len(whole) == 1
        head, *rest = pieces[0]
        assert head.id and head.function.name == tools.rich and head.function.arguments == ""
        # How many pieces the frames hold is timing (a busy loop merges tokens); that arguments go out
        # as written is shown exactly by test_output_streaming and each format's tests.
        assert "".join(d.function.arguments for d in rest) == whole[0].function.arguments
        assert valid(tools.rich, whole[0].function.arguments)

        # Messages takes no seed: the stream is checked against its own final message.
        body = {"model": "tiny", "max_tokens": 300, "messages": ASK, "tools": tools.anthropic,
                "tool_choice": {"type": "tool", "name": tools.rich}}  # fmt: skip
        async with worker.anthropic.messages.stream(**body) as stream:  # type: ignore[arg-type]
            events = [event async for event in stream]
            final = await stream.get_final_message()
        [block] = final.content
        partial = "".join(
            e.delta.partial_json
            for e in events
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        )
        assert block.type == "tool_use" and json.loads(partial) == block.input
        assert VALIDATORS[tools.rich].is_valid(block.input)

        response = {"model": "tiny", "input": ASK, "tools": tools.responses, "max_output_tokens": 300,
                    "tool_choice": {"type": "function", "name": tools.rich}}  # fmt: skip
        events = [e async for e in await worker.openai.responses.create(**response, stream=True)]  # type: ignore[arg-type]
        kind = "response.function_call_arguments.delta"
        deltas = "".join(e.delta for e in events if e.type == kind)  # type: ignore[union-attr]
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert [d.arguments for d in done] == [deltas] and valid(tools.rich, deltas)  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.parametrize("name", NAMES)
async def test_a_call_cut_by_the_token_limit_is_no_call_and_no_text(
    models: dict[str, Path], name: str
) -> None:
    tools = offered(name)
    start = _call_start(models[name])
    async with family_worker(models[name]) as worker:
        named = {"type": "function", "function": {"name": tools.rich}}
        chat = await worker.openai.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=tools.functions,
            tool_choice=named,
            max_tokens=6,  # type: ignore[arg-type]
        )
        choice = chat.choices[0]
        assert choice.finish_reason == "length" and not choice.message.tool_calls
        assert not choice.message.content, choice.message.content

        message = await worker.anthropic.messages.create(
            model="tiny", max_tokens=6, messages=ASK, tools=tools.anthropic,  # type: ignore[arg-type]
            tool_choice={"type": "tool", "name": tools.rich},
        )  # fmt: skip
        assert message.stop_reason == "max_tokens" and message.content == []

        response = await worker.openai.responses.create(
            model="tiny", input=ASK, max_output_tokens=6,  # type: ignore[arg-type]
            tools=tools.responses,  # type: ignore[arg-type]
            tool_choice={"type": "function", "name": tools.rich},
        )  # fmt: skip
        assert response.status == "incomplete" and response.incomplete_details is not None
        assert response.incomplete_details.reason == "max_output_tokens"
        assert start not in response.output_text and not [
            i for i in response.output if i.type == "function_call"
        ]


@pytest.mark.anyio
@pytest.mark.parametrize("name", NAMES)
async def test_an_agents_history_goes_back_in_every_dialect(models: dict[str, Path], name: str) -> None:
    """An assistant turn with reasoning and a call, then the call's result (an error, as blocks):
    each dialect takes it, and the result's text reaches the prompt (a longer result, more tokens)."""
    arguments = {"city": "Oslo", "days": 2}
    thought = "The user wants Oslo's weather."
    async with family_worker(models[name]) as worker:

        async def chat(result: str) -> int:
            reply = await worker.openai.chat.completions.create(
                model="tiny", tools=FUNCTIONS, max_tokens=2,  # type: ignore[arg-type]
                messages=[
                    *ASK,
                    {"role": "assistant", "content": None, "reasoning_content": thought, "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": json.dumps(arguments)}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": result}]},
                ],
            )  # fmt: skip
            assert reply.usage is not None
            return reply.usage.prompt_tokens

        async def messages(result: str) -> int:
            reply = await worker.anthropic.messages.create(
                model="tiny", max_tokens=2, tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
                messages=[
                    *ASK,
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": thought, "signature": ""},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": arguments}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                  "is_error": True,
                                                  "content": [{"type": "text", "text": result}]}]},
                ],
            )  # fmt: skip
            return reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)

        async def responses(result: str) -> int:
            reply = await worker.openai.responses.create(
                model="tiny", max_output_tokens=2, tools=RESPONSES_TOOLS,  # type: ignore[arg-type]
                input=[
                    *ASK,
                    {"type": "reasoning", "summary": [],
                     "content": [{"type": "reasoning_text", "text": thought}]},
                    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                     "arguments": json.dumps(arguments)},
                    {"type": "function_call_output", "call_id": "call_1", "output": result},
                ],
            )  # fmt: skip
            assert reply.usage is not None
            return reply.usage.input_tokens

        for dialect in (chat, messages, responses):
            assert await dialect("no such city, try another one") > await dialect("no such city"), dialect


@pytest.mark.anyio
@pytest.mark.parametrize("name", THINKING)
async def test_the_thinking_budget_holds_and_the_reasoning_splits(models: dict[str, Path], name: str) -> None:
    async with family_worker(models[name]) as worker:
        tokenizer = worker.engine.tokenizer
        assert tokenizer.think_ids is not None
        start, end = tokenizer.think_ids
        prompt = [*await worker.engine.encode("Think first."), *start]  # the prompt opens the block
        request = GenerationRequest(
            prompt, 24, SamplingParams(temperature=1.0, seed=5), logprobs=0,
            thinking_budget=ThinkingBudget(5, start, end, open=True),
        )  # fmt: skip
        async with worker.engine.generate(request) as session:
            deltas = [delta async for delta in session]
    ids = [tokenizer.decoder.convert_tokens_to_ids(lp.token) for d in deltas for lp in d.logprobs or ()]
    text = "".join(d.text for d in deltas)
    # At most the budget inside the block, then the end marker whole.
    closing = next(i for i in range(len(ids)) if tuple(ids[i : i + len(end)]) == end)
    assert closing <= 5
    out = _split(tokenizer.markers, [text])
    streamed = _split(tokenizer.markers, [d.text for d in deltas])  # as the engine handed it over
    assert (streamed.reasoning, streamed.content) == (out.reasoning, out.content)
    markers: Markers = tokenizer.markers
    assert markers.think_end is not None and markers.think_end not in out.reasoning + out.content
    # The engine's text marks the control tokens the model wrote (textstream.py): the marker as
    # one, when it is one token; the others are never answer or reasoning.
    marked = CONTROL_OPEN + markers.think_end + CONTROL_CLOSE
    thought, answer = text.split(marked if marked in text else markers.think_end, 1)

    def plain(part: str) -> str:
        for piece in markers.pieces:
            part = part.replace(piece, "")
        return strip_control(part).lstrip("\n")

    assert (out.reasoning, out.content) == (plain(thought), plain(answer))


def _split(markers: Markers, pieces: list[str]) -> Output:
    parser = OutputParser(markers, reasoning=True)
    out = Output()
    for piece in pieces:
        out.add(parser.feed(piece))
    out.add(parser.finish())
    return out


def _call_start(model: Path) -> str:
    from mlx_lm.tokenizer_utils import load

    return str(load(model).tool_call_start)


@pytest.mark.anyio
async def test_a_syntax_with_no_format_refuses_a_forced_call_naming_tool_choice(
    models: dict[str, Path],
) -> None:
    """A parser mlx-lm may add later, which nothing here can force: refused, never unenforced."""
    async with family_worker(models["json_tools"]) as worker:
        worker.engine.tokenizer.tool_format = None
        forced = {"model": "tiny", "messages": ASK, "tools": FUNCTIONS, "max_tokens": 4}
        reply = await worker.http.post("/v1/chat/completions", json={**forced, "tool_choice": "required"})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "tool_choice", reply.text
        free = await worker.http.post("/v1/chat/completions", json={**forced, "tool_choice": "auto"})
        assert free.status_code == 200, free.text


@pytest.mark.anyio
@pytest.mark.skipif("function_gemma" not in NAMES, reason="no function_gemma format yet")
async def test_parameters_a_syntax_cannot_carry_are_refused_naming_the_tool(models: dict[str, Path]) -> None:
    """FunctionGemma's parser reads flat values only: a forced call of a tool with a nested object
    is refused, naming that tool's parameters; offered unforced, the tool is fine."""
    nested = {"type": "function", "function": {"name": "place", "parameters": {
        "type": "object", "required": ["where"],
        "properties": {"where": {"type": "object", "properties": {"lat": {"type": "number"}}}}}}}  # fmt: skip
    async with family_worker(models["function_gemma"]) as worker:
        body = {"model": "tiny", "messages": ASK, "tools": [FUNCTIONS[0], nested], "max_tokens": 4}
        reply = await worker.http.post("/v1/chat/completions", json={**body, "tool_choice": "required"})
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"]["param"].startswith("tools[1]"), reply.text
        assert "place" in reply.json()["error"]["message"]
        free = await worker.http.post("/v1/chat/completions", json={**body, "tool_choice": "auto"})
        assert free.status_code == 200, free.text
