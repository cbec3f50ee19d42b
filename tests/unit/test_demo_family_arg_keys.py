"""The key/value-pair families' own quirks (GLM-4.7, Laguna, LongCat; the matrix in
test_demo_families.py covers what every family shares): the exact layout of a rendered call, how
Laguna is told apart from GLM, and what the parsers make of values, read back by mlx-lm's own parser.
"""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost import demo
from mlxhost.demo.families import arg_keys

pytestmark = pytest.mark.unit

NAMES = sorted(arg_keys.FAMILIES)
# "city" is the one declared string; "days" is declared but not a string; the rest are undeclared.
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
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
    "word": "plain",
}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("arg_keys")
    return {name: load_tokenizer(demo.make_model(root / name, "tiny", 0, name)) for name in NAMES}


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
    return [tokenizer.tool_parser(piece[: piece.index(end)], [TOOL]) for piece in text.split(start)[1:]]


def round_trip(tokenizer: Any, arguments: Any) -> Any:
    (call,) = read_back(tokenizer, history(tokenizer, {"name": "get_weather", "arguments": arguments}))
    assert call["name"] == "get_weather"
    return call["arguments"]


@pytest.mark.parametrize(("name", "prefix"), [("glm47", ""), ("laguna", ""), ("longcat", "longcat_")])
def test_a_call_is_its_name_then_a_line_per_key_and_per_value(
    tokenizers: dict[str, Any], name: str, prefix: str
) -> None:
    tokenizer = tokenizers[name]
    text = history(
        tokenizer,
        {"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
        content="Both.",
    )
    call, key, value = (f"{prefix}{tag}" for tag in ("tool_call", "arg_key", "arg_value"))
    assert text == (
        f"Both.\n<{call}>get_weather\n"
        f"<{key}>city</{key}>\n<{value}>Oslo</{value}>\n"
        f"<{key}>days</{key}>\n<{value}>3</{value}>\n"
        f"</{call}>\n<{call}>get_weather\n"
        f"<{key}>city</{key}>\n<{value}>Rome</{value}>\n"
        f"</{call}>"
    )
    assert [c["arguments"] for c in read_back(tokenizer, text)] == [
        {"city": "Oslo", "days": 3},
        {"city": "Rome"},
    ]


@pytest.mark.parametrize("name", NAMES)
def test_every_type_reads_back_declared_or_not(tokenizers: dict[str, Any], name: str) -> None:
    assert round_trip(tokenizers[name], EVERY_TYPE) == EVERY_TYPE


@pytest.mark.parametrize("name", NAMES)
def test_only_a_declared_string_stays_a_string_whatever_it_holds(
    tokenizers: dict[str, Any], name: str
) -> None:
    tokenizer = tokenizers[name]
    declared = {"city": "3", "word": "3", "flag": "true", "list": "[1, 2]"}
    # Written as the strings they are, so an undeclared one reads as the value it spells, as it
    # would from the real model.
    assert round_trip(tokenizer, declared) == {"city": "3", "word": 3, "flag": True, "list": [1, 2]}


@pytest.mark.parametrize("name", NAMES)
def test_values_lose_their_edge_space_and_end_at_the_closing_tag(
    tokenizers: dict[str, Any], name: str
) -> None:
    tokenizer = tokenizers[name]
    end = "</longcat_arg_value>" if name == "longcat" else "</arg_value>"
    assert round_trip(tokenizer, {"city": "two\nlines <b> & c"}) == {"city": "two\nlines <b> & c"}
    assert round_trip(tokenizer, {"city": "  Oslo\n"}) == {"city": "Oslo"}
    assert round_trip(tokenizer, {"city": f"a{end}b", "days": 1}) == {"city": "a", "days": 1}


@pytest.mark.parametrize("name", NAMES)
def test_a_call_without_arguments_is_its_name_alone(tokenizers: dict[str, Any], name: str) -> None:
    call = "longcat_tool_call" if name == "longcat" else "tool_call"
    text = history(tokenizers[name], {"name": "get_weather", "arguments": {}})
    assert text == f"<{call}>get_weather\n</{call}>"
    if name == "longcat":
        # mlx-lm 0.32's longcat parser looks for the first key and fails without one: a LongCat
        # call with no arguments cannot be read back by it (the real model's neither).
        with pytest.raises(AttributeError):
            read_back(tokenizers[name], text)
    else:
        assert read_back(tokenizers[name], text) == [{"name": "get_weather", "arguments": {}}]


def test_laguna_is_glms_template_with_its_parser_named_in_tokenizer_config(
    tokenizers: dict[str, Any],
) -> None:
    laguna, glm = arg_keys.FAMILIES["laguna"], arg_keys.FAMILIES["glm47"]
    assert laguna.chat_template == glm.chat_template and dict(laguna.tokenizer_config) == {
        "tool_parser_type": "laguna"
    }
    # mlx-lm's laguna module re-exports glm47's parser, so the parser alone cannot tell them apart:
    # the type mlx-lm settled on is in the loaded configuration.
    assert tokenizers["laguna"].init_kwargs["tool_parser_type"] == "laguna"
    assert tokenizers["glm47"].init_kwargs["tool_parser_type"] == "glm47"


@pytest.mark.parametrize("name", NAMES)
def test_the_familys_markers_are_single_tokens(tokenizers: dict[str, Any], name: str) -> None:
    tokenizer = tokenizers[name]
    for marker in arg_keys.FAMILIES[name].special_tokens:
        assert len(tokenizer.encode(marker, add_special_tokens=False)) == 1, marker


def test_longcat_thinks_in_its_own_tags(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["longcat"]
    assert (tokenizer.think_start, tokenizer.think_end) == ("<longcat_think>", "</longcat_think>")
    assert "<think>" not in tokenizer.get_vocab()


@pytest.mark.parametrize(("name", "tag"), [("glm47", "tool_response"), ("longcat", "longcat_tool_response")])
def test_a_tool_result_is_wrapped_in_the_familys_response_tags(
    tokenizers: dict[str, Any], name: str, tag: str
) -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "tool", "tool_call_id": "call_0", "content": [{"type": "text", "text": "sunny"}]},
    ]
    text = tokenizers[name].apply_chat_template(messages, tokenize=False)
    assert f"<|tool|>\n<{tag}>\nsunny\n</{tag}><|end|>\n" in text


@pytest.mark.parametrize("name", NAMES)
def test_the_tools_are_listed_as_json_with_the_call_syntax(tokenizers: dict[str, Any], name: str) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = tokenizers[name].apply_chat_template(
        messages, tools=[TOOL], tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|begin|><|system|>\nBe brief.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "get_weather", ' in text
    assert text.count("Be brief.") == 1 and text.endswith("<|user|>\nHi<|end|>\n<|assistant|>\n")
