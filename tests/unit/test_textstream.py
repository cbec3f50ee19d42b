"""TextStream on its own: text goes out as soon as it cannot be part of a stop string, never past
one, however the tokens split it."""

from __future__ import annotations

import codecs
import itertools

import pytest

from mlxhost.worker.engine.textstream import TextStream


class Detokenizer:
    """A byte-level streaming detokenizer, as mlx-lm's: token ids stand for bytes, and text comes
    out in whole characters only (an incomplete UTF-8 sequence waits for its next byte)."""

    def __init__(self, vocabulary: list[bytes]) -> None:
        self.vocabulary = vocabulary
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""
        self._offset = 0

    def add_token(self, token: int) -> None:
        self.text += self._decoder.decode(self.vocabulary[token])

    def finalize(self) -> None:
        self.text += self._decoder.decode(b"", final=True)

    @property
    def last_segment(self) -> str:
        segment = self.text[self._offset :]
        self._offset = len(self.text)
        return segment


def run(pieces: list[bytes] | list[str], stop: tuple[str, ...] = ()) -> tuple[list[str], str, bool]:
    """Feed `pieces` one token each: what each token released, what finish() released, stopped."""
    vocabulary = [p.encode() if isinstance(p, str) else p for p in pieces]
    stream = TextStream(Detokenizer(vocabulary), stop)
    released = [stream.add(token) for token in range(len(vocabulary))]
    return released, stream.finish(), stream.stopped


def test_without_stop_strings_text_goes_out_as_it_comes() -> None:
    assert run(["Hel", "lo", " wor", "ld"]) == (["Hel", "lo", " wor", "ld"], "", False)
    # Empty stop strings are no stop strings.
    assert run(["a", "b"], stop=("",)) == (["a", "b"], "", False)


def test_text_before_a_stop_string_goes_out_and_nothing_after_it() -> None:
    released, last, stopped = run(["Hello", " STOP and more", " never"], stop=("STOP",))
    assert released == ["Hello", " ", ""] and last == "" and stopped


def test_a_stop_string_at_the_start_releases_nothing() -> None:
    assert run(["STOP", "x"], stop=("STOP",)) == (["", ""], "", True)


def test_a_stop_string_split_across_tokens_is_held_back_then_cut() -> None:
    released, last, stopped = run(["Hello #", "#EN", "D#", "# world"], stop=("##END##",))
    # "#" could start the stop string: it waits, and so does each piece that still could.
    assert released == ["Hello ", "", "", ""] and last == "" and stopped


def test_held_back_text_goes_out_once_it_cannot_be_a_stop_string() -> None:
    released, last, stopped = run(["a#", "#E", "x", "y"], stop=("##END##",))
    assert released == ["a", "", "##Ex", "y"] and last == "" and not stopped


def test_held_back_text_goes_out_when_the_generation_ends() -> None:
    assert run(["a", "##EN"], stop=("##END##",)) == (["a", ""], "##EN", False)


def test_a_tail_that_overlaps_itself_is_held_as_the_longest_prefix() -> None:
    # "abca" ends in "abca" and in "a", both prefixes of "abcab": all four letters wait.
    released, last, stopped = run(["xabca", "b", "tail"], stop=("abcab",))
    assert released == ["x", "", ""] and last == "" and stopped
    released, last, stopped = run(["xabca", "c"], stop=("abcab",))
    assert released == ["x", "abcac"] and not stopped


def test_of_several_stop_strings_the_earliest_in_the_text_cuts() -> None:
    released, _, stopped = run(["Hello world"], stop=("world", "lo w"))
    assert released == ["Hel"] and stopped
    released, _, stopped = run(["xx", "abc"], stop=("abc", "ab"))
    assert released == ["xx", ""] and stopped
    # Held back for the longest one that could still match, cut by the one that does.
    released, _, stopped = run(["1 <", "<e", "nd>"], stop=("<<end>>", "end"))
    assert released == ["1 ", "", "<<"] and stopped


def test_multibyte_characters_go_out_whole_and_stop_strings_cut_between_them() -> None:
    pieces = [*(bytes([b]) for b in "café ".encode()), *(bytes([b]) for b in "日本語".encode())]
    released, last, stopped = run(pieces, stop=("本",))
    assert "".join(released) == "café 日" and last == "" and stopped
    assert all(r == "" or r.isprintable() for r in released)
    # A character's first byte alone releases nothing: its text is not there yet.
    assert released[3] == "" and released[4] == "é"


@pytest.mark.parametrize("text", ["say hello<|stop|>more", "<|stop|>", "<|st<|stop|>", "no stop here <|sto"])
def test_any_split_releases_exactly_the_text_before_the_first_stop(text: str) -> None:
    stop = "<|stop|>"
    expected = text.split(stop)[0]
    splits = 0
    for cuts in itertools.chain.from_iterable(itertools.combinations(range(1, len(text)), n) for n in range(4)):
        splits += 1
        bounds = [0, *cuts, len(text)]
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
        released, last, stopped = run(pieces, stop=(stop,))
        sent = ""
        for piece in released:
            sent += piece
            assert expected.startswith(sent), (pieces, released)  # never a byte past the stop
        assert sent + last == expected, pieces
        assert stopped == (stop in text)
    assert splits >= 64  # every split into up to four tokens
