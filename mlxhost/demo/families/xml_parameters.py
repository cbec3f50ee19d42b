"""Families whose calls are XML elements with one element per parameter: Qwen3-Coder, MiniMax-M2,
MiniCPM5 and Muse Spark (their templates are `template.chat_template`s).

Each template is written here from the family's published format; the demo's own turns stay (its
role tokens, `<|begin|>`, `<|role|>\\n … <|end|>\\n`), only tools, calls, results and thinking are
the family's.
"""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family
from mlxhost.demo.families.template import chat_template

__all__ = ["FAMILIES"]


# Each tool's JSON, one a line, between <tools> tags (MiniMax-M2 wraps each in <tool> as well).
def _json_tools(open_tag: str = "", close_tag: str = "") -> str:
    return (
        "You may call these tools:\n<tools>\n"
        f"{{% for tool in tools %}}{open_tag}{{{{ tool | tojson }}}}{close_tag}{{{{ '\\n' }}}}{{% endfor %}}"
        "</tools>\n"
    )


# Qwen3-Coder lists each function as XML (name, description, and each parameter's schema keys as
# elements) rather than as JSON, and calls one with a <function=NAME> element holding a
# <parameter=KEY> element per argument, each value on lines of its own. The value is not escaped:
# a string holding "</parameter>" ends the value there, as it would in the real model's output.
QWEN3_CODER: Final = chat_template(
    tools=(
        "# Tools\n\nYou have access to these functions:\n\n<tools>"
        "{% for tool in tools %}"
        "{% set fn = tool.function if tool.function is defined else tool %}"
        "{{ '\\n' }}<function>\n<name>{{ fn.name }}</name>"
        "{% if fn.description %}{{ '\\n' }}<description>{{ fn.description | trim }}</description>{% endif %}"
        "{{ '\\n' }}<parameters>"
        "{% if fn.parameters is mapping %}"
        "{% if fn.parameters.properties is mapping %}"
        "{% for name, schema in fn.parameters.properties | items %}"
        "{{ '\\n' }}<parameter>\n<name>{{ name }}</name>"
        "{% for key, field in schema | items %}"
        "{{ '\\n' }}<{{ key }}>{{ value(field) }}</{{ key }}>"
        "{% endfor %}"
        "{{ '\\n' }}</parameter>"
        "{% endfor %}"
        "{% endif %}"
        "{% for key, field in fn.parameters | items if key not in ['type', 'properties'] %}"
        "{{ '\\n' }}<{{ key }}>{{ value(field) }}</{{ key }}>"
        "{% endfor %}"
        "{% endif %}"
        "{{ '\\n' }}</parameters>\n</function>"
        "{% endfor %}"
        "{{ '\\n' }}</tools>\n\n"
        "To call a function, reply with the call and nothing after it:\n\n"
        "{{ '<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n"
        "</tool_call>' }}\n\n"
        "A value may take several lines; a value that is not a string is written as JSON."
    ),
    call=(
        "<tool_call>\n<function={{ call.name }}>\n"
        "{% if call.arguments is mapping %}"
        "{% for key, v in call.arguments | items %}"
        "<parameter={{ key }}>\n{{ value(v) }}\n</parameter>\n"
        "{% endfor %}"
        "{% elif call.arguments %}{{ call.arguments }}\n{% endif %}"
        "</function>\n</tool_call>"
    ),
    think=("<think>", "</think>"),
    result="<tool_response>\n{{ text(message['content']) }}\n</tool_response>",
)

# MiniMax-M2 lists each tool's JSON in a <tool> element, and makes a turn's calls in one
# <minimax:tool_call> section: an <invoke name="…"> element per call, a <parameter name="…"> per
# argument. Its parser strips the space around a value, and reads a parameter its tool does not
# declare as a string.
MINIMAX_M2: Final = chat_template(
    tools=(
        "# Tools\n"
        + _json_tools("<tool>", "</tool>")
        + "\nTo call tools, reply with XML:\n\n<minimax:tool_call>\n"
        '<invoke name="TOOL">\n<parameter name="KEY">VALUE</parameter>\n</invoke>\n'
        "</minimax:tool_call>\n\nA value that is not a string is written as JSON."
    ),
    calls_open="<minimax:tool_call>\n",
    call=(
        '<invoke name="{{ call.name }}">\n'
        "{% if call.arguments is mapping %}"
        "{% for key, v in call.arguments | items %}"
        '<parameter name="{{ key }}">{{ value(v) }}</parameter>\n'
        "{% endfor %}"
        "{% elif call.arguments %}{{ call.arguments }}\n{% endif %}"
        "</invoke>\n"
    ),
    separator="",
    calls_close="</minimax:tool_call>",
    think=("<think>", "</think>"),
    result="<response>{{ text(message['content']) }}</response>",
)

