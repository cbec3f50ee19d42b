"""The demo's turn layout with a family's parts put in: every variant's chat template is one of these.

The demo's own turns stay in every variant (its role tokens, `<|begin|>`, `<|role|>\\n … <|end|>\\n`);
only tools, calls, results and thinking are the family's. The environment transformers renders
templates in drops a newline right after a block tag, so newlines that follow one are written as
expressions.
"""

from __future__ import annotations

from typing import Final

__all__ = ["chat_template", "turns"]


def turns(
    *,
    tools: str,
    calls: str,
    reasoning: str = "",
    closed_think: str = "",
    macros: str = "",
    content: str = "{{ text(message['content']) }}",
) -> str:
    """The demo's chat template (demo/tokenizer.py) with a family's parts put in, each Jinja source:
    `tools` lists `tools` in the system turn; `reasoning` and `calls` render an assistant
    `message`'s `reasoning_content` and `tool_calls`; `content` renders a message's content (a
    family may wrap a tool turn's); `closed_think` is the generation prompt's empty think block when
    `enable_thinking` is false; `macros` adds Jinja macros the parts use."""
    return (
        "{% macro text(content) %}"
        "{% if content is string %}{{ content }}"
        "{% elif content %}{% for part in content %}"
        "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        "{% endmacro %}"
        f"{macros}"
        "{{ bos_token }}"
        "{% set skip_first = tools and messages and messages[0]['role'] == 'system' %}"
        "{% if tools %}"
        "<|system|>\n"
        "{% if skip_first %}{{ text(messages[0]['content']) }}\n\n{% endif %}"
        f"{tools}"
        "<|end|>\n"
        "{% endif %}"
        "{% for message in messages %}"
        "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
        "{{ raise_exception('Unsupported role: ' + message['role']) }}"
        "{% endif %}"
        "{% if not (loop.first and skip_first) %}"
        "<|{{ message['role'] }}|>\n"
        "{% if message['role'] == 'assistant' and message['reasoning_content'] %}"
        f"{reasoning}"
        "{% endif %}"
        f"{content}"
        "{% if message['role'] == 'assistant' and message['tool_calls'] %}"
        f"{calls}"
        "{% endif %}"
        "<|end|>\n"
        "{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n"
        "{% if enable_thinking is defined and enable_thinking is false %}"
        f"{closed_think}"
        "{% endif %}"
        "{% endif %}"
    )


# An argument's value as the families write it: a string as it is, anything else as JSON.
_VALUE: Final = (
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
    return turns(
        macros=_VALUE,
        tools=tools,
        reasoning=f"{start}\n{{{{ message['reasoning_content'] }}}}\n{end}\n\n",
        content=(
            f"{{% if message['role'] == 'tool' %}}{result}"
            "{% else %}{{ text(message['content']) }}{% endif %}"
        ),
        calls=(
            "{% if message['content'] %}{{ '\\n' }}{% endif %}"
            f"{calls_open}"
            "{% for call in message['tool_calls'] %}"
            "{% if call.function is defined %}{% set call = call.function %}{% endif %}"
            f"{{% if not loop.first %}}{separator}{{% endif %}}"
            f"{call}"
            "{% endfor %}"
            f"{calls_close}"
        ),
        closed_think=f"{start}\n\n{end}\n\n",
    )
