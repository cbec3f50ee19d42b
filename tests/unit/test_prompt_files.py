"""What a prompt-cache file is: its model's folder, and the signature a worker keeps there."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import mlx.core as mx
import mlx_lm
from mlx_lm.models.cache import make_prompt_cache

from mlxhost.worker.cache.files import cache_signature
from mlxhost.worker.cache.folder import keep_signature, kept_signature, model_fingerprint, store_folder


def test_another_model_or_a_changed_file_never_matches(tiny_model: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(tiny_model, tmp_path / "tiny")
    before = store_folder(tmp_path, copy, model_fingerprint(copy))
    os.utime(copy / "config.json", ns=(1, 1))
    assert store_folder(tmp_path, copy, model_fingerprint(copy)) != before
    assert model_fingerprint(copy, adapter_path=tmp_path / "tiny") != model_fingerprint(copy)


def test_the_signature_is_kept_for_the_next_worker_and_only_for_these_versions(
    tiny_model: Path, tmp_path: Path
) -> None:
    model = mlx_lm.load(str(tiny_model))[0]
    cache = make_prompt_cache(model)
    model(mx.array([[1]]), cache=cache)
    signature = cache_signature(cache)
    assert kept_signature(tmp_path) is None  # none kept: the worker computes it
    keep_signature(tmp_path, signature)
    assert kept_signature(tmp_path) == signature
    kept = tmp_path / ".signature.json"
    kept.write_text(kept.read_text().replace(mx.__version__, "0.0.1"))
    assert kept_signature(tmp_path) is None  # another MLX may lay caches out otherwise
    kept.write_text("{not json")
    assert kept_signature(tmp_path) is None
