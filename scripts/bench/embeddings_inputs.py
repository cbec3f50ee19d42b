"""The inputs --embeddings sends (`bench.embeddings`): deterministic texts of a given length in the
model's tokens, prose for the short and mixed-length inputs and code for the code chunks.

A text of n tokens is made by encoding a longer one, keeping its first n ids and decoding them;
encoding that text again gives n ids or a few off where a cut split a character or a merge
(`Inputs` keeps each text's own ids, as the raw path sends them and the server counts them).
Prose comes from `mlxhost.demo.agent_sentences`, code from `mlxhost.demo.agent_code` (Python and
TypeScript), each from a seeded generator: the same model gets the same inputs in every run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlxhost.demo.agent_code import python_code, typescript_code
from mlxhost.demo.agent_sentences import sentence

__all__ = ["Decode", "Encode", "Inputs", "code_chunks", "cut", "mixed_lengths", "prose_inputs"]

Encode = Callable[[str], list[int]]
Decode = Callable[[list[int]], str]

SHORT_TOKENS = 16
MIXED_TOKENS = (16, 512)  # inclusive: the mixed inputs' lengths are drawn uniformly from these
CODE_TOKENS = 200


@dataclass(frozen=True)
class Inputs:
    """Texts and their ids, as this side's tokenizer encodes them (what the worker's does too)."""

    texts: list[str]
    ids: list[list[int]]

    @property
    def tokens(self) -> int:
        return sum(len(i) for i in self.ids)

    def take(self, count: int) -> Inputs:
        """The first `count` inputs (all of them, and no more, when there are fewer)."""
        return Inputs(self.texts[:count], self.ids[:count])

    def requests(self, size: int) -> list[Inputs]:
        """The inputs in requests of `size` in order, the last one shorter when they do not divide."""
        if size < 1:
            raise ValueError(f"a request holds at least one input, not {size}")
        return [
            Inputs(self.texts[at : at + size], self.ids[at : at + size])
            for at in range(0, len(self.texts), size)
        ]


def cut(text: str, tokens: int, encode: Encode, decode: Decode) -> str:
    """`text`'s first `tokens` tokens as text; the whole text when it has no more."""
    if tokens < 1:
        raise ValueError(f"an input has at least one token, not {tokens}")
    return decode(encode(text)[:tokens])


def mixed_lengths(count: int, seed: int, bounds: tuple[int, int] = MIXED_TOKENS) -> list[int]:
    """`count` lengths drawn uniformly from `bounds` (inclusive) with `seed`."""
    low, high = bounds
    if not 1 <= low <= high:
        raise ValueError(f"lengths from {low} to {high}: not a range of positive lengths")
    draw = random.Random(seed)
    return [draw.randint(low, high) for _ in range(count)]


def _long_enough(make: Callable[[], str], tokens: int, encode: Encode, separator: str) -> str:
    """Pieces from `make` joined until the text holds at least `tokens` tokens. Characters bound
    tokens from above (a token is at least one byte), so the count is checked only then."""
    pieces: list[str] = []
    while True:
        pieces.append(make())
        text = separator.join(pieces)
        if len(text.encode()) >= tokens and len(encode(text)) >= tokens:
            return text


def _encoded(texts: Sequence[str], encode: Encode) -> Inputs:
    return Inputs(list(texts), [list(encode(text)) for text in texts])


def prose_inputs(lengths: Sequence[int], seed: int, encode: Encode, decode: Decode) -> Inputs:
    """One text of prose for each length, each of its own sentences (distinct inputs: nothing is
    computed once for two of them)."""
    draw = random.Random(seed)
    texts = []
    for length in lengths:
        text = _long_enough(lambda: sentence(draw), length, encode, " ")
        texts.append(cut(text, length, encode, decode))
    return _encoded(texts, encode)


def code_chunks(count: int, seed: int, encode: Encode, decode: Decode, tokens: int = CODE_TOKENS) -> Inputs:
    """`count` chunks of code of about `tokens` tokens each, as a code index splits a repository:
    Python mostly, some TypeScript, each chunk a file's opening."""
    draw = random.Random(seed)

    def piece() -> str:
        return typescript_code(draw) if draw.random() < 0.25 else python_code(draw)

    texts = [cut(_long_enough(piece, tokens, encode, "\n\n"), tokens, encode, decode) for _ in range(count)]
    return _encoded(texts, encode)
