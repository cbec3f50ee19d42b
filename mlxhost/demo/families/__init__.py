"""The demo model's variants, one per model family whose tool calls mlx-lm reads.

A variant is the same tiny model (same weights for a size and seed) with the family's chat
template and special tokens, written here from the families' published formats, so that mlx-lm
infers the family's tool parser and thinking markers from it exactly as it would for the real
model. The default family, "json_tools", is the demo model as it always was (Hermes/Qwen JSON
calls, `<think>` tags).

One module per syntax; `family(name)` finds one by the name of mlx-lm's tool parser it yields.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["FAMILIES", "Family", "family"]


@dataclass(frozen=True)
class Family:
    """How one family's checkpoints present themselves to mlx-lm."""

    name: str  # the mlx-lm tool parser (mlx_lm/tool_parsers/<name>.py) a model of it must get
    chat_template: str
    # Added to the demo tokenizer's special tokens, after them (so the demo's own ids never move):
    # the family's markers that real checkpoints have as single tokens.
    special_tokens: tuple[str, ...] = ()
    # The think block's markers mlx-lm must infer from the vocabulary (None: no thinking).
    think: tuple[str, str] | None = None
    # Keys added to tokenizer_config.json (Laguna's checkpoints name their parser there).
    tokenizer_config: Mapping[str, Any] = field(default_factory=dict)


# The module in this package of each family (families that share a syntax share a module).
FAMILIES: Final[dict[str, str]] = {
    "json_tools": "json_tools",
    "qwen3_coder": "xml_parameters",
    "minimax_m2": "xml_parameters",
    "minicpm5": "xml_parameters",
    "muse_spark": "xml_parameters",
    "glm47": "arg_keys",
    "laguna": "arg_keys",
    "longcat": "arg_keys",
    "kimi_k3": "kimi",
    "kimi_k2": "kimi",
    "mistral": "others",
    "pythonic": "others",
    "gemma4": "gemma",
    "function_gemma": "gemma",
}


def family(name: str) -> Family:
    """The family whose tool parser is `name`; KeyError for one with no variant."""
    module = importlib.import_module(f"{__name__}.{FAMILIES[name]}")
    found: dict[str, Family] = module.FAMILIES
    return found[name]
