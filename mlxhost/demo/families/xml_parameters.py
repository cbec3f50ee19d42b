"""Families whose calls are XML elements with one element per parameter: Qwen3-Coder, MiniMax-M2,
MiniCPM5 and Muse Spark; and `chat_template`, the demo's turn layout with a family's tool and
thinking parts slotted in (the GLM-like families in `arg_keys` use it too).

Each template is written here from the family's published format; the demo's own turns stay (its
role tokens, `<|begin|>`, `<|role|>\\n … <|end|>\\n`), only tools, calls, results and thinking are
the family's.
"""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family

__all__ = ["FAMILIES", "chat_template"]

# Jinja pieces every family's template shares. The environment transformers renders templates in
# drops a newline right after a block tag, so newlines that follow one are written as expressions.
_MACROS: Final = (
    "{% macro text(content) %}"
    "{% if content is string %}{{ content }}"
    "{% elif content %}{% for part in content %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endmacro %}"
    # An argument's value as the families write it: a string as it is, anything else as JSON.
    "{% macro value(v) %}{% if v is string %}{{ v }}{% else %}{{ v | tojson }}{% endif %}{% endmacro %}"
)


def chat_template(
    *,
    tools: str,
    call: str,
    think: tuple[str, str],
    result: str = "{{ text(message['content']) }}",
    calls_open: str = "",
    calls_close: str = "",
    separator: str = "{{ '\\n' }}",
) -> str:
    """The demo's chat template (`mlxhost.demo.tokenizer.CHAT_TEMPLATE`'s shape) with a family's parts.

    Each part is Jinja source. `tools` lists the `tools` variable and says how to call one (after
    the caller's own system text, in a system turn); `call` writes one of an assistant turn's calls
    as `call` (the OpenAI `function` object: `call.name`, `call.arguments`, a mapping or, where the
    client's JSON did not parse, a string); the turn's calls stand between `calls_open` and
    `calls_close`, `separator` between two; `result` writes a `tool` turn's `message`. Reasoning
    stands between the `think` markers before the answer, and `enable_thinking=False` closes an
    empty think block in the generation prompt.
    """
    start, end = think
    return (
        _MACROS + "{{ bos_token }}"
        "{% set skip_first = tools and messages and messages[0]['role'] == 'system' %}"
        "{% if tools %}"
        "<|system|>\n"
        "{% if skip_first %}{{ text(messages[0]['content']) }}\n\n{% endif %}"
        f"{tools}<|end|>\n"
        "{% endif %}"
        "{% for message in messages %}"
        "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
        "{{ raise_exception('Unsupported role: ' + message['role']) }}"
        "{% endif %}"
        "{% if not (loop.first and skip_first) %}"
        "<|{{ message['role'] }}|>\n"
        "{% if message['role'] == 'assistant' and message['reasoning_content'] %}"
        f"{start}\n{{{{ message['reasoning_content'] }}}}\n{end}\n\n"
        "{% endif %}"
        "{% if message['role'] == 'tool' %}"
        f"{result}"
        "{% else %}{{ text(message['content']) }}{% endif %}"
        "{% if message['role'] == 'assistant' and message['tool_calls'] %}"
        "{% if message['content'] %}{{ '\\n' }}{% endif %}"
        f"{calls_open}"
        "{% for call in message['tool_calls'] %}"
        "{% if call.function is defined %}{% set call = call.function %}{% endif %}"
        f"{{% if not loop.first %}}{separator}{{% endif %}}"
        f"{call}"
        "{% endfor %}"
        f"{calls_close}"
        "{% endif %}"
        "<|end|>\n"
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n"
        "{% if enable_thinking is defined and enable_thinking is false %}"
        f"{start}\n\n{end}\n\n"
        "{% endif %}"
        "{% endif %}"
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
}
