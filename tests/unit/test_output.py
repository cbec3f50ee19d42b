"""The output parser sorts streamed text into answer, reasoning and tool calls, however it is split."""

from __future__ import annotations

import json

import pytest
from mlx_lm.tool_parsers.json_tools import parse_tool_call

from mlxhost.worker.engine.output import Markers, OutputParser
from mlxhost.worker.engine.parts import CallArguments, CallBegun, Output
from mlxhost.worker.engine.tool_formats import tool_format

MARKERS = Markers("<think>", "</think>", "<tool_call>", "</tool_call>")
REPLY = (
    "<think>\nThe user wants the weather.\n</think>\n\n"
    "Let me look. <tool_call>\n"
    '{"name": "weather", "arguments": {"city": "Paris", "unit": "c"}}\n'
    "</tool_call>\n<tool_call>\n"
    '{"name": "time", "arguments": {}}\n'
    "</tool_call>"
)


def read(text: str, step: int, **kwargs: object) -> tuple[Output, OutputParser]:
    parser = OutputParser(MARKERS, **kwargs)  # type: ignore[arg-type]
    total = Output()
    for i in range(0, len(text), step):
        total.add(parser.feed(text[i : i + step]))
    total.add(parser.finish())
    return total, parser


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_reasoning_answer_and_calls_are_told_apart_however_the_text_is_split(step: int) -> None:
    out, parser = read(REPLY, step, parse_call=parse_tool_call)
    assert out.reasoning == "The user wants the weather.\n"
    assert out.content == "Let me look. "  # the newlines between calls are layout
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [
        ("weather", {"city": "Paris", "unit": "c"}),
        ("time", {}),
    ]
    assert len({c.id for c in out.tool_calls}) == 2 and all(c.id.startswith("call_") for c in out.tool_calls)
    assert parser.calls_made == 2


def test_without_a_call_parser_the_call_markers_are_text() -> None:
    # No tools were offered, or tool_choice was "none": what looks like a call is the answer.
    out, parser = read(REPLY, 5)
    assert "<tool_call>" in out.content and not out.tool_calls and parser.calls_made == 0
    assert out.reasoning == "The user wants the weather.\n"


def test_a_call_cut_off_is_dropped_and_a_malformed_one_is_answered_as_its_words() -> None:
    out, parser = read('Sure <tool_call>\n{"name": "weather", "argu', 4, parse_call=parse_tool_call)
    assert out.content == "Sure " and not out.tool_calls
    assert (parser.calls_made, parser.calls_cut) == (0, 1)
    done = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call><tool_call>\n{"name": "b", "argu'
    out, parser = read(done, 3, parse_call=parse_tool_call)
    assert [c.name for c in out.tool_calls] == ["a"] and out.content == ""  # the whole one is kept
    out, parser = read("<tool_call>not json</tool_call>done", 4, parse_call=parse_tool_call)
    assert out.content == "not jsondone" and not out.tool_calls  # its markers are markup, not text


def test_a_prompt_that_opened_the_think_block_starts_the_output_in_reasoning() -> None:
    out, _ = read("weighing it up</think>\n\nYes.", 3, reasoning=True)
    assert (out.reasoning, out.content) == ("weighing it up", "Yes.")


def test_a_lone_marker_prefix_is_held_only_until_it_cannot_be_one() -> None:
    parser = OutputParser(MARKERS, parse_call=parse_tool_call)
    assert parser.feed("a <").content == "a "  # might be "<think>" or "<tool_call>"
    assert parser.feed("b").content == "<b"
    assert parser.feed("x <too").content == "x "
    assert parser.finish().content == "<too"  # the text ended: it was text


def test_a_model_without_markers_answers_everything() -> None:
    parser = OutputParser(Markers())
    assert parser.feed("<think>hi</think>").content == "<think>hi</think>"


def test_a_long_streamed_call_is_read_a_bounded_number_of_times_and_arrives_whole() -> None:
    fmt = tool_format("json_tools")
    assert fmt is not None
    reads: list[int] = []

    class Counting:
        def partial(self, body: str, tools: object) -> object:
            reads.append(len(body))
            return fmt.partial(body, tools)  # type: ignore[union-attr]

    content = "\n".join(f"    line {i}: value = compute(x[{i}], 'text {i}')" for i in range(300))
    arguments = json.dumps({"path": "a.py", "content": content})
    text = f'<tool_call>\n{{"name": "write_file", "arguments": {arguments}}}\n</tool_call>'
    parser = OutputParser(MARKERS, parse_call=parse_tool_call, fmt=Counting())  # type: ignore[arg-type]
    pieces = [parser.feed(text[i : i + 4]) for i in range(0, len(text), 4)] + [parser.finish()]
    parts = [part for piece in pieces for part in piece.parts]
    begun = next(i for i, piece in enumerate(pieces) if any(isinstance(p, CallBegun) for p in piece.parts))
    assert begun <= 12  # announced as soon as its name is written (by its 48th character)
    streamed = "".join(p.text for p in parts if isinstance(p, CallArguments))
    assert json.loads(streamed) == json.loads(arguments)
    assert len([p for p in parts if isinstance(p, CallArguments)]) > 100  # it still streams
    assert len(reads) < 400 < len(text) // 4  # not once per token: 3,766 feeds
