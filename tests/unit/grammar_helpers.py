"""What the grammar tests share: the tiny model loaded once per test module (the `loaded` fixture),
its grammar compiler (the `grammars` fixture), `compile_`, and the WEATHER tool's parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mlx_lm
import pytest

from mlxhost.worker.engine.grammar import GrammarSpec
from mlxhost.worker.engine.grammar_compiler import Grammars
from mlxhost.worker.engine.grammar_mask import Grammar

__all__ = ["WEATHER", "compile_", "grammars_fixture", "loaded_fixture"]

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "maxLength": 16},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["location", "unit", "days"],
    "additionalProperties": False,
}


# Named apart from their fixtures, so that the tests' `loaded` and `grammars` arguments shadow no import.
@pytest.fixture(scope="module", name="loaded")
def loaded_fixture(tiny_model: Path) -> tuple[Any, Any]:
    model, tokenizer = mlx_lm.load(str(tiny_model))[:2]
    return model, tokenizer


@pytest.fixture(scope="module", name="grammars")
def grammars_fixture(loaded: tuple[Any, Any]) -> Grammars:
    model, tokenizer = loaded
    return Grammars(tokenizer, model.args.vocab_size)


def compile_(grammars: Grammars, spec: GrammarSpec) -> Grammar:
    return anyio.run(grammars.compile, spec)
