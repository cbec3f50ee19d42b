"""A call streams as it is written: announced once its name is known, its arguments in pieces that
join to exactly the call read at its end; the parts of an output keep the order they were written
in, and a call the output ends inside of is never a call nor text."""

from __future__ import annotations

import json

import pytest
from mlx_lm.tool_parsers import json_tools, mistral

from mlxhost.worker.engine.output import Markers, OutputParser
from mlxhost.worker.engine.parts import CallArguments, CallBegun, CallEnded, Output, Text
from mlxhost.worker.engine.tool_formats import tool_format

pytestmark = pytest.mark.unit

MARKERS = Markers("<think>", "</think>", "<tool_call>", "</tool_call>")
REPLY = (
    "<think>\nWeather first.\n</think>\n\n"
    "Looking. <tool_call>\n"
    '{"name": "weather", "arguments": {"city": "Paris", "unit": "c", "days": [1, 2]}}\n'
    "</tool_call>\nThen the time.<tool_call>\n"
    '{"name": "time", "arguments": {}}\n'
    "</tool_call>"
)


def stream(
    text: str, step: int, markers: Markers = MARKERS, parse=json_tools.parse_tool_call, fmt="json_tools"
):  # type: ignore[no-untyped-def]
    parser = OutputParser(markers, parse, None, fmt=tool_format(fmt))
    pieces = [parser.feed(text[i : i + step]) for i in range(0, len(text), step)]
    return [*pieces, parser.finish()], parser


def joined(pieces: list[Output]) -> Output:
    total = Output()
    for piece in pieces:
        total.add(piece)
    return total


@pytest.mark.parametrize("step", [1, 2, 5, 13, 1000])
def test_a_call_is_announced_then_its_arguments_join_to_the_whole_call(step: int) -> None:
    pieces, parser = stream(REPLY, step)
    parts = [part for piece in pieces for part in piece.parts]
    begun = [p for p in parts if isinstance(p, CallBegun)]
    assert [(b.index, b.name) for b in begun] == [(0, "weather"), (1, "time")]
    for b in begun:
        pieces_of = [p.text for p in parts if isinstance(p, CallArguments) and p.index == b.index]
        [ended] = [p for p in parts if isinstance(p, CallEnded) and p.index == b.index]
        assert ended.call is not None and ended.call.id == b.id
        assert "".join(pieces_of) == ended.call.arguments
        # Each part in its place: announced before any of its arguments, ended after all.
        first = parts.index(b)
        assert all(
            parts.index(p) > first for p in parts if isinstance(p, CallArguments) and p.index == b.index
        )
        assert parts.index(ended) > max(
            i for i, p in enumerate(parts) if isinstance(p, (CallBegun, CallArguments)) and p.index == b.index
        )
    assert parser.calls_made == 2


def test_the_arguments_arrive_in_more_than_one_piece_while_the_model_writes() -> None:
    pieces, _ = stream(REPLY, 1)
    weather = [p for piece in pieces for p in piece.parts if isinstance(p, CallArguments) and p.index == 0]
    assert len(weather) >= 3  # city, unit, days, and the close


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_whole_and_streamed_outputs_are_the_same_in_the_same_order(step: int) -> None:
    whole = joined(stream(REPLY, 1000)[0])
    streamed = joined(stream(REPLY, step)[0])
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [
        (c.name, c.arguments) for c in whole.tool_calls
    ]
    kinds = [type(p).__name__ if not isinstance(p, Text) else p.kind for p in streamed.parts]
    assert kinds == [
        "reasoning",
        "content",
        "CallBegun",
        "CallArguments",
        "CallEnded",
        "content",  # text after a call stays after it
        "CallBegun",
        "CallArguments",
        "CallEnded",
    ]


def test_a_call_the_output_ends_inside_of_is_ended_as_no_call_and_no_text() -> None:
    cut = REPLY[: REPLY.index('"unit"') + 3]
    pieces, parser = stream(cut, 3)
    whole = joined(pieces)
    assert whole.tool_calls == [] and "<tool_call>" not in whole.content and "city" not in whole.content
    ended = [p for p in whole.parts if isinstance(p, CallEnded)]
    assert [e.call for e in ended] == [None]  # a stream ends what it sent of it
    assert parser.calls_cut == 1 and parser.calls_made == 0


def test_without_a_format_a_call_comes_whole_at_its_end() -> None:
    parser = OutputParser(MARKERS, json_tools.parse_tool_call, None)
    body = REPLY[REPLY.index("<tool_call>") :]
    outs = [parser.feed(body[i : i + 2]) for i in range(0, len(body), 2)]
    parts = [p for out in outs for p in out.parts]
    first = next(i for i, p in enumerate(parts) if isinstance(p, CallBegun))
    assert isinstance(parts[first + 1], CallArguments) and isinstance(parts[first + 2], CallEnded)
    assert json.loads(parts[first + 1].text) == {"city": "Paris", "unit": "c", "days": [1, 2]}  # type: ignore[union-attr]


