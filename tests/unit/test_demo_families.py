"""Every demo variant presents itself to mlx-lm as its family's real checkpoints do: mlx-lm infers
the family's tool parser and think markers, and its chat template writes tools, calls, results and
reasoning in the family's syntax, so that the family's own parser reads a rendered call back.

A family's own quirks are tested beside its module (test_demo_family_<module>.py).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from mlxhost import demo
from mlxhost.demo.families import FAMILIES, family

pytestmark = pytest.mark.unit


def _built() -> list[str]:
    names = []
    for name, module in FAMILIES.items():
        if importlib.util.find_spec(f"mlxhost.demo.families.{module}"):
            try:
                family(name)
            except KeyError:  # its module is there, this family not yet
                continue
            names.append(name)
    return sorted(names)


NAMES = _built()

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            # Every argument declared: the XML families' parsers type a value by its declaration
            # (an undeclared one comes back as the text it was written as).
            "properties": {
                "city": {"type": "string"},
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
# One of each JSON type, as a client's earlier call would carry them.
ARGUMENTS: dict[str, Any] = {
    "city": "Paris <Nord> & co",
    "days": 3,
    "ratio": 0.5,
    "metric": True,
    "tags": ["a", "b"],
    "where": {"lat": 1.5, "lon": -2},
    "note": None,
}
# FunctionGemma's parser reads flat key:value pairs only (its regex ends a call at the first "}"
# and a bare value at the first ","): nested objects and arrays cannot come back from it.
FLAT = {"function_gemma"}


@pytest.fixture(scope="module")
def tokenizers(family_model: Callable[[str], Path]) -> dict[str, Any]:
    return {name: load_tokenizer(family_model(name)) for name in NAMES}


def render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_mlx_lm_infers_the_familys_parser_and_think_markers(tokenizers: dict[str, Any], name: str) -> None:
    tokenizer = tokenizers[name]
    # The parser's own module, or one it re-exports (laguna's is glm47's): load() names the type.
    assert tokenizer.init_kwargs["tool_parser_type"] == name
    assert tokenizer.tool_parser.__module__.startswith("mlx_lm.tool_parsers.")
    expected = family(name).think
    if expected is None:
        assert not tokenizer.has_thinking
    else:
        assert (tokenizer.think_start, tokenizer.think_end) == expected


@pytest.mark.parametrize("name", NAMES)
def test_the_template_offers_the_tools(tokenizers: dict[str, Any], name: str) -> None:
    text = render(tokenizers[name], [{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    assert "get_weather" in text and "The weather in a city." in text
    plain = render(tokenizers[name], [{"role": "user", "content": "Hi"}])
    assert "get_weather" not in plain and "Hi" in plain


@pytest.mark.parametrize("name", NAMES)
def test_a_rendered_call_reads_back_by_the_familys_parser(tokenizers: dict[str, Any], name: str) -> None:
    tokenizer = tokenizers[name]
    arguments = (
        {k: v for k, v in ARGUMENTS.items() if k not in ("tags", "where")} if name in FLAT else ARGUMENTS
    )
    oslo = {"city": "Oslo"}
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": oslo}},
    ]
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny and 21"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
    ]
    text = render(tokenizer, messages, tools=[WEATHER])
    assert "sunny and 21" in text and "rain" in text
    start, end = tokenizer.tool_call_start, tokenizer.tool_call_end
    history = text[text.index("Weather?") :]
    assert start in history, text
    read = []
    for piece in history.split(start)[1:]:
        body = piece[: piece.index(end)] if end else piece.split("<|end|>")[0]
        parsed = tokenizer.tool_parser(body, [WEATHER])
        read += parsed if isinstance(parsed, list) else [parsed]
    assert [(c["name"], _normalized(c["arguments"])) for c in read] == [
        ("get_weather", arguments),
        ("get_weather", {"city": "Oslo"}),
    ], text


@pytest.mark.parametrize("name", NAMES)
def test_reasoning_renders_between_the_think_markers(tokenizers: dict[str, Any], name: str) -> None:
    markers = family(name).think
    if markers is None:
        pytest.skip(f"{name} has no thinking")
    tokenizer = tokenizers[name]
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "They greet me."},
        {"role": "user", "content": "Again"},
    ]
    text = render(tokenizer, messages)
    assert markers[0] in text and "They greet me." in text and markers[1] in text
    order = [text.index(s) for s in (markers[0], "They greet me.", markers[1], "Hello.")]
    assert order == sorted(order), text
    closed = render(tokenizer, [{"role": "user", "content": "Hi"}], enable_thinking=False)
    assert closed.rstrip().endswith(markers[1]), closed


def _normalized(arguments: Any) -> Any:
    # JSON round trip: a parser may give 0.5 back as 0.5 and [..] as a list, which compare equal.
    return json.loads(json.dumps(arguments))


def test_an_unknown_family_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        demo.make_model(tmp_path / "m", "tiny", 0, "no_such_family")
    assert not (tmp_path / "m").exists()
