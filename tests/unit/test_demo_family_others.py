"""The Mistral and LFM2 (pythonic) variants beyond the shared matrix (test_demo_families.py): their
exact call syntax, values as each parser reads them back, and what a pythonic call cannot hold."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost import demo

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("others")
    return {
        name: load_tokenizer(demo.make_model(root / name, "tiny", 0, name))
        for name in ("mistral", "pythonic")
    }


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
    body = turn.split(tokenizer.tool_call_start)[1]
    return tokenizer.tool_parser(
        body.split(tokenizer.tool_call_end)[0] if tokenizer.tool_call_end else body, None
    )


@pytest.mark.parametrize(
    ("name", "markers"),
    [
        ("mistral", ("[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]")),
        (
            "pythonic",
            (
                "<|tool_list_start|>",
                "<|tool_list_end|>",
                "<|tool_call_start|>",
                "<|tool_call_end|>",
                "<think>",
            ),
        ),
    ],
)
def test_the_familys_markers_are_single_tokens(tokenizers: dict[str, Any], name: str, markers: tuple) -> None:
    tokenizer = tokenizers[name]
    assert [len(tokenizer.encode(m, add_special_tokens=False)) for m in markers] == [1] * len(markers)


def test_mistral_lists_the_tools_as_json_between_its_tokens(tokenizers: dict[str, Any]) -> None:
    tool = {"type": "function", "function": {"name": "now", "description": "The time.", "parameters": {}}}
    text = render(tokenizers["mistral"], [{"role": "user", "content": "Time?"}], tools=[tool])
    assert text.startswith(
        "<|begin|><|system|>\n[AVAILABLE_TOOLS]"
        '[{"type": "function", "function": {"name": "now", "description": "The time.", "parameters": {}}}]'
        "[/AVAILABLE_TOOLS]<|end|>\n<|user|>\nTime?"
    ), text


def test_mistral_prefixes_each_call_and_drops_reasoning(tokenizers: dict[str, Any]) -> None:
    turn = assistant_turn(
        tokenizers["mistral"],
        {
            "content": "Looking.",
            "reasoning_content": "Need the weather.",
            "tool_calls": [call("get_weather", {"city": "Oslo", "days": 2}), call("now", {})],
        },
    )
    assert turn == 'Looking.[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo", "days": 2}[TOOL_CALLS]now[ARGS]{}'


def test_mistral_has_no_think_block_to_close(tokenizers: dict[str, Any]) -> None:
    tokenizer = tokenizers["mistral"]
    assert not tokenizer.has_thinking
    closed = render(tokenizer, [{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert closed == "<|begin|><|user|>\nHi<|end|>\n<|assistant|>\n"


def test_mistral_reads_arguments_given_as_a_json_string(tokenizers: dict[str, Any]) -> None:
    read = read_back(tokenizers["mistral"], '{"city": "Oslo", "days": [1, 2]}')
    assert read == {"name": "f", "arguments": {"city": "Oslo", "days": [1, 2]}}


def test_pythonic_writes_a_turns_calls_as_one_python_list(tokenizers: dict[str, Any]) -> None:
    turn = assistant_turn(
        tokenizers["pythonic"],
        {
            "content": "Looking.",
            "reasoning_content": "Need the weather.",
            "tool_calls": [
                call("get_weather", {"city": "Oslo", "days": 2, "metric": True, "note": None}),
                call("now", {}),
            ],
        },
    )
    assert turn == (
        "<think>\nNeed the weather.\n</think>\n\nLooking."
        '<|tool_call_start|>[get_weather(city="Oslo", days=2, metric=True, note=None), now()]'
        "<|tool_call_end|>"
    )


def test_pythonic_lists_the_tools_between_its_tokens(tokenizers: dict[str, Any]) -> None:
    tool = {"type": "function", "function": {"name": "now", "parameters": {}}}
    text = render(tokenizers["pythonic"], [{"role": "user", "content": "Time?"}], tools=[tool])
    assert (
        "List of tools: <|tool_list_start|>"
        '[{"type": "function", "function": {"name": "now", "parameters": {}}}]'
        "<|tool_list_end|><|end|>\n"
    ) in text


@pytest.mark.parametrize(
    "arguments",
    [
        # JSON's string escapes are Python's, so any string reads back.
        {"text": 'say "hi"\\there\nnext line', "unicode": "Zürich ✓", "empty": ""},
        # Containers hold JSON's true/false/null, which the parser maps to Python's.
        {"nested": {"flags": [True, False, None], "deep": [{"x": 1.5e-7}]}, "none": None, "no": False},
        # A string that reads as a number or a literal stays a string.
        {"count": "3", "flag": "True", "nothing": "None"},
    ],
)
def test_pythonic_values_read_back(tokenizers: dict[str, Any], arguments: dict[str, Any]) -> None:
    assert read_back(tokenizers["pythonic"], arguments) == {"name": "f", "arguments": arguments}


def test_a_pythonic_call_whose_key_is_no_python_name_falls_to_the_flat_reader(
    tokenizers: dict[str, Any],
) -> None:
    # `class=` and `my-key=` are no Python, so the parser's fallback reads flat `\w+=value` pairs:
    # a bare value ends at the first comma and a key keeps only its last word.
    read = read_back(tokenizers["pythonic"], {"class": 1, "tags": [1, 2], "my-key": "x"})
    assert read == {"name": "f", "arguments": {"class": 1, "tags": "[1", "key": "x"}}


@pytest.mark.parametrize("name", ["mistral", "pythonic"])
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
