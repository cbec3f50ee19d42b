"""The prompt-cache directory as a whole: one bound across models' folders, folders of models that
are gone, a full filesystem. Real stores, real KV caches of the tiny model, real files."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from mlxhost.testing import wait_until
from mlxhost.worker.cache import disk as prompt_store
from mlxhost.worker.cache.disk import PromptStore
from mlxhost.worker.cache.files import NonFinite, Signature, cache_signature, namespace_digest
from mlxhost.worker.cache.folder import make_folder, model_fingerprint
from tests.filesystems import fill, small_tmpfs
from tests.unit.tiny_kv import kv, model_fixture  # noqa: F401 - the `model` fixture

SHARED = namespace_digest(("", ""))


def prompt(n: int) -> list[int]:
    return [n, *range(5, 44)]


@pytest.fixture(scope="module")
def signature(model: Any) -> Signature:
    return cache_signature(kv(model, [1]))


@pytest.fixture
def stores() -> Iterator[list[PromptStore]]:
    opened: list[PromptStore] = []
    yield opened
    for store in opened:
        store.close()


def folder_of(root: Path, name: str, model_path: Path) -> Path:
    folder = root / name
    make_folder(folder, model_path, None, model_fingerprint(model_path))
    return folder


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("."))


def one_file(model: Any, signature: Signature, tmp_path: Path) -> int:
    probe = PromptStore(tmp_path / "probe" / "probe", 1 << 30, signature)
    try:
        entry = probe.write(tuple(prompt(0)), kv(model, prompt(0)), SHARED)
        assert entry is not None
        return entry.size
    finally:
        probe.close()
        shutil.rmtree(tmp_path / "probe")


def test_one_bound_holds_for_every_model_folder_with_one_lru_across_them(
    model: Any, signature: Signature, tiny_model: Path, tmp_path: Path, stores: list[PromptStore]
) -> None:
    bound = int(one_file(model, signature, tmp_path) * 2.5)
    root = tmp_path / "prompt-cache"
    a, b = folder_of(root, "a", tiny_model), folder_of(root, "b", tiny_model)
    first = PromptStore(a, bound, signature)
    first.write(tuple(prompt(1)), kv(model, prompt(1)), SHARED)
    first.write(tuple(prompt(2)), kv(model, prompt(2)), SHARED)
    first.close()  # a's worker is gone (a model no longer served): its files are anybody's to evict
    second = PromptStore(b, bound, signature)
    stores.append(second)
    second.write(tuple(prompt(3)), kv(model, prompt(3)), SHARED)
    assert (len(files(a)), len(files(b))) == (1, 1)  # the least recently used of all went: one of a's
    assert sum(p.stat().st_size for p in files(a) + files(b)) <= bound

    third = PromptStore(a, bound, signature)  # a is served again, by a worker of its own
    stores.append(third)
    wait_until(lambda: third.ready)
    # Which of a's two files is left depends on their mtimes, which the kernel's coarse clock may
    # make equal: look for either (a longer prompt starts from it).
    found = [third.find([*prompt(n), 1], ("", ""))[0] for n in (1, 2)]
    kept = next(e for e in found if e is not None)
    second.write(tuple(prompt(4)), kv(model, prompt(4)), SHARED)
    # The oldest of all went, though another worker owns it: a model that filled the bound first
    # does not keep the others' caches off the disk.
    assert files(a) == [] and len(files(b)) == 2
    assert sum(p.stat().st_size for p in files(a) + files(b)) <= bound
    assert third.read(kept) is None  # its owner takes it as evicted: the request prefills


def test_folders_of_models_that_are_gone_are_removed_when_a_worker_starts(
    model: Any, signature: Signature, tiny_model: Path, tmp_path: Path, stores: list[PromptStore]
) -> None:
    root = tmp_path / "prompt-cache"
    fine_tune = shutil.copytree(tiny_model, tmp_path / "job-1-fused")
    pruned = folder_of(root, "job-1-fused-0123", fine_tune)
    old = PromptStore(pruned, 1 << 30, signature)
    old.write(tuple(prompt(1)), kv(model, prompt(1)), SHARED)
    old.close()
    shutil.rmtree(fine_tune)  # the job was pruned
    legacy = root / "tiny-from-an-older-format"  # no record of its model: never matched again
    legacy.mkdir()
    (legacy / "x.safetensors").write_bytes(b"\0" * 1000)
    served = folder_of(root, "served", tiny_model)
    kept = folder_of(root, "kept", tiny_model)  # its model is there: only the bound may empty it

    stores.append(PromptStore(served, 1 << 30, signature))
    wait_until(lambda: not pruned.exists() and not legacy.exists())
    assert kept.is_dir() and served.is_dir()


def test_a_cache_with_nan_is_never_written(model: Any, signature: Signature, tmp_path: Path) -> None:
    store = PromptStore(tmp_path / "prompt-cache" / "a", 1 << 30, signature)
    try:
        cache = kv(model, prompt(1))
        cache[0].keys = cache[0].keys * mx.array(float("nan"), dtype=cache[0].keys.dtype)
        with pytest.raises(NonFinite):
            store.write(tuple(prompt(1)), cache, SHARED)
        assert list(store.folder.glob("*.safetensors")) == [] and list(store.folder.glob(".*.tmp*")) == []
    finally:
        store.close()


def test_a_write_the_filesystem_refuses_is_logged_once_and_leaves_no_file(
    model: Any,
    signature: Signature,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Past the floor on purpose (no floor at all): the write itself meets ENOSPC, as when another
    # process takes the space between the check and the write.
    monkeypatch.setattr(prompt_store, "free_floor", lambda total: -(1 << 40))
    with small_tmpfs(tmp_path / "disk", 1 << 10) as disk:
        store = PromptStore(disk / "prompt-cache" / "a", 1 << 30, signature)
        try:
            wait_until(lambda: store.ready)
            filler = fill(disk, leave_bytes=8 << 10)
            with caplog.at_level(logging.WARNING, logger="mlxhost.engine"):
                for n in (1, 2):
                    store.spill(prompt(n), kv(model, prompt(n)), ("", ""))
                    wait_until(lambda n=n: store.statistics().dropped_writes == n)  # type: ignore[misc]
            refused = [r for r in caplog.records if "could not write" in r.getMessage()]
            assert len(refused) == 1  # MLX says "[write] Unable to write N bytes to file"; once is enough
            assert [p.name for p in store.folder.iterdir() if "safetensors" in p.name] == []
            filler.unlink()  # room again: the store goes on writing
            store.spill(prompt(3), kv(model, prompt(3)), ("", ""))
            wait_until(lambda: store.statistics().writes == 1)
            assert len(files(store.folder)) == 1
        finally:
            store.close()
