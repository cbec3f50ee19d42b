"""Google's Gemma variants: Gemma 4 ("gemma4") and FunctionGemma ("function_gemma").

Both write values in Gemma's own notation rather than JSON: bare keys, strings between a delimiter
token, `{key:value,…}` objects and `[…]` arrays; Gemma 4's delimiter is `<|"|>`, FunctionGemma's
`<escape>`. Tools are declared in it too, their schema's types upper-cased as Gemma writes them.

Gemma 4 declares each tool as `<|tool>declaration:NAME{description:…,parameters:{…}}<tool|>`, calls
as `<|tool_call>call:NAME{city:<|"|>Oslo<|"|>,days:2}<tool_call|>` and thinks in a channel,
`<|channel>thought\\n…<channel|>`; mlx-lm picks gemma4 from the template naming both call tokens, and
its think markers `<|channel>thought` … `<channel|>` from the channel tokens in the vocabulary.

FunctionGemma declares tools between `<start_function_declaration>` and `<end_function_declaration>`
and calls as `<start_function_call>call:NAME{city:<escape>Oslo<escape>}<end_function_call>`; it
does not think. mlx-lm's function_gemma parser reads flat `key:value` pairs only (see
FUNCTION_GEMMA_TEMPLATE for what it cannot read back).

Both keep the demo's turns (`<|role|>\\n … <|end|>\\n`); only tools, calls and thinking are the
family's. Tool results stay plain `<|tool|>` turns, as in the demo.
"""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family
from mlxhost.demo.families.template import turns

__all__ = ["FAMILIES"]

GEMMA4_QUOTE: Final = '<|"|>'
GEMMA4_TOKENS: Final = (
    "<|tool>",
    "<tool|>",
    "<|tool_call>",
    "<tool_call|>",
    GEMMA4_QUOTE,
    "<|channel>",
    "<channel|>",
)
GEMMA4_THINK: Final = ("<|channel>thought", "<channel|>")
FUNCTION_GEMMA_TOKENS: Final = (
    "<start_function_declaration>",
    "<end_function_declaration>",
    "<start_function_call>",
    "<end_function_call>",
    "<escape>",
)


def _value_macro(quote: str) -> str:
    """A Jinja macro `value(v, schema=false)` writing `v` in Gemma's notation with strings between
    `quote`; in a tool's schema (`schema`) a `type` is upper-cased, as Gemma declares them.

    Braces are written as expressions: a literal `{` before `{%` would open a `{{`."""
    return (
        "{% macro value(v, schema=false) %}"
        f"{{% if v is string %}}{quote}{{{{ v }}}}{quote}"
        "{% elif v is mapping %}{{ '{' }}"
        "{% for key, item in v.items() %}{% if not loop.first %},{% endif %}{{ key }}:"
        "{% if schema and key == 'type' and item is string %}{{ value(item | upper) }}"
        "{% else %}{{ value(item, schema) }}{% endif %}"
        "{% endfor %}{{ '}' }}"
        "{% elif v is sequence %}["
        "{% for item in v %}{% if not loop.first %},{% endif %}{{ value(item, schema) }}{% endfor %}"
        "]"
        # Numbers, booleans and null as JSON: both parsers read a bare value with json.loads.
        "{% else %}{{ v | tojson }}{% endif %}"
        "{% endmacro %}"
    )


def _declaration(start: str, end: str) -> str:
    """Each of `tools` as `{start}declaration:NAME{description:…,parameters:…}{end}`."""
    return (
        "{% for tool in tools %}"
        "{% set function = tool.function if tool.function is defined else tool %}"
        f"{start}declaration:{{{{ function.name }}}}{{{{ '{{' }}}}"
        "{% if function.description is defined %}description:{{ value(function.description) }},{% endif %}"
        "parameters:{{ value(function.parameters if function.parameters is defined else {}, true) }}"
        f"{{{{ '}}' }}}}{end}"
        "{% endfor %}"
    )


def _calls(start: str, end: str) -> str:
    """An assistant turn's calls, each as `{start}call:NAME{…}{end}`. Arguments arrive as a dict
    (mlxhost parsed them) or as the string a client sent when it is not JSON; a string renders as
    it came, the one thing there is to show of it."""
    return (
        "{% for tool_call in message['tool_calls'] %}"
        "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
        f"{start}call:{{{{ tool_call.name }}}}"
        "{% if tool_call.arguments is string %}{{ tool_call.arguments }}"
        "{% else %}{{ value(tool_call.arguments) }}{% endif %}"
        f"{end}"
        "{% endfor %}"
    )


# Gemma 4 turns thinking on with `<|think|>` in the system turn; it is left out so that a
# conversation without tools renders as the demo's does (thinking is open unless closed).
# A string holding `<|"|>`, or a key that is not `\w+` (the parser quotes only those), does not
# read back.
GEMMA4_TEMPLATE: Final = turns(
    macros=_value_macro(GEMMA4_QUOTE),
    tools="You may call these tools:\n" + _declaration("<|tool>", "<tool|>"),
    reasoning="<|channel>thought\n{{ message['reasoning_content'] }}<channel|>",
    calls=_calls("<|tool_call>", "<tool_call|>"),
    closed_think="<|channel>thought\n<channel|>",
)

# FunctionGemma's calls are written as its own template writes them, but mlx-lm's parser reads
# only flat pairs: the call ends at the first `}` (so an object, or a string holding `}`, cuts it
# short) and a bare value ends at the first `,` (so an array of two items splits apart). Strings,
# numbers, booleans and null read back; arrays and objects do not.
FUNCTION_GEMMA_TEMPLATE: Final = turns(
    macros=_value_macro("<escape>"),
    tools="You may call these functions:\n"
    + _declaration("<start_function_declaration>", "<end_function_declaration>"),
    reasoning="",  # no thinking: a turn's reasoning is dropped
    calls=_calls("<start_function_call>", "<end_function_call>"),
    closed_think="",
)

FAMILIES: Final = {
    "gemma4": Family("gemma4", GEMMA4_TEMPLATE, special_tokens=GEMMA4_TOKENS, think=GEMMA4_THINK),
    "function_gemma": Family("function_gemma", FUNCTION_GEMMA_TEMPLATE, special_tokens=FUNCTION_GEMMA_TOKENS),
}
