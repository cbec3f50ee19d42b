"""The prompt trie's search (cache/trie.py) answers as mlx-lm's PromptTrie.search does."""

from __future__ import annotations

import random

import pytest
from mlx_lm.models.cache import PromptTrie

from mlxhost.worker.cache.trie import search

pytestmark = pytest.mark.unit


def test_it_answers_as_mlx_lm_on_random_tries() -> None:
    rng = random.Random(7)
    for _ in range(200):
        trie = PromptTrie()
        stems = [[rng.randrange(4) for _ in range(rng.randrange(1, 8))] for _ in range(3)]
        for _ in range(rng.randrange(1, 6)):
            entry = rng.choice(stems) + [rng.randrange(4) for _ in range(rng.randrange(0, 30))]
            trie.add("ns", entry, object())
        for _ in range(10):
            prompt = rng.choice(stems)[: rng.randrange(0, 8)] + [
                rng.randrange(4) for _ in range(rng.randrange(0, 6))
            ]
            ours, theirs = search(trie, "ns", prompt), trie.search("ns", prompt)
            assert (ours.exact, ours.shorter, ours.common_prefix) == (
                theirs.exact,
                theirs.shorter,
                theirs.common_prefix,
            )
            # The shortest longer entry: the same one, or one as short where two tie.
            assert (ours.longer is None) == (theirs.longer is None)
            if ours.longer is not None:
                assert len(ours.longer) == len(theirs.longer)
                assert ours.longer[: ours.common_prefix] == prompt[: ours.common_prefix]
                trie.get("ns", ours.longer)  # an entry, not a path between entries
    assert search(PromptTrie(), "other", [1, 2]).common_prefix == 0


def test_a_long_entry_past_the_prompt_is_found_whole() -> None:
    trie = PromptTrie()
    entry = list(range(5000))
    trie.add("ns", entry, object())
    found = search(trie, "ns", [*entry[:10], 99999])
    assert found.longer == entry and found.common_prefix == 10 and found.shorter is None
