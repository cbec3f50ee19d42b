"""A compact prompt trie for the disk tier's index: mlx-lm's `PromptTrie`, edges of many tokens.

mlx-lm's trie keeps a dict per token: some 230 bytes of the worker's memory for every token of
every entry. The memory tier holds ten entries and does not mind; the disk tier indexes every file
under its bound, thousands of entries of thousands of tokens, and on a small model that is a
quarter of what the files themselves hold (200 fresh 3,900-token prompts took the worker's RSS
from 113 to 389 MiB, and on). Here an edge holds a run of tokens (an int32 array: 4 bytes a
token), so an entry that shares nothing with the others costs one node and its tokens.

The answers are `PromptTrie`'s, operation for operation (a test runs both side by side): `add`,
`get`, `pop`, `pop_prefixes`, and `search` as mlx-lm's (`PromptTrieResult`); `path_keys` as the
memory tier's function of the same name.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from mlx_lm.models.cache import PromptTrieResult

__all__ = ["RadixTrie"]

_NONE = object()  # a node without a value (None is a value like any other)


class _Node:
    __slots__ = ("edges", "value")

    def __init__(self) -> None:
        self.edges: dict[int, tuple[np.ndarray, _Node]] = {}  # first token -> (its tokens, child)
        self.value: Any = _NONE


def _common(label: np.ndarray, tokens: np.ndarray, at: int) -> int:
    """How many of `label`'s tokens `tokens` repeats from `at`."""
    n = min(len(label), len(tokens) - at)
    if n <= 0:
        return 0
    differ = np.flatnonzero(label[:n] != tokens[at : at + n])
    return int(differ[0]) if differ.size else n


def _array(tokens: Sequence[int]) -> np.ndarray:
    return np.asarray(tokens, dtype=np.int64)


