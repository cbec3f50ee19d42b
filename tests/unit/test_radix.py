"""The disk tier's compact trie answers as mlx-lm's PromptTrie does, operation for operation, on
random sequences of adds, pops, prefix pops and searches; and it holds a few nodes per entry."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlx_lm.models.cache import PromptTrie

from mlxhost.worker.cache.disk_index import path_keys
from mlxhost.worker.cache.radix import RadixTrie

pytestmark = pytest.mark.unit

TOKENS = st.lists(st.integers(0, 3), min_size=0, max_size=7)  # few symbols: paths share and part
OPS = st.lists(st.tuples(st.sampled_from(["add", "pop", "pop_prefixes", "search", "get"]), TOKENS), max_size=40)


def outcome(call: Any) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except KeyError:
        return ("KeyError", None)


@settings(max_examples=400, deadline=None)
@given(OPS)
def test_every_answer_is_prompt_tries(ops: list[tuple[str, list[int]]]) -> None:
    ours, theirs = RadixTrie(), PromptTrie()
    theirs._trie["m"] = {}  # mlx-lm's raises for a model it never saw; ours answers as if empty
    ours.add("m", [9], "seed")
    theirs.add("m", [9], "seed")
    for n, (op, tokens) in enumerate(ops):
        if op == "add":
            assert ours.add("m", tokens, n) == theirs.add("m", tokens, n)
        elif op == "pop":
            assert outcome(lambda: ours.pop("m", tokens)) == outcome(lambda: theirs.pop("m", tokens))
        elif op == "pop_prefixes":
            # mlx-lm's walks down `tokens`, failing where they leave the trie after taking what it
            # passed: only asked (as the disk index asks) for the tokens of an entry just added.
            ours.add("m", tokens, n)
            theirs.add("m", tokens, n)
            assert ours.pop_prefixes("m", tokens) == theirs.pop_prefixes("m", tokens)
        elif op == "get":
            assert outcome(lambda: ours.get("m", tokens)) == outcome(lambda: theirs.get("m", tokens))
        else:
            mine, mlx = ours.search("m", tokens), theirs.search("m", tokens)
            assert (mine.exact, mine.shorter, mine.common_prefix) == (mlx.exact, mlx.shorter, mlx.common_prefix)
            # The shortest longer entry: where two are equally short, either (mlx-lm's pick
            # follows its walk's order), a real entry that follows the tokens as far.
            assert (mine.longer is None) == (mlx.longer is None)
            if mine.longer is not None and mlx.longer is not None:
                assert len(mine.longer) == len(mlx.longer)
                assert mine.longer[: mine.common_prefix] == tokens[: mine.common_prefix]
                assert ours.get("m", mine.longer) is not None
            keys, theirs_keys = ours.path_keys("m", tokens), path_keys(theirs, "m", tokens)
            assert len(keys) == len(theirs_keys) and keys[:-1] == theirs_keys[:-1]


def test_an_unshared_entry_is_one_node() -> None:
    trie = RadixTrie()
    for i in range(100):
        trie.add("m", [i, *range(1000, 5000)], i)
    root = trie._roots["m"]
    assert len(root.edges) == 100
    assert all(not child.edges for _, child in root.edges.values())
    assert sum(label.nbytes for label, _ in root.edges.values()) == 100 * 4001 * 4


def test_the_disk_index_holds_a_few_bytes_a_token() -> None:
    """The probe: 200 fresh 3,900-token prompts grew the worker by about 1 MiB each, the index's
    trie of a dict per token. Counted with tracemalloc: what 100 such entries cost in memory."""
    import random
    import tracemalloc

    from mlxhost.worker.cache.disk_index import DiskIndex
    from mlxhost.worker.cache.files import Entry

    rng = random.Random(0)
    prompts = [[rng.randrange(3, 150_000) for _ in range(3900)] for _ in range(100)]
    index = DiskIndex()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n, tokens in enumerate(prompts):
        index.add(Entry.of(f"e{n}", "ns", tokens, True, 1000), n)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held / (100 * 3900) < 16  # bytes a token (mlx-lm's PromptTrie: over 200)
    assert index.find(prompts[7] + [5], "ns")[0] is not None