def test_an_unreadable_call_never_announced_is_answered_as_its_words() -> None:
    """Its text is the answer; its markers are markup, not text (they would read as a call)."""
    pieces, parser = stream("<tool_call>\nnot json at all\n</tool_call>", 4)
    whole = joined(pieces)
    assert whole.tool_calls == [] and whole.content.strip() == "not json at all"
    assert parser.calls_made == 0


def test_a_family_without_an_end_marker_calls_to_the_end_of_the_output() -> None:
    markers = Markers(None, None, mistral.tool_call_start, mistral.tool_call_end)
    text = 'Sure.[TOOL_CALLS]weather[ARGS]{"city": "Oslo"}time[ARGS]{}'
    for step in (1, 5, 1000):
        whole = joined(stream(text, step, markers, mistral.parse_tool_call, "mistral")[0])
        assert whole.content == "Sure."
        assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [
            ("weather", {"city": "Oslo"}),
            ("time", {}),
        ]
    cut = joined(stream(text[: text.index('"Oslo') + 3], 3, markers, mistral.parse_tool_call, "mistral")[0])
    assert cut.content == "Sure." and cut.tool_calls == []  # cut inside its JSON: no call


def test_a_number_past_a_floats_range_is_no_call_rather_than_json_that_is_not() -> None:
    whole = joined(stream('<tool_call>\n{"name": "add", "arguments": {"a": 1e999}}\n</tool_call>', 5)[0])
    assert whole.tool_calls == [] and "Infinity" not in whole.content


def test_the_calls_a_cut_section_finished_are_whole_and_the_cut_one_is_dropped() -> None:
    """Kimi K2 writes all of a turn's calls in one section: the output cut inside the second call
    keeps the first, whole, streamed or not."""
    from mlx_lm.tool_parsers import kimi_k2

    markers = Markers(None, None, kimi_k2.tool_call_start, kimi_k2.tool_call_end)
    fmt = tool_format("kimi_k2")
    if fmt is None:
        pytest.skip("no kimi_k2 format")
    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.weather:0<|tool_call_argument_begin|>"
        '{"city": "Oslo"}<|tool_call_end|><|tool_call_begin|>functions.time:1<|tool_call_argument_begin|>{"zo'
    )
    for step in (1, 7, 1000):
        parser = OutputParser(markers, kimi_k2.parse_tool_call, None, fmt=fmt)
        whole = joined(
            [parser.feed(text[i : i + step]) for i in range(0, len(text), step)] + [parser.finish()]
        )
        assert [(c.name, c.arguments) for c in whole.tool_calls] == [("weather", '{"city": "Oslo"}')]
        assert whole.tool_calls[0].id == "functions.weather:0"
        assert parser.calls_made == 1 and parser.calls_cut == 1 and whole.content == ""


def test_a_forced_output_cut_inside_its_start_marker_is_no_text() -> None:
    """A marker spelled in several tokens (`<function name=`, MiniCPM's) cut by max_tokens: under a
    grammar that allows only calls it is a call begun; unforced, what the model wrote stays."""
    markers = Markers(None, None, "<function name=", "</function>")
    for forced, expected in ((True, ""), (False, "<funct")):
        parser = OutputParser(markers, json_tools.parse_tool_call, None, forced=forced)
        out = parser.feed("<funct")
        out.add(parser.finish())
        assert out.content == expected


def test_a_model_id_repeated_in_one_output_goes_out_once() -> None:
    """Kimi K2 numbers its calls across the conversation and may repeat an index: each call of
    one output has its own id, the model's own where it is new, streamed or whole."""
    from mlx_lm.tool_parsers import kimi_k2

    markers = Markers(None, None, kimi_k2.tool_call_start, kimi_k2.tool_call_end)
    call = "<|tool_call_begin|>functions.weather:0<|tool_call_argument_begin|>{}<|tool_call_end|>"
    text = f"<|tool_calls_section_begin|>{call}{call}<|tool_calls_section_end|>"
    for fmt in (tool_format("kimi_k2"), None):
        for step in (3, 1000):
            parser = OutputParser(markers, kimi_k2.parse_tool_call, None, fmt=fmt)
            whole = joined(
                [parser.feed(text[i : i + step]) for i in range(0, len(text), step)] + [parser.finish()]
            )
            ids = [c.id for c in whole.tool_calls]
            assert len(ids) == 2 and ids[0] == "functions.weather:0" and ids[1] != ids[0], ids
