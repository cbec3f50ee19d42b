"""The demo model as it always was: Hermes/Qwen JSON calls between `<tool_call>` tags."""

from __future__ import annotations

from typing import Final

from mlxhost.demo.families import Family
from mlxhost.demo.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, THINK_END, THINK_START

__all__ = ["FAMILIES"]

FAMILIES: Final = {
    "json_tools": Family(
        "json_tools",
        CHAT_TEMPLATE,
        special_tokens=SPECIAL_TOKENS[7:],  # <tool_call> </tool_call> <think> </think>
        think=(THINK_START, THINK_END),
    )
}
