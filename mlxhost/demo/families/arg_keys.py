"""Families whose calls are a name then key/value element pairs: GLM-4.7, Poolside Laguna (GLM's
syntax, named in tokenizer_config) and LongCat (the same, with its own `longcat_` tags).

The templates are written here from the families' published formats, in the demo's own turns
(`template.chat_template`). A call is `<tool_call>NAME` then, per argument,
`<arg_key>KEY</arg_key>` and `<arg_value>VALUE</arg_value>`, each on a line of its own: a string
value as it is, any other as JSON. The parsers strip the space around a value, keep a value as a
string where the tool declares a string, and read any other as JSON (or a Python literal), so an
undeclared string such as "3" reads back as the number 3, as it would from the real model.
"""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family
from mlxhost.demo.families.template import chat_template

__all__ = ["FAMILIES"]


def _template(prefix: str, think: tuple[str, str]) -> str:
    """GLM's syntax with its tags' names after `prefix` ("" for GLM, "longcat_" for LongCat)."""
    call, key, value, response = (
        f"{prefix}{tag}" for tag in ("tool_call", "arg_key", "arg_value", "tool_response")
    )
    return chat_template(
        tools=(
            "# Tools\n\nYou may call one or more of these functions:\n<tools>\n"
            "{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}"
            "</tools>\n\nFor each call, reply with the function's name and its arguments:\n"
            f"<{call}>NAME\n<{key}>KEY</{key}>\n<{value}>VALUE</{value}>\n</{call}>\n"
            "with a key and a value for each argument; a value that is not a string is written as JSON."
        ),
        call=(
            f"<{call}>{{{{ call.name }}}}\n"
            "{% if call.arguments is mapping %}"
            "{% for k, v in call.arguments | items %}"
            f"<{key}>{{{{ k }}}}</{key}>\n<{value}>{{{{ value(v) }}}}</{value}>\n"
            "{% endfor %}"
            "{% elif call.arguments %}{{ call.arguments }}\n{% endif %}"
            f"</{call}>"
        ),
        think=think,
        result=f"<{response}>\n{{{{ text(message['content']) }}}}\n</{response}>",
    )


def _tokens(prefix: str, think: tuple[str, str]) -> tuple[str, ...]:
    # GLM's checkpoints hold each tag as one token. LongCat's call and think tags are its own; its
    # tool listing and result tags here follow GLM's shape (no published template was at hand).
    tags = ("tool_call", "arg_key", "arg_value", "tool_response")
    return (*(t for tag in tags for t in (f"<{prefix}{tag}>", f"</{prefix}{tag}>")), *think)


THINK: Final = ("<think>", "</think>")
# LongCat's think block has its own tags, which mlx-lm knows.
LONGCAT_THINK: Final = ("<longcat_think>", "</longcat_think>")

GLM47: Final = _template("", THINK)
LONGCAT: Final = _template("longcat_", LONGCAT_THINK)

FAMILIES: Final = {
    "glm47": Family("glm47", GLM47, special_tokens=_tokens("", THINK), think=THINK),
    # Laguna's template is GLM's (so the template alone would give glm47); its checkpoints name
    # their parser in tokenizer_config, which is the only way mlx-lm picks "laguna".
    "laguna": Family(
        "laguna",
        GLM47,
        special_tokens=_tokens("", THINK),
        think=THINK,
        tokenizer_config={"tool_parser_type": "laguna"},
    ),
    "longcat": Family(
        "longcat", LONGCAT, special_tokens=_tokens("longcat_", LONGCAT_THINK), think=LONGCAT_THINK
    ),
}
