"""The Gemma 4 and FunctionGemma variants beyond the shared matrix (test_demo_families.py): Gemma's
value notation in declarations and calls, Gemma 4's thought channel, and exactly which arguments
mlx-lm's naive function_gemma parser reads back (flat values only)."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost import demo

pytestmark = pytest.mark.unit

WEATHER = {
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


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("gemma")
    names = ("gemma4", "function_gemma")
    return {name: load_tokenizer(demo.make_model(root / name, "tiny", 0, name)) for name in names}


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": "call_x", "type": "function", "function": {"name": name, "arguments": arguments}}


def render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


def assistant_turn(tokenizer: Any, message: dict[str, Any]) -> str:
    """What the template makes of one assistant message, between its role token and `<|end|>`."""
    text = render(tokenizer, [{"role": "user", "content": "Q"}, {"role": "assistant", **message}])
    return text.split("<|assistant|>\n")[1].split("<|end|>")[0]


def read_back(tokenizer: Any, arguments: Any) -> Any:
    """A call to `f` with `arguments` as the template renders it, read by the family's parser."""
    turn = assistant_turn(tokenizer, {"content": "", "tool_calls": [call("f", arguments)]})
    return tokenizer.tool_parser(turn.split(tokenizer.tool_call_start)[1].split(tokenizer.tool_call_end)[0])


@pytest.mark.parametrize(
    ("name", "markers"),
    [
        (
            "gemma4",
            ("<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>"),
        ),
        (
            "function_gemma",
            (
                "<start_function_declaration>",
                "<end_function_declaration>",
                "<start_function_call>",
                "<end_function_call>",
                "<escape>",
            ),
        ),
    ],
)
def test_the_familys_markers_are_single_tokens(tokenizers: dict[str, Any], name: str, markers: tuple) -> None:
    tokenizer = tokenizers[name]
    assert [len(tokenizer.encode(m, add_special_tokens=False)) for m in markers] == [1] * len(markers)