class RadixTrie:
    def __init__(self) -> None:
        self._roots: dict[Any, _Node] = {}

    def __contains__(self, model: Any) -> bool:
        return model in self._roots

    def add(self, model: Any, tokens: Sequence[int], value: Any) -> Any:
        """Keep `value` under `tokens`; the value it replaced, or None."""
        node = self._roots.setdefault(model, _Node())
        query = _array(tokens)
        at = 0
        while at < len(query):
            first = int(query[at])
            edge = node.edges.get(first)
            if edge is None:
                child = _Node()
                node.edges[first] = (query[at:].astype(np.int32), child)
                node = child
                at = len(query)
                break
            label, child = edge
            shared = _common(label, query, at)
            if shared < len(label):  # split the edge where the tokens part
                middle = _Node()
                middle.edges[int(label[shared])] = (label[shared:].copy(), child)
                node.edges[first] = (label[:shared].copy(), middle)
                child = middle
            node = child
            at += shared
        previous = None if node.value is _NONE else node.value
        node.value = value
        return previous

    def get(self, model: Any, tokens: Sequence[int]) -> Any:
        path = self._walk(model, tokens)
        if path is None or path[-1][0].value is _NONE:
            raise KeyError(tuple(tokens))
        return path[-1][0].value

    def pop(self, model: Any, tokens: Sequence[int]) -> Any:
        path = self._walk(model, tokens)
        if path is None or path[-1][0].value is _NONE:
            raise KeyError(tuple(tokens))
        node = path[-1][0]
        value, node.value = node.value, _NONE
        self._tidy(model, path)
        return value

    def pop_prefixes(self, model: Any, tokens: Sequence[int]) -> list[tuple[int, Any]]:
        """Take out the values under every strict prefix of `tokens` (as `PromptTrie`: from the
        empty one up to one short of them), as (length, value) pairs, shortest first."""
        values: list[tuple[int, Any]] = []
        node = self._roots[model]
        query = _array(tokens)
        at = 0
        while True:
            if node.value is not _NONE and at < len(query):
                values.append((at, node.value))
                node.value = _NONE
            if at >= len(query):
                break
            edge = node.edges.get(int(query[at]))
            if edge is None:
                raise KeyError(tuple(tokens))
            label, child = edge
            if _common(label, query, at) < len(label):
                raise KeyError(tuple(tokens))
            node, at = child, at + len(label)
        self._compact(model)
        return values

    def search(self, model: Any, tokens: Sequence[int]) -> PromptTrieResult:
        """What `PromptTrie.search` answers: the entry equal to `tokens`, the longest one (of two
        tokens or more) that is a prefix of them, and the shortest that goes on where they leave
        the trie, with how far they follow it."""
        root = self._roots.get(model)
        if root is None:
            return PromptTrieResult(model, None, None, None, 0)
        tokens = list(tokens)
        if not tokens and root.value is not _NONE:
            return PromptTrieResult(model, [], None, None, 0)
        query = _array(tokens)
        node, at, last = root, 0, -1
        rest: list[int] = []  # what is left of an edge the walk stopped inside of
        while at < len(query):
            edge = node.edges.get(int(query[at]))
            if edge is None:
                break
            label, child = edge
            shared = _common(label, query, at)
            at += shared
            node = child
            if shared < len(label):
                rest = [int(t) for t in label[shared:]]
                break
            if node.value is not _NONE:
                last = at - 1
        if last == len(tokens) - 1 >= 0:
            return PromptTrieResult(model, tokens, None, None, 0)
        shorter = tokens[: last + 1] if last > 0 else None
        longer = tokens[:at] + rest + _shortest_below(node) if at > 0 else None
        return PromptTrieResult(model, None, shorter, longer, at)

    def path_keys(self, model: Any, tokens: Sequence[int]) -> list[list[int]]:
        """The keys a prompt starting with `tokens` may have started from: every one that is a
        prefix of them (or they themselves), in one walk down, and the nearest longer one that
        shares more of them (`cache/disk_index.py: path_keys`, for mlx-lm's trie)."""
        tokens = list(tokens)
        keys: list[list[int]] = []
        node = self._roots.get(model)
        query = _array(tokens)
        at = 0
        while node is not None and at < len(query):
            edge = node.edges.get(int(query[at]))
            if edge is None:
                break
            label, child = edge
            if _common(label, query, at) < len(label):
                break
            node, at = child, at + len(label)
            if node.value is not _NONE:
                keys.append(tokens[:at])
        found = self.search(model, tokens)
        if found.longer is not None and found.common_prefix > (len(keys[-1]) if keys else 0):
            keys.append(list(found.longer))
        return keys

    def drop_empty(self, model: Any) -> None:
        """Forget `model`'s root once nothing is kept under it."""
        root = self._roots.get(model)
        if root is not None and root.value is _NONE and not root.edges:
            del self._roots[model]

    def _walk(self, model: Any, tokens: Sequence[int]) -> list[tuple[_Node, int]] | None:
        """The nodes from the root to the one `tokens` end at exactly (each with the first token
        of the edge into it), or None when they end inside an edge or leave the trie."""
        node = self._roots.get(model)
        if node is None:
            return None
        path: list[tuple[_Node, int]] = [(node, -1)]
        query = _array(tokens)
        at = 0
        while at < len(query):
            first = int(query[at])
            edge = node.edges.get(first)
            if edge is None:
                return None
            label, child = edge
            if _common(label, query, at) < len(label):
                return None
            node, at = child, at + len(label)
            path.append((node, first))
        return path

    def _tidy(self, model: Any, path: list[tuple[_Node, int]]) -> None:
        """After a value left the last node of `path`: drop the nodes that hold nothing, and
        merge a node left with one edge and no value into its parent's edge."""
        for depth in range(len(path) - 1, 0, -1):
            node, first = path[depth]
            parent = path[depth - 1][0]
            if node.value is _NONE and not node.edges:
                del parent.edges[first]
                continue
            break
        for depth in range(len(path) - 1, 0, -1):
            node, first = path[depth]
            parent = path[depth - 1][0]
            if first in parent.edges and parent.edges[first][1] is node:
                _merge(parent, first)

    def _compact(self, model: Any) -> None:
        """Drop empty leaves and merge single-edge nodes everywhere under `model` (after
        `pop_prefixes`, which empties nodes along one path)."""
        root = self._roots[model]
        stack = [(root, first) for first in list(root.edges)]
        order: list[tuple[_Node, int]] = []
        while stack:
            parent, first = stack.pop()
            order.append((parent, first))
            child = parent.edges[first][1]
            stack.extend((child, f) for f in list(child.edges))
        for parent, first in reversed(order):  # children before their parents
            if first not in parent.edges:
                continue
            child = parent.edges[first][1]
            if child.value is _NONE and not child.edges:
                del parent.edges[first]
            else:
                _merge(parent, first)


def _merge(parent: _Node, first: int) -> None:
    """Fold the child under `parent.edges[first]` into that edge when it has no value and one edge."""
    label, child = parent.edges[first]
    if child.value is not _NONE or len(child.edges) != 1:
        return
    [(tail, grandchild)] = child.edges.values()
    parent.edges[first] = (np.concatenate([label, tail]), grandchild)


def _shortest_below(start: _Node) -> list[int]:
    """The tokens from `start` to the nearest node below it (in tokens) with a value."""
    if start.value is not _NONE:
        return []
    order = itertools.count()  # ties go to the edge met first, as a breadth-first walk would
    heap: list[tuple[int, int, _Node, list[np.ndarray]]] = [(0, next(order), start, [])]
    while heap:
        length, _, node, labels = heapq.heappop(heap)
        if node.value is not _NONE:
            return [int(t) for label in labels for t in label]
        for label, child in node.edges.values():
            heapq.heappush(heap, (length + len(label), next(order), child, [*labels, label]))
    return []
