"""The tiny model's KV caches, for the prompt-cache tests: the model itself (the `model` fixture,
loaded once per test module that imports `model_fixture`) and `kv`, the evaluated cache of a
prompt run through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.models.cache import make_prompt_cache

__all__ = ["kv", "model_fixture"]


# Named apart from its fixture, so that the tests' `model` arguments shadow no import.
@pytest.fixture(scope="module", name="model")
def model_fixture(tiny_model: Path) -> Any:
    return mlx_lm.load(str(tiny_model))[0]


def kv(model: Any, tokens: list[int]) -> list[Any]:
    cache = make_prompt_cache(model)
    model(mx.array([tokens]), cache=cache)
    mx.eval([layer.state for layer in cache])
    return cache
