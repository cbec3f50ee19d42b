"""Two variants whose syntax no other family shares: Mistral's ("mistral") and LFM2's ("pythonic").

Mistral (v11 tokenizers: Mistral Small 3.x, Devstral, Magistral) lists its tools as JSON between
`[AVAILABLE_TOOLS]` and `[/AVAILABLE_TOOLS]` and writes each call as `[TOOL_CALLS]NAME[ARGS]{json}`,
with no end token; mlx-lm picks mistral from the template naming `[TOOL_CALLS]`. It has no thinking
mlx-lm recognises (Magistral's `[THINK]` is not among mlx-lm's markers), so none here.

Liquid's LFM2 lists its tools between `<|tool_list_start|>` and `<|tool_list_end|>` and writes a
turn's calls as one Python list of calls, `<|tool_call_start|>[get_weather(city="Oslo", days=2)]
<|tool_call_end|>`; mlx-lm picks pythonic from the template naming either start token. It thinks
between `<think>` tags.

Both keep the demo's turns (`<|role|>\\n … <|end|>\\n`); only tools, calls and thinking are the
family's. Tool results stay plain `<|tool|>` turns, as in the demo.
"""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family
from mlxhost.demo.families.template import turns

__all__ = ["FAMILIES"]

MISTRAL_TOKENS: Final = ("[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]")
PYTHONIC_TOKENS: Final = (
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<think>",
    "</think>",
)


MISTRAL_TEMPLATE: Final = turns(
    macros="",
    tools="[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]",
    reasoning="",  # no thinking: a turn's reasoning is dropped, as Mistral's own templates do
    # Each call carries its own `[TOOL_CALLS]`, as Mistral's v11 template writes them. Arguments
    # arrive as a dict (mlxhost parsed them) or as the string a client sent when it is not JSON;
    # a string renders as it came.
    calls=(
        "{% for tool_call in message['tool_calls'] %}"
        "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
        "[TOOL_CALLS]{{ tool_call.name }}[ARGS]"
        "{% if tool_call.arguments is string %}{{ tool_call.arguments }}"
        "{% else %}{{ tool_call.arguments | tojson }}{% endif %}"
        "{% endfor %}"
    ),
    closed_think="",
)

# A value as a Python literal: True/False/None at the top, JSON for strings (a JSON string is a
# valid Python one) and for containers, whose true/false/null the pythonic parser maps itself, as
# LFM2's own template writes them. A key that is no Python identifier (`my-key`, `class`) makes the
# call no Python; the parser's fallback then reads only flat `key=value` pairs of `\w+` keys.
_PYTHON_VALUE: Final = (
    "{% macro python(value) %}"
    "{% if value is none %}None{% elif value is boolean %}{{ 'True' if value else 'False' }}"
    "{% else %}{{ value | tojson }}{% endif %}"
    "{% endmacro %}"
)

PYTHONIC_TEMPLATE: Final = turns(
    macros=_PYTHON_VALUE,
    tools="List of tools: <|tool_list_start|>{{ tools | tojson }}<|tool_list_end|>",
    reasoning="<think>\n{{ message['reasoning_content'] }}\n</think>\n\n",
    # A turn's calls are one list, as LFM2 writes them. A string of arguments (not JSON) goes
    # between the parentheses as it came: there is no Python to make of it.
    calls=(
        "<|tool_call_start|>["
        "{% for tool_call in message['tool_calls'] %}"
        "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
        "{% if not loop.first %}, {% endif %}{{ tool_call.name }}("
        "{% if tool_call.arguments is string %}{{ tool_call.arguments }}"
        "{% else %}{% for key, value in tool_call.arguments.items() %}"
        "{% if not loop.first %}, {% endif %}{{ key }}={{ python(value) }}"
        "{% endfor %}{% endif %})"
        "{% endfor %}"
        "]<|tool_call_end|>"
    ),
    closed_think="<think>\n\n</think>\n\n",
)

FAMILIES: Final = {
    "mistral": Family("mistral", MISTRAL_TEMPLATE, special_tokens=MISTRAL_TOKENS),
    "pythonic": Family(
        "pythonic", PYTHONIC_TEMPLATE, special_tokens=PYTHONIC_TOKENS, think=("<think>", "</think>")
    ),
}
