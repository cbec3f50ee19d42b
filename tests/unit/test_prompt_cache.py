"""The memory tier's refusal of a cache with NaN in it, with real KV caches of the tiny model."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlxhost.testing import wait_until
from mlxhost.worker.cache.disk import PromptStore
from mlxhost.worker.cache.files import cache_signature
from mlxhost.worker.cache.memory import PromptCache
from tests.unit.tiny_kv import kv, model_fixture  # noqa: F401 - the `model` fixture


def test_a_cache_that_holds_nan_is_not_kept_and_what_it_started_from_is_dropped(
    model: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix, unrelated = list(range(5, 30)), list(range(60, 85))
    memory = PromptCache(10, 1 << 30)
    memory.disk = store = PromptStore(tmp_path / "a", 1 << 30, cache_signature(kv(model, [1])))
    try:
        wait_until(lambda: store.ready)
        memory.keep(prefix, kv(model, prefix))
        memory.keep(unrelated, kv(model, unrelated))
        wait_until(lambda: store.statistics().writes == 2)
        # The generation that started from `prefix` came out with NaN in its KV (so in its logits).
        poisoned = kv(model, [*prefix, 7, 8])
        poisoned[0].keys = poisoned[0].keys * mx.array(float("nan"), dtype=poisoned[0].keys.dtype)
        with caplog.at_level(logging.WARNING, logger="mlxhost.engine"):
            memory.keep([*prefix, 7, 8], poisoned)
        assert memory.usable([*prefix, 7, 8, 9]) == 0 and store.find([*prefix, 7, 8, 9], ("", ""))[0] is None
        assert memory.statistics().entries == 1 and memory.usable([*unrelated, 9]) == len(unrelated)
        assert len(list(store.folder.glob("*.safetensors"))) == 1  # the unrelated entry's file only
        assert (
            "holds NaN or infinite values: not kept; "
            "dropped the entries it may have started from: 1 in memory, 1 on disk"
        ) in caplog.text
    finally:
        store.close()
    assert store.statistics().writes == 2  # the poisoned cache was never written
