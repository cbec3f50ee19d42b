"""The XML-parameter families' own quirks (the matrix in test_demo_families.py covers what every
family shares): the exact layout of a rendered call, how each writes its tools, and what happens to
values the syntax cannot hold as they are, read back by the family's own mlx-lm parser.
"""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost import demo
from mlxhost.demo.families import xml_parameters

pytestmark = pytest.mark.unit

# Every argument declared, so the parsers (which read an undeclared parameter as a string) give
# each JSON type back.
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "Where."},
                "days": {"type": "integer"},
                "ratio": {"type": "number"},
                "metric": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "where": {"type": "object"},
                "note": {"type": ["string", "null"]},
            },
            "required": ["city"],
        },
    },
}
EVERY_TYPE: dict[str, Any] = {
    "city": "Paris <Nord> & co",
    "days": 3,
    "ratio": 0.5,
    "metric": False,
    "tags": ["a", "b"],
    "where": {"lat": 1.5, "lon": -2, "name": "x"},
    "note": None,
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("xml_parameters")
    return {
        name: load_tokenizer(demo.make_model(root / name, "tiny", 0, name))
        for name in xml_parameters.FAMILIES
    }


def history(tokenizer: Any, *calls: dict[str, Any], content: str = "") -> str:
    """The assistant turn that makes `calls` (name, arguments), as the template renders it."""
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": call} for i, call in enumerate(calls)
            ],
        },
    ]
    text = tokenizer.apply_chat_template(messages, tools=[TOOL], tokenize=False)
    turn = text[text.index("<|assistant|>\n") + len("<|assistant|>\n") :]
    return turn[: turn.index("<|end|>")]


def read_back(tokenizer: Any, text: str) -> list[dict[str, Any]]:
    """The calls the family's parser reads in `text`, split at its markers as mlx-lm's server does."""
    start, end = tokenizer.tool_call_start, tokenizer.tool_call_end
    calls: list[dict[str, Any]] = []
    for piece in text.split(start)[1:]:
        parsed = tokenizer.tool_parser(piece[: piece.index(end)], [TOOL])
        calls += parsed if isinstance(parsed, list) else [parsed]
    return calls


def round_trip(tokenizer: Any, arguments: Any) -> Any:
    (call,) = read_back(tokenizer, history(tokenizer, {"name": "get_weather", "arguments": arguments}))
    assert call["name"] == "get_weather"
    return call["arguments"]


# Qwen3-Coder / Qwen3.5


def test_qwen3_coder_writes_each_parameter_on_lines_of_its_own(tokenizers: dict[str, Any]) -> None:
    text = history(
        tokenizers["qwen3_coder"], {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}
    )
    assert text == (
        "<tool_call>\n<function=get_weather>\n"
        "<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n"
        "</function>\n</tool_call>"
    )


def test_qwen3_coder_writes_values_that_are_not_strings_as_json(tokenizers: dict[str, Any]) -> None:
    text = history(tokenizers["qwen3_coder"], {"name": "get_weather", "arguments": EVERY_TYPE})
    for written in ("0.5", "false", '["a", "b"]', '{"lat": 1.5, "lon": -2, "name": "x"}', "null"):
        assert f">\n{written}\n</parameter>" in text, text
    assert round_trip(tokenizers["qwen3_coder"], EVERY_TYPE) == EVERY_TYPE


def test_qwen3_coder_separates_calls_and_the_answer_before_them_by_a_line(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["qwen3_coder"]
    text = history(
        tokenizer,
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
        content="Two cities.",
    )
    assert text.startswith("Two cities.\n<tool_call>\n<function=get_weather>\n")
    assert "</tool_call>\n<tool_call>\n" in text and text.count("<tool_call>") == 2
    assert [c["arguments"] for c in read_back(tokenizer, text)] == [{"city": "Oslo"}, {"city": "Rome"}]


def test_qwen3_coder_lists_each_function_and_parameter_as_xml(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["qwen3_coder"]
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        tools=[TOOL],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert text.startswith("<|begin|><|system|>\nBe brief.\n\n# Tools\n")
    assert "<function>\n<name>get_weather</name>\n<description>The weather in a city.</description>" in text
    assert "<parameter>\n<name>city</name>\n<type>string</type>\n<description>Where.</description>\n" in text
    assert '<name>tags</name>\n<type>array</type>\n<items>{"type": "string"}</items>\n</parameter>' in text
    assert '<required>["city"]</required>\n</parameters>\n</function>\n</tools>' in text
    assert text.count("Be brief.") == 1 and text.endswith("<|user|>\nHi<|end|>\n<|assistant|>\n")


def test_qwen3_coder_keeps_multi_line_strings_and_their_edge_newlines(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["qwen3_coder"]
    code = "def f():\n    return 1\n"
    arguments = {"city": "line one\nline two", "note": "\n  indented", "tags": ["x\ny"]}
    text = history(tokenizer, {"name": "get_weather", "arguments": {"city": code}})
    assert "<parameter=city>\ndef f():\n    return 1\n\n</parameter>" in text
    assert round_trip(tokenizer, {"city": code}) == {"city": code}
    assert round_trip(tokenizer, arguments) == arguments


def test_qwen3_coder_values_are_not_escaped(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["qwen3_coder"]
    # Angle brackets and ampersands pass through as they are...
    assert round_trip(tokenizer, {"city": "a < b && c > d <x/>"}) == {"city": "a < b && c > d <x/>"}
    # ...but the syntax has no escape: a value holding the closing tag ends there, and the rest of
    # it is lost, as it would be in the real model's own output.
    assert round_trip(tokenizer, {"city": "a</parameter>b", "days": 2}) == {"city": "a", "days": 2}
    # The parser reads the word null as null whatever the declared type.
    assert round_trip(tokenizer, {"city": "null"}) == {"city": None}


def test_qwen3_coder_writes_arguments_it_cannot_read_as_they_came(tokenizers: dict[str, Any]) -> None:
    # mlxhost passes the client's string when its JSON does not parse to an object.
    text = history(tokenizers["qwen3_coder"], {"name": "get_weather", "arguments": '{"city": "Os'})
    assert text == '<tool_call>\n<function=get_weather>\n{"city": "Os\n</function>\n</tool_call>'


def test_qwen3_coder_markers_are_single_tokens(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["qwen3_coder"]
    for marker in (
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<think>",
        "</think>",
    ):
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1, marker


def test_qwen3_coder_wraps_a_tool_result_in_tool_response(tokenizers: dict[str, Any]) -> None:
    text = tokenizers["qwen3_coder"].apply_chat_template(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "tool", "tool_call_id": "call_0", "content": [{"type": "text", "text": "sunny"}]},
        ],
        tokenize=False,
    )
    assert "<|tool|>\n<tool_response>\nsunny\n</tool_response><|end|>\n" in text