def test_gemma4_declares_tools_in_its_notation(tokenizers: dict[str, Any]) -> None:
    text = render(tokenizers["gemma4"], [{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    assert text.startswith(
        "<|begin|><|system|>\nYou may call these tools:\n"
        '<|tool>declaration:get_weather{description:<|"|>The weather in a city.<|"|>,'
        'parameters:{type:<|"|>OBJECT<|"|>,properties:{city:{type:<|"|>STRING<|"|>},'
        'days:{type:<|"|>INTEGER<|"|>}},required:[<|"|>city<|"|>]}}<tool|><|end|>\n'
    ), text


def test_gemma4_writes_the_thought_channel_then_content_then_each_call(tokenizers: dict[str, Any]) -> None:
    turn = assistant_turn(
        tokenizers["gemma4"],
        {
            "content": "Looking.",
            "reasoning_content": "Need the weather.",
            "tool_calls": [call("get_weather", {"city": "Oslo", "days": 2, "note": None}), call("now", {})],
        },
    )
    assert turn == (
        "<|channel>thought\nNeed the weather.<channel|>Looking."
        '<|tool_call>call:get_weather{city:<|"|>Oslo<|"|>,days:2,note:null}<tool_call|>'
        "<|tool_call>call:now{}<tool_call|>"
    )


def test_gemma4_thinks_in_its_channel_tokens(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["gemma4"]
    ids = tokenizer.encode(tokenizer.think_start, add_special_tokens=False)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|channel>")
    assert tokenizer.decode(ids[1:]) == "thought"
    closed = render(tokenizer, [{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert closed.endswith("<|assistant|>\n<|channel>thought\n<channel|>")


@pytest.mark.parametrize(
    "arguments",
    [
        # Inside `<|"|>` a string may hold anything else, braces and separators included.
        {"text": 'a{b},c:d "q" \\ <x>\nnext', "empty": ""},
        {"nested": [{"a": [1, {"b": None}], "ok": True}], "ratio": -1.5e-7, "none": None},
        {"count": "3", "flag": "true"},
    ],
)
def test_gemma4_values_read_back(tokenizers: dict[str, Any], arguments: dict[str, Any]) -> None:
    assert read_back(tokenizers["gemma4"], arguments) == {"name": "f", "arguments": arguments}


def test_a_gemma4_key_that_is_not_a_word_does_not_read_back(tokenizers: dict[str, Any]) -> None:
    # The parser quotes only `\w+` keys before reading the arguments as JSON.
    with pytest.raises(ValueError):
        read_back(tokenizers["gemma4"], {"my-key": 1})


def test_function_gemma_declares_tools_and_calls_in_its_notation(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["function_gemma"]
    text = render(tokenizer, [{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    assert text.startswith(
        "<|begin|><|system|>\nYou may call these functions:\n"
        "<start_function_declaration>declaration:get_weather{"
        "description:<escape>The weather in a city.<escape>,"
        "parameters:{type:<escape>OBJECT<escape>,properties:{city:{type:<escape>STRING<escape>},"
        "days:{type:<escape>INTEGER<escape>}},required:[<escape>city<escape>]}}<end_function_declaration><|end|>\n"
    ), text
    turn = assistant_turn(
        tokenizer,
        {
            "content": "Looking.",
            "reasoning_content": "Dropped: FunctionGemma does not think.",
            "tool_calls": [call("get_weather", {"city": "Oslo", "days": 2}), call("now", {})],
        },
    )
    assert turn == (
        "Looking.<start_function_call>call:get_weather{city:<escape>Oslo<escape>,days:2}<end_function_call>"
        "<start_function_call>call:now{}<end_function_call>"
    )
    assert not tokenizer.has_thinking


@pytest.mark.parametrize(
    "arguments",
    [
        # What round-trips: flat strings (`,` and `:` inside `<escape>` are safe), numbers,
        # booleans, null, and arrays whose JSON holds no comma and no string.
        {"city": "Paris <Nord>, 2:30", "days": 3, "ratio": -0.5, "metric": True, "off": False, "note": None},
        {"count": "3", "empty": ""},
        {"none": [], "one": [7]},
    ],
)
def test_function_gemma_flat_values_read_back(tokenizers: dict[str, Any], arguments: dict[str, Any]) -> None:
    assert read_back(tokenizers["function_gemma"], arguments) == {"name": "f", "arguments": arguments}


@pytest.mark.parametrize(
    ("arguments", "read"),
    [
        # The call's arguments end at the first `}`: an object is cut, and whatever follows it lost.
        ({"where": {"lat": 1.5}, "days": 3}, {"where": "{lat:1.5"}),
        ({"empty": {}}, {"empty": "{"}),
        # A bare value ends at the first `,` and only a value starting with `<escape>` is a string:
        # an array of strings comes back as its text.
        ({"tags": ["a"]}, {"tags": "[<escape>a<escape>]"}),
    ],
)
def test_function_gemma_objects_and_arrays_do_not_read_back(
    tokenizers: dict[str, Any], arguments: dict[str, Any], read: dict[str, Any]
) -> None:
    assert read_back(tokenizers["function_gemma"], arguments) == {"name": "f", "arguments": read}


@pytest.mark.parametrize("arguments", [{"tags": [1, 2]}, {"text": "a}b", "n": 1}])
def test_function_gemma_cannot_parse_an_array_of_two_or_a_string_holding_a_brace(
    tokenizers: dict[str, Any], arguments: dict[str, Any]
) -> None:
    # `[1,2]` splits into `[1` and a key `2]` with no `:`; `a}b` cuts the call inside its string.
    with pytest.raises(ValueError):
        read_back(tokenizers["function_gemma"], arguments)


@pytest.mark.parametrize("name", ["gemma4", "function_gemma"])
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
