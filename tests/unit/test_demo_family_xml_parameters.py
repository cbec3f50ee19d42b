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


def test_qwen3_coder_wraps_a_tool_result_in_tool_response(tokenizers: dict[str, Any]) -> None:
    text = tokenizers["qwen3_coder"].apply_chat_template(
        [
            {"role": "user", "content": "Weather?"},
            {"role": "tool", "tool_call_id": "call_0", "content": [{"type": "text", "text": "sunny"}]},
        ],
        tokenize=False,
    )
    assert "<|tool|>\n<tool_response>\nsunny\n</tool_response><|end|>\n" in text


# Every family


@pytest.mark.parametrize("name", sorted(xml_parameters.FAMILIES))
def test_every_type_reads_back_when_the_tool_declares_it(tokenizers: dict[str, Any], name: str) -> None:
    assert round_trip(tokenizers[name], EVERY_TYPE) == EVERY_TYPE


@pytest.mark.parametrize("name", sorted(xml_parameters.FAMILIES))
def test_the_familys_markers_are_single_tokens(tokenizers: dict[str, Any], name: str) -> None:
    tokenizer = tokenizers[name]
    for marker in xml_parameters.FAMILIES[name].special_tokens:
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1, marker


# MiniMax-M2


def test_minimax_m2_makes_a_turns_calls_in_one_section(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["minimax_m2"]
    text = history(
        tokenizer,
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
    )
    assert text == (
        "<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Oslo</parameter>\n'
        '<parameter name="days">3</parameter>\n</invoke>\n'
        '<invoke name="get_weather">\n<parameter name="city">Rome</parameter>\n</invoke>\n'
        "</minimax:tool_call>"
    )
    assert read_back(tokenizer, text) == [
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
    ]


def test_minimax_m2_lists_each_tool_in_a_tool_element(tokenizers: dict[str, Any]) -> None:
    text = tokenizers["minimax_m2"].apply_chat_template(
        [{"role": "user", "content": "Hi"}], tools=[TOOL], tokenize=False
    )
    assert '<tools>\n<tool>{"type": "function", "function": {"name": "get_weather", ' in text
    assert "}}</tool>\n</tools>" in text


def test_minimax_m2_values_lose_the_space_at_their_edges(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["minimax_m2"]
    assert round_trip(tokenizer, {"city": "two\nlines <b> & c"}) == {"city": "two\nlines <b> & c"}
    assert round_trip(tokenizer, {"city": "  Oslo\n"}) == {"city": "Oslo"}
    assert round_trip(tokenizer, {"city": "a</parameter>b"}) == {"city": "a"}


# MiniCPM5


def test_minicpm5_writes_calls_one_after_another_with_no_wrapper(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["minicpm5"]
    text = history(
        tokenizer,
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
        content="Both.",
    )
    assert text == (
        'Both.\n<function name="get_weather"><param name="city">Oslo</param><param name="days">3</param>'
        '</function><function name="get_weather"><param name="city">Rome</param></function>'
    )
    assert [c["arguments"] for c in read_back(tokenizer, text)] == [
        {"city": "Oslo", "days": 3},
        {"city": "Rome"},
    ]


@pytest.mark.parametrize(
    ("city", "written"),
    [
        ("Oslo", "Oslo"),
        ("a < b", "<![CDATA[a < b]]>"),
        ("Q&A", "<![CDATA[Q&A]]>"),
        ("two\nlines", "<![CDATA[two\nlines]]>"),
        (" padded ", "<![CDATA[ padded ]]>"),
        ("x]]>y", "x]]>y"),
    ],
)
def test_minicpm5_puts_a_value_in_cdata_where_its_parser_expects_one(
    tokenizers: dict[str, Any], city: str, written: str
) -> None:
    tokenizer = tokenizers["minicpm5"]
    text = history(tokenizer, {"name": "get_weather", "arguments": {"city": city}})
    assert f'<param name="city">{written}</param>' in text
    assert round_trip(tokenizer, {"city": city}) == {"city": city}


def test_minicpm5_a_value_holding_the_closing_tag_ends_there(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["minicpm5"]
    assert round_trip(tokenizer, {"city": "<x></param>y", "days": 1}) == {"city": "<![CDATA[<x>", "days": 1}


# Muse Spark


def test_muse_spark_makes_a_turns_calls_in_one_atem_block(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["muse_spark"]
    text = history(
        tokenizer,
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
    )
    assert text == (
        "<atem:function_calls>\n"
        '<atem:invoke name="get_weather">\n<atem:parameter name="city">Oslo</atem:parameter>\n'
        '<atem:parameter name="days">3</atem:parameter>\n</atem:invoke>\n'
        '<atem:invoke name="get_weather">\n<atem:parameter name="city">Rome</atem:parameter>\n'
        "</atem:invoke>\n</atem:function_calls>"
    )
    assert [c["arguments"] for c in read_back(tokenizer, text)] == [
        {"city": "Oslo", "days": 3},
        {"city": "Rome"},
    ]


@pytest.mark.parametrize(
    ("city", "written"),
    [
        ("Oslo <b> & c", "Oslo <b> & c"),
        ("two\nlines", "two\nlines"),
        ("3", '"3"'),
        ("-1.5e3", '"-1.5e3"'),
        ("true", '"true"'),
        ("null", '"null"'),
        ("[draft", '"[draft"'),
        ('"quoted"', '"\\"quoted\\""'),
        (" padded", '" padded"'),
    ],
)
def test_muse_spark_quotes_a_string_only_where_it_would_read_back_as_something_else(
    tokenizers: dict[str, Any], city: str, written: str
) -> None:
    tokenizer = tokenizers["muse_spark"]
    text = history(tokenizer, {"name": "get_weather", "arguments": {"city": city}})
    assert f'<atem:parameter name="city">{written}</atem:parameter>' in text
    # Its parser ignores the tool's declared types: only the writing keeps a string a string.
    (call,) = read_back(tokenizer, text)
    assert call["arguments"] == {"city": city}


def test_muse_spark_a_value_holding_the_closing_tag_ends_there(tokenizers: dict[str, Any]) -> None:
    assert round_trip(tokenizers["muse_spark"], {"city": "a</atem:parameter>b"}) == {"city": "a"}


def test_muse_spark_thinks_with_mlx_lms_think_tokens_and_has_no_think_tags(
    tokenizers: dict[str, Any],
) -> None:
    tokenizer = tokenizers["muse_spark"]
    assert (tokenizer.think_start, tokenizer.think_end) == ("<|think:start|>", "<|think:end|>")
    assert "<think>" not in tokenizer.get_vocab()


def test_muse_spark_names_the_tool_a_result_comes_from_when_the_client_does(
    tokenizers: dict[str, Any],
) -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"},
    ]
    text = tokenizers["muse_spark"].apply_chat_template(messages, tokenize=False)
    assert '<|tool|>\n<tool_output name="get_weather">\nsunny\n</tool_output><|end|>\n' in text
    assert "<|tool|>\n<tool_output>\nrain\n</tool_output><|end|>\n" in text
