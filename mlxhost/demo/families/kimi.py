"""Moonshot's Kimi variants: Kimi K2's call sections ("kimi_k2") and Kimi K3's XTML ("kimi_k3").

Kimi K2 (and K2 Thinking) writes a turn's calls as one section of special tokens,

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Oslo"}<|tool_call_end|><|tool_calls_section_end|>

each call's id `functions.NAME:IDX` numbering the calls of the whole conversation, and thinks
between `<think>` tags. mlx-lm picks kimi_k2 from the template naming the section's begin token.

Kimi K3 writes everything as XTML elements, `<|open|>NAME attrs<|sep|> … <|close|>NAME<|sep|>`:
its calls as `call` elements inside a `tools` element, each argument an `argument` element with
its key and JSON type, and its thinking as a `think` element. mlx-lm picks kimi_k3 from the
vocabulary (the four XTML tokens) and only when no template string of an earlier family matches,
so this template names none of them (no `<tool_call>`, no `<function name="`, ...).

Both keep the demo's turns (`<|role|>\\n … <|end|>\\n`); only tools, calls and thinking are Kimi's.
Tool results stay plain `<|tool|>` turns, as in the demo.
"""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family
from mlxhost.demo.families.template import turns

__all__ = ["FAMILIES"]

K2_TOKENS: Final = (
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<think>",
    "</think>",
)
# `<|end_of_msg|>` is never written by the template: real K3 vocabularies hold it, and mlx-lm
# takes all four tokens as the sign of an XTML model.
K3_TOKENS: Final = ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>")
K3_THINK: Final = ("<|open|>think<|sep|>", "<|close|>think<|sep|>")


# Arguments arrive as a dict (mlxhost parsed them) or as the string a client sent when it is not
# JSON; a string renders as it came, the one thing there is to show of it.
_K2_ARGUMENTS: Final = (
    "{% if tool_call.arguments is string %}{{ tool_call.arguments }}"
    "{% else %}{{ tool_call.arguments | tojson }}{% endif %}"
)

KIMI_K2_TEMPLATE: Final = turns(
    # Kimi numbers its calls across the whole conversation, so the counter lives outside the loop.
    macros="{% set calls = namespace(index=0) %}",
    tools="You may call these tools:\n{{ tools | tojson }}",
    reasoning="<think>{{ message['reasoning_content'] }}</think>",
    calls=(
        "<|tool_calls_section_begin|>"
        "{% for tool_call in message['tool_calls'] %}"
        "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
        "<|tool_call_begin|>functions.{{ tool_call.name }}:{{ calls.index }}"
        f"<|tool_call_argument_begin|>{_K2_ARGUMENTS}<|tool_call_end|>"
        "{% set calls.index = calls.index + 1 %}"
        "{% endfor %}"
        "<|tool_calls_section_end|>"
    ),
    closed_think="<think></think>",
)

# XTML attribute values escape `&` and `"` as the kimi_k3 parser unescapes them; JSON types name
# each argument's value, which the parser reads as JSON unless the type is "string".
_K3_MACROS: Final = (
    "{% macro attribute(value) %}"
    "{{ value | replace('&', '&amp;') | replace('\"', '&quot;') }}"
    "{% endmacro %}"
    "{% macro json_type(value) %}"
    "{% if value is none %}null{% elif value is boolean %}boolean"
    "{% elif value is integer %}integer{% elif value is number %}number"
    "{% elif value is string %}string{% elif value is mapping %}object{% else %}array{% endif %}"
    "{% endmacro %}"
)

KIMI_K3_TEMPLATE: Final = turns(
    macros=_K3_MACROS,
    # K3's own declaration layout is not published; each tool is a `declare` element holding its
    # OpenAI definition, in the shape of the XTML calls.
    tools=(
        "You may call these tools:"
        "{% for tool in tools %}"
        "{% set function = tool.function if tool.function is defined else tool %}"
        '\n<|open|>declare tool="{{ attribute(function.name) }}"<|sep|>'
        "{{ tool | tojson }}<|close|>declare<|sep|>"
        "{% endfor %}"
    ),
    reasoning="<|open|>think<|sep|>{{ message['reasoning_content'] }}<|close|>think<|sep|>",
    calls=(
        "<|open|>tools<|sep|>"
        "{% for tool_call in message['tool_calls'] %}"
        "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
        '<|open|>call tool="{{ attribute(tool_call.name) }}" index="{{ loop.index }}"<|sep|>'
        # A string (not JSON) goes in the raw-JSON block, the one form that holds it whole.
        "{% if tool_call.arguments is string %}"
        '<|open|>json type="object"<|sep|>{{ tool_call.arguments }}<|close|>json<|sep|>'
        "{% else %}{% for key, value in tool_call.arguments.items() %}"
        '<|open|>argument key="{{ attribute(key) }}" type="{{ json_type(value) }}"<|sep|>'
        # A string value is written bare: the parser keeps a "string" argument's text as it is.
        "{% if value is string %}{{ value }}{% else %}{{ value | tojson }}{% endif %}"
        "<|close|>argument<|sep|>"
        "{% endfor %}{% endif %}"
        "<|close|>call<|sep|>"
        "{% endfor %}"
        "<|close|>tools<|sep|>"
    ),
    closed_think=f"{K3_THINK[0]}{K3_THINK[1]}",
)

FAMILIES: Final = {
    "kimi_k2": Family("kimi_k2", KIMI_K2_TEMPLATE, special_tokens=K2_TOKENS, think=("<think>", "</think>")),
    "kimi_k3": Family("kimi_k3", KIMI_K3_TEMPLATE, special_tokens=K3_TOKENS, think=K3_THINK),
}
