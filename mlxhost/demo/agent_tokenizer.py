"""The agent demo model's tokenizer: byte-level BPE whose tokens may run across words.

An agent's prompt is tens of thousands of characters of instructions and JSON Schema, so a token
should cover several characters, and often several words: ` of the`, `", "description": "`. It is
trained in two stages on `agent_corpus` (the recipe of SuperBPE, Liu et al. 2025):

1. an ordinary byte-level BPE, whose pre-tokenizer (GPT-2's) keeps every token inside one word,
   learns words and the pieces of words for half the vocabulary;
2. a second BPE over the first one's tokens, not split at spaces, learns which tokens follow
   which, and its merges, spelled out in bytes, fill the other half.

The result is one plain BPE model (`tokenizer.json`, as mlx-lm and transformers read it): the
first stage's merges rank first, so a prompt is cut into words before words are joined. It
splits a prompt only at line ends (a real newline, or `\\n` in a JSON string), as both stages saw
their text. `tokenizers` is imported only when a tokenizer is trained.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from mlxhost.demo.agent_corpus import agent_corpus

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["train_agent_tokenizer"]

_DOCUMENTS: Final = 1000
# Where a prompt is cut before BPE: at runs of line ends, each run starting the next piece (so
# "\n\n- " can be one token).
_LINE_ENDS: Final = r"(?:\\n|\n)+"
# No token is longer than this many bytes, so a prompt's length in characters still bounds its
# length in tokens usefully (a host refuses a prompt that could never fit before encoding it).
_LONGEST: Final = 48
# The longest run of first-stage tokens a second-stage token may join.
_LONGEST_RUN: Final = 16
# A character per first-stage token, for the second stage: Supplementary Private Use Area-A,
# which no text the corpus holds uses.
_FIRST_CHAR: Final = 0xF0000


def train_agent_tokenizer(vocab_size: int, special_tokens: Sequence[str]) -> Tokenizer:
    """A tokenizer of exactly `vocab_size` tokens, the special ones first, the same on every machine."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    corpus = agent_corpus(_DOCUMENTS)
    alphabet = pre_tokenizers.ByteLevel.alphabet()

    words = Tokenizer(models.BPE())
    words.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    words.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size // 2,
            min_frequency=2,
            special_tokens=list(special_tokens),
            initial_alphabet=alphabet,
            show_progress=False,
        ),
    )
    word_model = json.loads(words.to_str())["model"]
    vocab: dict[str, int] = dict(word_model["vocab"])
    merges: list[tuple[str, str]] = [_pair(m) for m in word_model["merges"]]
    spelled = {i: token for token, i in vocab.items()}

    # Stage two reads the corpus as a prompt will be read: cut at line ends, then the first
    # stage's merges over each whole piece.
    pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_LINE_ENDS), behavior="merged_with_next"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    words.pre_tokenizer = pre_tokenizer
    special = set(range(len(special_tokens)))
    pieces: list[str] = []
    for encoding in words.encode_batch(corpus):
        piece: list[str] = []
        last = None
        for token, word in zip(encoding.ids, encoding.word_ids, strict=True):
            # A special token is matched before BPE ever runs: nothing may join it.
            if (word != last or token in special) and piece:
                pieces.append("".join(piece))
                piece = []
            last = word
            if token not in special:
                piece.append(chr(_FIRST_CHAR + token))
        if piece:
            pieces.append("".join(piece))

    wanted = vocab_size - len(vocab)
    runs = Tokenizer(models.BPE())
    runs.train_from_iterator(
        pieces,
        trainers.BpeTrainer(
            # Its vocabulary counts its alphabet (the first-stage tokens seen), and some merges
            # below are dropped: ask for more than are needed.
            vocab_size=len(set("".join(pieces))) + wanted + wanted // 4,
            min_frequency=2,
            max_token_length=_LONGEST_RUN,
            show_progress=False,
        ),
    )
    known = set(merges)
    for a, b in (_pair(m) for m in json.loads(runs.to_str())["model"]["merges"]):
        if len(vocab) == vocab_size:
            break
        left = "".join(spelled[ord(c) - _FIRST_CHAR] for c in a)
        right = "".join(spelled[ord(c) - _FIRST_CHAR] for c in b)
        # Too long, or built on one that was: dropped. Two runs can spell the same bytes; a merge
        # that spells a token already there is kept (later merges may build on its result), but
        # adds no token.
        if (
            left not in vocab
            or right not in vocab
            or len(left) + len(right) > _LONGEST
            or (left, right) in known
        ):
            continue
        merges.append((left, right))
        known.add((left, right))
        vocab.setdefault(left + right, len(vocab))

    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens(list(special_tokens))
    return tokenizer


def _pair(merge: str | list[str]) -> tuple[str, str]:
    # tokenizers writes a merge as a pair, older versions as one string with a space.
    if isinstance(merge, str):
        left, right = merge.split(" ")
        return left, right
    left, right = merge
    return left, right
