"""The disk tier's index of one model's folder: which entries its files hold, found by namespace and
tokens (a compact trie, cache/radix.py: the memory tier's answers at a few bytes a token), least
recently used first, with their bytes and last uses; and whether an entry it finds for a prompt is
worth reading (`worth_loading`).

It is rebuilt at start from the files' headers alone (`scan`): no tensor is read until one is
used. Apart from that scan, which removes the files it cannot index, it never touches a file, and
it takes no lock: the store (cache/disk.py) holds its own around every call, since its generation,
writer and loader threads all use the index.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from mlx_lm.models.cache import PromptTrie

from mlxhost.worker.cache.files import SUFFIX, Entry, is_leftover, read_header
from mlxhost.worker.cache.radix import RadixTrie
from mlxhost.worker.cache.trie import search

__all__ = ["DiskIndex", "path_keys", "worth_loading"]

logger = logging.getLogger("mlxhost.engine")

# A load must save at least this many prompt tokens, and this share of what it reads (see
# `worth_loading`).
LOAD_MIN_TOKENS = 2
LOAD_MIN_SHARE = 4


def worth_loading(covered: int, in_memory: int) -> bool:
    """Whether to load an entry that starts a prompt `covered` tokens in, where memory has `in_memory`.

    Reading a cache costs its bytes, in proportion to all it covers; it saves the prefill of what
    memory lacks. Reading runs at disk speed, a prefill at the model's, many times slower per
    token (a 16-token prefill of the 32M-parameter bench model took 0.5 s on a CPU; its file
    read in milliseconds), so any real saving is worth it, except a few tokens on top of a long
    prefix that memory already has.
    """
    saved = covered - in_memory
    return saved >= LOAD_MIN_TOKENS and saved * LOAD_MIN_SHARE >= covered


def path_keys(trie: PromptTrie, namespace: Any, tokens: list[int]) -> list[list[int]]:
    """The keys of `trie` that a prompt starting with `tokens` may have started from.

    Every entry that is a prefix of `tokens` (or `tokens` itself), found in one walk down the
    trie, and the nearest longer one that shares more of them (the entry `take` trims back).
    Both tiers' tries: the memory tier's too.
    """
    keys = []
    node = trie._trie.get(namespace)
    for i, token in enumerate(tokens):
        node = None if node is None else node.get(token)
        if node is None:
            break
        if "__value__" in node:
            keys.append(tokens[: i + 1])
    found = search(trie, namespace, tokens)
    if found.longer is not None and found.common_prefix > (len(keys[-1]) if keys else 0):
        keys.append(list(found.longer))
    return keys


class DiskIndex:
    """The entries of one folder, by namespace digest and tokens, least recently used first."""

    def __init__(self) -> None:
        self._trie = RadixTrie()
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # by name, least recently used first
        self._used: dict[str, int] = {}  # an entry's last use (ns since the epoch), as its file's mtime
        self.bytes = 0  # of every entry's file

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, prompt: list[int], key: str) -> tuple[Entry | None, int]:
        """The entry under `key` that gives `prompt` the longest start, and how many tokens it covers.

        As mlx-lm's LRUPromptCache: an entry that is a prefix of the prompt, or a longer one
        (the same prompt, a longer conversation) trimmed back to the common prefix if its cache
        can be trimmed. At least one prompt token is always left to compute.
        """
        found = self._trie.search(key, prompt)
        best: tuple[Entry | None, int] = (None, 0)
        if found.exact is not None:
            entry = self._trie.get(key, found.exact)
            if entry.trimmable:
                best = (entry, len(prompt) - 1)
        if found.shorter is not None:
            best = max(best, (self._trie.get(key, found.shorter), len(found.shorter)), key=lambda b: b[1])
        if found.longer is not None:
            entry = self._trie.get(key, found.longer)
            if entry.trimmable:
                covered = min(len(prompt) - 1, found.common_prefix)
                best = max(best, (entry, covered), key=lambda b: b[1])
        return best

    def on_path(self, key: str, tokens: list[int]) -> list[Entry]:
        """The entries a prompt starting with `tokens` may have started from (see `path_keys`)."""
        return [self._trie.get(key, k) for k in self._trie.path_keys(key, tokens)]

    def touch(self, name: str) -> bool:
        """Mark the entry named `name` used now, if there is one."""
        if name not in self._entries:
            return False
        self._entries.move_to_end(name)
        self._used[name] = time.time_ns()
        return True

    def by_last_use(self) -> list[tuple[int, int, Entry]]:
        """(last use, size, entry) of every entry, oldest use first: the order of eviction."""
        own = [(self._used.get(e.name, 0), e.size, e) for e in self._entries.values()]
        return sorted(own, key=lambda c: c[0])

    def add(self, entry: Entry, used: int) -> None:
        """Index `entry`, last used at `used` (ns since the epoch)."""
        # The same tokens in the same namespace have the same file name: an entry written again
        # replaced its file.
        previous = self._trie.add(entry.namespace, list(entry.tokens), entry)
        if previous is not None and previous.name in self._entries:
            self.bytes -= self._entries.pop(previous.name).size
        self._entries[entry.name] = entry
        self.bytes += entry.size
        self._used[entry.name] = used

    def pop_prefixes(self, key: str, tokens: tuple[int, ...]) -> list[Entry]:
        """Drop the entries under `key` whose tokens are a prefix of `tokens`, and return them."""
        gone = []
        for _, prefix in self._trie.pop_prefixes(key, list(tokens)):
            self.drop(prefix, in_trie=False)
            gone.append(prefix)
        return gone

    def drop(self, entry: Entry, in_trie: bool = True) -> None:
        if entry.name not in self._entries:
            return
        del self._entries[entry.name]
        self._used.pop(entry.name, None)
        self.bytes -= entry.size
        if in_trie:
            with contextlib.suppress(KeyError):
                self._trie.pop(entry.namespace, list(entry.tokens))
        self._trie.drop_empty(entry.namespace)  # no trie root left behind per namespace ever seen

    def scan(self, folder: Path) -> int:
        """Index `folder`'s files from their headers; remove leftovers and foreign files.

        Returns how many unreadable or foreign files were removed.
        """
        found = []
        removed = 0
        for path in folder.iterdir():
            if is_leftover(path):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            if path.name.startswith(".") or not path.name.endswith(SUFFIX):
                continue
            try:
                info = path.lstat()  # a FIFO or a link is not followed: read_header refuses it
                entry = read_header(path, info.st_size)
            except Exception as exc:  # noqa: BLE001 - an unreadable file is removed, never fatal
                logger.warning("prompt cache: removing %s: %s: %s", path.name, type(exc).__name__, exc)
                with contextlib.suppress(OSError):
                    path.unlink()
                removed += 1
                continue
            found.append((info.st_mtime_ns, entry))
        for used, entry in sorted(found, key=lambda f: f[0]):
            self.add(entry, used)
        return removed