# MiniCPM5 writes calls with no wrapper around them: <function name="…"> elements one after another,
# a <param name="…"> per argument. Its parser strips the space around a value unless the value is in
# a CDATA section, which the family uses for a value holding "<", "&" or a line break; the demo
# also uses one for a value with space at either end, so that the space survives.
MINICPM5: Final = chat_template(
    tools=(
        "# Tools\n"
        + _json_tools()
        + '\nTo call a tool, reply with <function name="TOOL"><param name="KEY">VALUE</param></function>, '
        "one such element per call. Write a value that is not a string as JSON, and one that holds "
        "<, & or a line break as <![CDATA[VALUE]]>."
    ),
    call=(
        '<function name="{{ call.name }}">'
        "{% if call.arguments is mapping %}"
        "{% for key, v in call.arguments | items %}"
        "{% set written = value(v) %}"
        '<param name="{{ key }}">'
        "{% if '<' in written or '&' in written or '\\n' in written or written != written | trim %}"
        "<![CDATA[{{ written }}]]>{% else %}{{ written }}{% endif %}"
        "</param>"
        "{% endfor %}"
        "{% elif call.arguments %}{{ call.arguments }}{% endif %}"
        "</function>"
    ),
    separator="",
    think=("<think>", "</think>"),
)

# Muse Spark makes a turn's calls in one <atem:function_calls> block: an <atem:invoke name="…"> per
# call, an <atem:parameter name="…"> per argument. Its parser reads every value that parses as JSON
# as JSON, whatever the tool declares, and strips the space around any other. So a string is
# written as it is unless it would read back as something else (a number, true, "[…]", space at an
# edge…): that one is written as a JSON string, which the parser reads back to the same string.
MUSE_SPARK: Final = chat_template(
    tools=(
        _json_tools() + "\nTo call tools, reply with XML:\n\n<atem:function_calls>\n"
        '<atem:invoke name="TOOL">\n<atem:parameter name="KEY">VALUE</atem:parameter>\n'
        "</atem:invoke>\n</atem:function_calls>\n\nA value that is not a string is written as JSON."
    ),
    calls_open="<atem:function_calls>\n",
    call=(
        '<atem:invoke name="{{ call.name }}">\n'
        "{% if call.arguments is mapping %}"
        "{% for key, v in call.arguments | items %}"
        '<atem:parameter name="{{ key }}">'
        "{% if v is string and (v != v | trim or v in ['true', 'false', 'null', 'NaN', 'Infinity', "
        "'-Infinity'] or v[:1] in ['\"', '[', '{'] or v | float(none) is not none) %}"
        "{{ v | tojson }}{% else %}{{ value(v) }}{% endif %}"
        "</atem:parameter>\n"
        "{% endfor %}"
        "{% elif call.arguments %}{{ call.arguments }}\n{% endif %}"
        "</atem:invoke>\n"
    ),
    separator="",
    calls_close="</atem:function_calls>",
    # mlx-lm knows these markers, not Muse Spark: its checkpoints reason in a message of their own
    # ("to=self"). Pairing them with the ATEM calls is this demo's choice, so the variant thinks.
    think=("<|think:start|>", "<|think:end|>"),
    result=(
        '<tool_output{% if message.name %} name="{{ message.name }}"{% endif %}>\n'
        "{{ text(message['content']) }}\n</tool_output>"
    ),
)

FAMILIES: Final = {
    "qwen3_coder": Family(
        "qwen3_coder",
        QWEN3_CODER,
        # Qwen3-Coder's and Qwen3.5's vocabularies hold these as single tokens; Qwen3.5 thinks.
        special_tokens=(
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
            "<think>",
            "</think>",
        ),
        think=("<think>", "</think>"),
    ),
    "minimax_m2": Family(
        "minimax_m2",
        MINIMAX_M2,
        special_tokens=("<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>"),
        think=("<think>", "</think>"),
    ),
    "minicpm5": Family(
        "minicpm5", MINICPM5, special_tokens=("<think>", "</think>"), think=("<think>", "</think>")
    ),
    "muse_spark": Family(
        "muse_spark",
        MUSE_SPARK,
        special_tokens=("<|think:start|>", "<|think:end|>"),
        think=("<|think:start|>", "<|think:end|>"),
    ),
}
