"""The prompt cache's disk tier on its own, with real KV caches of the tiny model."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from mlxhost.testing import wait_until
from mlxhost.worker.cache.disk import PromptStore
from mlxhost.worker.cache.disk_index import worth_loading
from mlxhost.worker.cache.files import Signature, cache_signature, namespace_digest
from tests.unit.tiny_kv import kv, model_fixture  # noqa: F401 - the `model` fixture

TOKENS = list(range(5, 45))


@pytest.fixture(scope="module")
def signature(model: Any) -> Signature:
    return cache_signature(kv(model, [1]))


@pytest.fixture
def open_store(tmp_path: Path, signature: Signature) -> Iterator[Any]:
    stores: list[PromptStore] = []

    def opened(max_bytes: int = 1 << 30, folder: Path | None = None) -> PromptStore:
        for store in stores:
            store.close()  # one owner at a time
        stores.clear()
        stores.append(PromptStore(folder or tmp_path / "store", max_bytes, signature))
        return stores[0]

    yield opened
    for store in stores:
        store.close()


def files(store: PromptStore) -> list[Path]:
    return sorted(p for p in store.folder.iterdir() if p.suffix == ".safetensors")


def test_an_entry_is_written_indexed_and_read_back_by_a_new_store(model: Any, open_store: Any) -> None:
    store = open_store()
    cache = kv(model, TOKENS)
    store.write(tuple(TOKENS), cache, namespace_digest(("", "")))
    entry, covered = store.find([*TOKENS, 7, 8], ("", ""))
    assert entry is not None and covered == len(TOKENS)
    # A new owner rebuilds the index from the files' headers alone.
    again = open_store()
    assert again.statistics().entries == 1
    entry, covered = again.find([*TOKENS[:30], 99], ("", ""))  # shorter: the entry, trimmed
    assert entry is not None and covered == 30
    loaded = again.read(entry)
    assert loaded is not None and loaded[0].offset == len(TOKENS)
    assert mx.array_equal(loaded[0].keys[..., : len(TOKENS), :], cache[0].keys[..., : len(TOKENS), :])
    assert again.find(TOKENS, ("", ""))[1] == len(TOKENS) - 1  # an exact hit leaves a token to compute


def test_a_namespace_never_matches_another_and_is_stored_only_as_a_digest(
    model: Any, open_store: Any
) -> None:
    store = open_store()
    alice = ("scope-alice", "salt-secret")
    store.write(tuple(TOKENS), kv(model, TOKENS), namespace_digest(alice))
    assert store.find(TOKENS, alice)[0] is not None
    assert store.find(TOKENS, ("scope-alice", "other")) == (None, 0)
    assert store.find(TOKENS, ("", "")) == (None, 0)
    (path,) = files(store)
    assert b"salt-secret" not in path.read_bytes() and "salt-secret" not in path.name


def test_the_disk_bound_evicts_the_least_recently_used(model: Any, open_store: Any) -> None:
    probe = open_store()
    probe.write(tuple(TOKENS), kv(model, TOKENS), namespace_digest(("", "")))
    one = files(probe)[0].stat().st_size
    shutil.rmtree(probe.folder)
    store = open_store(max_bytes=int(one * 2.5), folder=probe.folder.parent / "bounded")
    prompts = [[n, *TOKENS[1:]] for n in (1, 2, 3)]
    store.write(tuple(prompts[0]), kv(model, prompts[0]), namespace_digest(("", "")))
    store.write(tuple(prompts[1]), kv(model, prompts[1]), namespace_digest(("", "")))
    first, _ = store.find(prompts[0], ("", ""))
    assert first is not None and store.read(first) is not None  # a use: now the most recent
    store.write(tuple(prompts[2]), kv(model, prompts[2]), namespace_digest(("", "")))
    files_size = sum(p.stat().st_size for p in files(store))
    assert store.statistics().entries == 2 and files_size == store.statistics().bytes <= store.max_bytes
    assert store.find(prompts[1], ("", ""))[0] is None
    assert store.find(prompts[0], ("", ""))[0] is not None and store.find(prompts[2], ("", ""))[0] is not None


def test_bad_files_are_ignored_and_removed(model: Any, open_store: Any) -> None:
    store = open_store()
    namespace = namespace_digest(("", ""))
    store.write(tuple(TOKENS), kv(model, TOKENS), namespace)
    # A foreign cache (other shapes) that otherwise looks like ours.
    foreign = KVCache()
    foreign.update_and_fetch(mx.zeros((1, 3, 8, 5)), mx.zeros((1, 3, 8, 5)))
    other = list(range(100, 108))
    store.write(tuple(other), [foreign, foreign], namespace)
    entry, _ = store.find(other, ("", ""))
    assert entry is not None and store.read(entry) is None
    assert store.statistics().removed_files == 1 and len(files(store)) == 1
    (good,) = files(store)
    (store.folder / f"{namespace}-garbage.safetensors").write_bytes(b"garbage, not even a header")
    (store.folder / f"{namespace}-cut.safetensors").write_bytes(good.read_bytes()[:-100])
    again = open_store()  # its scan removes both
    assert again.statistics().removed_files == 2 and files(again) == [good]
    good.write_bytes(good.read_bytes()[: good.stat().st_size // 2])  # cut short after the scan
    entry, _ = again.find(TOKENS, ("", ""))
    assert entry is not None and again.read(entry) is None
    assert again.statistics().entries == 0 and files(again) == []


def test_a_cache_already_on_disk_is_not_written_again(model: Any, open_store: Any) -> None:
    # A repeated prompt with a greedy reply ends in the same tokens: one file, one write.
    store = open_store()
    wait_until(lambda: store.ready)
    store.spill(TOKENS, kv(model, TOKENS), ("", ""))
    wait_until(lambda: store.statistics().writes == 1)
    store.spill(TOKENS, kv(model, TOKENS), ("", ""))
    store.spill([*TOKENS, 3], kv(model, [*TOKENS, 3]), ("", ""))  # a different one still is
    wait_until(lambda: store.statistics().writes == 2)
    store.close()
    assert store.statistics().writes == 2 and len(files(store)) == 1  # the longer one covers the first


def test_a_load_must_save_real_prefill() -> None:
    assert worth_loading(20, 0)  # a short prompt after a restart: all of it
    assert worth_loading(2000, 1000)
    assert not worth_loading(1, 0)  # the last prompt token is computed anyway
    assert not worth_loading(1004, 1000)  # four tokens on top of what memory has: not worth the read
