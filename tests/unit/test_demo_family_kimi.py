"""The Kimi variants beyond the shared matrix (test_demo_families.py): Kimi K2's call ids and
section tokens, Kimi K3's XTML elements, typed arguments and escaped attributes, and both
templates taking arguments as OpenAI's JSON string."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost import demo

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("kimi")
    return {
        name: load_tokenizer(demo.make_model(root / name, "tiny", 0, name)) for name in ("kimi_k2", "kimi_k3")
    }


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": "call_x", "type": "function", "function": {"name": name, "arguments": arguments}}


def render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


def assistant_turn(tokenizer: Any, message: dict[str, Any]) -> str:
    """What the template makes of one assistant message, between its role token and `<|end|>`."""
    text = render(tokenizer, [{"role": "user", "content": "Q"}, {"role": "assistant", **message}])
    return text.split("<|assistant|>\n")[1].split("<|end|>")[0]


def read_back(tokenizer: Any, arguments: Any) -> list[dict[str, Any]]:
    """A call to `f` with `arguments` as the template renders it, read by the family's parser."""
    turn = assistant_turn(tokenizer, {"content": "", "tool_calls": [call("f", arguments)]})
    section = turn.split(tokenizer.tool_call_start)[1].split(tokenizer.tool_call_end)[0]
    return tokenizer.tool_parser(section, None)


@pytest.mark.parametrize(
    ("name", "markers"),
    [
        (
            "kimi_k2",
            (
                "<|tool_calls_section_begin|>",
                "<|tool_calls_section_end|>",
                "<|tool_call_begin|>",
                "<|tool_call_argument_begin|>",
                "<|tool_call_end|>",
                "<think>",
                "</think>",
            ),
        ),
        ("kimi_k3", ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")),
    ],
)
def test_the_familys_markers_are_single_tokens(tokenizers: dict[str, Any], name: str, markers: tuple) -> None:
    tokenizer = tokenizers[name]
    assert [len(tokenizer.encode(m, add_special_tokens=False)) for m in markers] == [1] * len(markers)


def test_kimi_k3_thinks_in_an_xtml_element(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["kimi_k3"]
    assert (tokenizer.think_start, tokenizer.think_end) == ("<|open|>think<|sep|>", "<|close|>think<|sep|>")
    ids = tokenizer.encode("<|open|>think<|sep|>", add_special_tokens=False)
    open_, sep = (tokenizer.convert_tokens_to_ids(t) for t in ("<|open|>", "<|sep|>"))
    assert (ids[0], ids[-1], tokenizer.decode(ids[1:-1])) == (open_, sep, "think")


def test_kimi_k2_writes_reasoning_then_content_then_one_call_section(tokenizers: dict[str, Any]) -> None:
    turn = assistant_turn(
        tokenizers["kimi_k2"],
        {
            "content": "Looking.",
            "reasoning_content": "Need the weather.",
            "tool_calls": [call("get_weather", {"city": "Oslo"}), call("get_time", {})],
        },
    )
    assert turn == (
        "<think>Need the weather.</think>Looking."
        "<|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|>'
        "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|>"
        "<|tool_calls_section_end|>"
    )


def test_kimi_k2_call_ids_count_the_calls_of_the_whole_conversation(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["kimi_k2"]
    messages = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "", "tool_calls": [call("a", {}), call("b", {})]},
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "2"},
        {"role": "assistant", "content": "", "tool_calls": [call("a", {"n": 1})]},
        {"role": "tool", "content": "3"},
    ]
    text = render(tokenizer, messages)
    ids = [
        c["id"]
        for section in text.split(tokenizer.tool_call_start)[1:]
        for c in tokenizer.tool_parser(section.split(tokenizer.tool_call_end)[0], None)
    ]
    assert ids == ["functions.a:0", "functions.b:1", "functions.a:2"]


def test_kimi_k3_writes_each_argument_as_an_element_with_its_json_type(tokenizers: dict[str, Any]) -> None:
    turn = assistant_turn(
        tokenizers["kimi_k3"],
        {
            "content": "Looking.",
            "reasoning_content": "Need the weather.",
            "tool_calls": [
                call("get_weather", {"city": "Oslo", "days": 2, "where": {"lat": 1}}),
                call("now", {}),
            ],
        },
    )
    assert turn == (
        "<|open|>think<|sep|>Need the weather.<|close|>think<|sep|>Looking."
        "<|open|>tools<|sep|>"
        '<|open|>call tool="get_weather" index="1"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|>'
        '<|open|>argument key="days" type="integer"<|sep|>2<|close|>argument<|sep|>'
        '<|open|>argument key="where" type="object"<|sep|>{"lat": 1}<|close|>argument<|sep|>'
        "<|close|>call<|sep|>"
        '<|open|>call tool="now" index="2"<|sep|><|close|>call<|sep|>'
        "<|close|>tools<|sep|>"
    )


def test_kimi_k3_strings_stay_strings_and_attributes_are_escaped(tokenizers: dict[str, Any]) -> None:
    # A string that reads as JSON ("3", "true") keeps its type, and a key holding `"` or `&`
    # survives the attribute it is written in; a string's text is written as it is.
    arguments = {"count": "3", "flag": "true", 'odd "key" & co': "x", "text": 'line\n"quoted" <b> & {}'}
    assert read_back(tokenizers["kimi_k3"], arguments) == [{"name": "f", "arguments": arguments}]


@pytest.mark.parametrize("name", ["kimi_k2", "kimi_k3"])
def test_arguments_given_as_a_json_string_read_back(tokenizers: dict[str, Any], name: str) -> None:
    # OpenAI clients send arguments as a JSON string: K2 writes it as it came, K3 in its raw-JSON
    # block; either way the parser reads the object.
    read = read_back(tokenizers[name], '{"city": "Oslo", "days": [1, 2]}')
    assert [(c["name"], c["arguments"]) for c in read] == [("f", {"city": "Oslo", "days": [1, 2]})]


@pytest.mark.parametrize("name", ["kimi_k2", "kimi_k3"])
def test_without_tools_calls_or_reasoning_the_conversation_renders_plainly(
    tokenizers: dict[str, Any], name: str
) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": [{"type": "text", "text": "Again"}]},
    ]
    assert render(tokenizers[name], messages) == (
        "<|begin|><|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n"
        "<|assistant|>\nHello.<|end|>\n<|user|>\nAgain<|end|>\n<|assistant|>\n"
    )
