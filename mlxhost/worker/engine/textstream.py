"""Token ids to text, incrementally: whole characters only, and stop strings cut exactly.

mlx-lm's streaming detokenizer holds back incomplete UTF-8 sequences. On top of it this holds
back any tail of the text that could still grow into a stop string, so no text past a stop string
ever reaches a client, even when the stop string spans several tokens.

A control token the model writes (a special token, or a marker of its chat template) comes out
wrapped between CONTROL_OPEN and CONTROL_CLOSE, so that what reads the text can tell the token
from the same characters written as text: the output parser keeps a marker where it means
something (a call's inner markup, inside a call) and drops it everywhere else; markup never
reaches an answer as text (`strip_control`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = ["CONTROL_CLOSE", "CONTROL_OPEN", "StreamingDetokenizer", "TextStream", "control_pieces", "strip_control"]

# Private-use characters: no tokenizer spells text with them, and no client sees them.
CONTROL_OPEN = "\ue000"
CONTROL_CLOSE = "\ue001"


def control_pieces(text: str) -> list[tuple[str, str | None]]:
    """`text` as (plain text, the control token after it or None) pieces, in order. An open
    marker with no close (a stop string cut it) ends the text there."""
    pieces: list[tuple[str, str | None]] = []
    while text:
        start = text.find(CONTROL_OPEN)
        if start < 0:
            pieces.append((text, None))
            break
        end = text.find(CONTROL_CLOSE, start)
        if end < 0:
            pieces.append((text[:start], None))
            break
        pieces.append((text[:start], text[start + 1 : end]))
        text = text[end + 1 :]
    return pieces


def strip_control(text: str) -> str:
    """The text without the control tokens in it."""
    if CONTROL_OPEN not in text:
        return text
    return "".join(plain for plain, _ in control_pieces(text))


class StreamingDetokenizer(Protocol):
    def add_token(self, token: int) -> None: ...
    def finalize(self) -> None: ...
    @property
    def last_segment(self) -> str: ...


class TextStream:
    def __init__(
        self, detokenizer: StreamingDetokenizer, stop: Sequence[str] = (), control: Mapping[int, str] | None = None
    ) -> None:
        self._detokenizer = detokenizer
        self._control = control or {}  # control token ids, and their text
        self._stop = tuple(s for s in stop if s)
        self._longest_stop = max((len(s) for s in self._stop), default=0)
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended it

    def add(self, token: int) -> str:
        """Feed one generated token; return the text that is now safe to send."""
        self._detokenizer.add_token(token)
        segment = self._detokenizer.last_segment
        marker = self._control.get(token)
        if marker is not None and segment.endswith(marker):
            segment = segment[: len(segment) - len(marker)] + CONTROL_OPEN + marker + CONTROL_CLOSE
        return self._release(segment, final=False)

    def finish(self) -> str:
        """The generation ended: return whatever text is still held back."""
        if self.stopped:
            return ""
        self._detokenizer.finalize()
        return self._release(self._detokenizer.last_segment, final=True)

    def _release(self, segment: str, final: bool) -> str:
        if self.stopped:
            return ""
        if not self._stop:
            return segment
        text = self._held + segment
        # Text before the held tail was already searched, so `text` is short.
        cut, matched = min(((i, s) for s in self._stop if (i := text.find(s)) >= 0), default=(-1, None))
        if cut >= 0:
            self.stopped = True
            self.matched = matched
            self._held = ""
            return text[:cut]
        if final:
            self._held = ""
            return text
        keep = self._partial_stop_length(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def _partial_stop_length(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of some stop string."""
        for length in range(min(len(text), self._longest_stop - 1), 0, -1):
            tail = text[-length:]
            if any(s.startswith(tail) for s in self._stop):
                return length
        return 0
