"""Reusing the KV state of earlier requests, so a shared prefix is not prefilled again.

A chat's next turn repeats the whole conversation so far; an agent sends the same long system
prompt with every call. When a generation ends, its KV cache (prompt and reply) is kept, keyed by
its tokens; a later prompt that shares a prefix with one starts from it (a copy that shares
its memory, cache/sharing.py) and prefills only the rest. mlx-lm's `LRUPromptCache` (the one
mlx_lm.server uses) does the keeping: a token trie, least recently used first out, bounded by
entries and bytes.

Entries are kept apart by namespace (the caller's scope and its `cache_salt`): a request starts
only from entries of its own namespace, so `cached_tokens` never tells one caller anything about
another's prompts. The namespace is the key LRUPromptCache files its trie under.

Caches that cannot be trimmed (a sliding window's RotatingKVCache once full, a hybrid model's
ArraysCache) serve only prompts that extend their tokens; for them the generation thread also
keeps a snapshot at the end of each prompt (engine/cache_keeping.py), which the next turn of a
chat extends even when the chat template rewrote the reply.

Behind the memory tier is an optional disk tier (cache/disk.py, `disk`): whatever is kept here
is also written there, and a prompt the disk can start much further along is loaded from it
first (engine/intake.py hands it to the store's loader thread).

A cache that holds NaN or infinite values is never kept: whatever starts from it answers padding
(its logits are NaN), so such a cache, and the entries on its tokens' path it may have started
from, are dropped from memory and disk (`keep`).

Runs in the generation thread only: the states are MLX arrays of that thread's stream.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, trim_prompt_cache

from mlxhost.worker.cache.disk import PromptStore, StoreStatistics
from mlxhost.worker.cache.disk_index import path_keys
from mlxhost.worker.cache.files import NonFinite, cache_arrays, check_finite
from mlxhost.worker.cache.sharing import shared_copy
from mlxhost.worker.cache.trie import search

__all__ = ["Namespace", "PromptCache", "PromptCacheStatistics"]

Namespace = tuple[str, str]  # (the caller's cache scope, its cache_salt); ("", ""): shared

logger = logging.getLogger("mlxhost.engine")


@dataclass(frozen=True)
class PromptCacheStatistics:
    entries: int
    bytes: int
    lookups: int
    hits: int
    cached_tokens: int  # prompt tokens not prefilled, over all requests (from disk too)
    disk: bool  # the disk tier is on (and this worker owns the model's folder)
    disk_entries: int
    disk_bytes: int
    disk_hits: int  # loads from disk used
    disk_cached_tokens: int  # prompt tokens loaded from disk rather than prefilled
    disk_writes: int
    disk_dropped_writes: int
    disk_removed_files: int  # unreadable or foreign files removed


class PromptCache:
    def __init__(self, entries: int, max_bytes: int) -> None:
        self.enabled = entries > 0 and max_bytes > 0
        self._lru = LRUPromptCache(max_size=max(entries, 1), max_bytes=max_bytes)
        self._lookups = 0
        self._hits = 0
        self._cached_tokens = 0
        self.disk: PromptStore | None = None  # set by the engine once the model is loaded

    def usable(self, prompt: list[int], namespace: Namespace = ("", "")) -> int:
        """How many of `prompt`'s tokens `take` would start from, without copying anything."""
        if not self.enabled:
            return 0
        trie = self._lru._trie
        found = search(trie, namespace, prompt)
        if found.exact is not None:
            exact = trie.get(namespace, found.exact).prompt_cache
            return len(prompt) - 1 if can_trim_prompt_cache(exact) else 0
        shorter = len(found.shorter) if found.shorter is not None else 0
        longer = found.longer if found.common_prefix > shorter else None
        if longer is not None and can_trim_prompt_cache(trie.get(namespace, longer).prompt_cache):
            return min(len(prompt) - 1, found.common_prefix)
        return shorter

    def adopt(self, tokens: list[int], cache: list[Any], namespace: Namespace = ("", "")) -> None:
        """Keep a cache loaded from the disk tier, in memory only (it is on disk already)."""
        if self.enabled and tokens:
            self._lru.insert_cache(namespace, list(tokens), cache)
            self._drop_empty_namespaces()

    def take(self, prompt: list[int], namespace: Namespace = ("", "")) -> tuple[list[Any] | None, list[int]]:
        """A KV cache to start `prompt` from (None: from scratch) and the tokens left to prefill.

        At least one token is always left: its logits give the first generated token.
        """
        if not self.enabled:
            return None, prompt
        self._lookups += 1
        cache, rest = self._nearest(prompt, namespace)
        if cache is None:
            return None, prompt
        if not rest:  # an exact hit: step back one token to compute from
            if not can_trim_prompt_cache(cache):
                return None, prompt
            trim_prompt_cache(cache, 1)
            rest = prompt[-1:]
        self._hits += 1
        self._cached_tokens += len(prompt) - len(rest)
        return cache, list(rest)

    def _nearest(self, prompt: list[int], namespace: Namespace) -> tuple[list[Any] | None, list[int]]:
        # LRUPromptCache.fetch_nearest_cache's choice of entry, with `shared_copy` for its
        # `copy.deepcopy`: a hit hands the row the entry's memory, not a copy of every byte.
        trie = self._lru._trie
        found = search(trie, namespace, prompt)
        if found.exact is not None:
            return shared_copy(trie.get(namespace, found.exact).prompt_cache), []
        shorter = len(found.shorter) if found.shorter is not None else 0
        if found.longer is not None and found.common_prefix > shorter:
            entry = trie.get(namespace, found.longer).prompt_cache
            if can_trim_prompt_cache(entry):
                cache = shared_copy(entry)
                prefix = min(len(prompt) - 1, found.common_prefix)
                trim_prompt_cache(cache, len(found.longer) - prefix)
                return cache, prompt[prefix:]
        if shorter > 0:
            return shared_copy(trie.get(namespace, found.shorter).prompt_cache), prompt[shorter:]
        return None, prompt

    def keep(self, tokens: list[int], cache: list[Any], namespace: Namespace = ("", "")) -> None:
        """Keep a KV cache (of a generation, or of a prompt's end) whose KV holds exactly `tokens`.

        One that holds NaN or infinite values is not kept, and the entries it may have started
        from (those on its tokens' path) are dropped, in memory and on disk.
        """
        if self.enabled and tokens:
            try:
                check_finite(cache_arrays(cache))  # one reduction over arrays the step evaluated
            except NonFinite:
                in_memory = self._drop_path(namespace, list(tokens))
                on_disk = self.disk.drop_path(namespace, list(tokens)) if self.disk is not None else 0
                logger.warning(
                    "prompt cache: a KV cache of %d tokens holds NaN or infinite values: not kept; "
                    "dropped the entries it may have started from: %d in memory, %d on disk",
                    len(tokens),
                    in_memory,
                    on_disk,
                )
                return
            self._lru.insert_cache(namespace, list(tokens), cache)
            self._drop_empty_namespaces()
            if self.disk is not None:
                self.disk.spill(tokens, cache, namespace)

    def _drop_path(self, namespace: Namespace, tokens: list[int]) -> int:
        lru = self._lru
        keys = path_keys(lru._trie, namespace, tokens)
        for key in keys:
            entry = lru._trie.pop(namespace, key)
            lru._n_bytes -= entry.nbytes
            lru._n_bytes_by_type[entry.cache_type] -= entry.nbytes
            lru._lru.remove(namespace, key)
        self._drop_empty_namespaces()
        return len(keys)

    def _drop_empty_namespaces(self) -> None:
        # LRUPromptCache keeps a namespace's trie root after its last entry is evicted: without
        # this, every cache_salt a client ever sent would stay in memory. Roots number at most
        # one more than the entries, so the sweep is short.
        roots: dict[Any, dict[Any, Any]] | None = getattr(getattr(self._lru, "_trie", None), "_trie", None)
        if roots is not None:
            for namespace in [n for n, node in roots.items() if not node]:
                del roots[namespace]

    def statistics(self) -> PromptCacheStatistics:
        disk = self.disk.statistics() if self.disk is not None else StoreStatistics(0, 0, 0, 0, 0, 0, 0)
        return PromptCacheStatistics(
            entries=len(self._lru),
            bytes=self._lru.nbytes,
            lookups=self._lookups,
            hits=self._hits,
            cached_tokens=self._cached_tokens,
            disk=self.disk is not None and self.disk.ready,
            disk_entries=disk.entries,
            disk_bytes=disk.bytes,
            disk_hits=disk.hits,
            disk_cached_tokens=disk.cached_tokens,
            disk_writes=disk.writes,
            disk_dropped_writes=disk.dropped_writes,
            disk_removed_files=disk.removed_files,
        )
