"""Token ids to text, incrementally: whole characters only, and stop strings cut exactly.

mlx-lm's streaming detokenizer holds back incomplete UTF-8 sequences. On top of it this holds
back any tail of the text that could still grow into a stop string, so no text past a stop string
ever reaches a client, even when the stop string spans several tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["StreamingDetokenizer", "TextStream"]


class StreamingDetokenizer(Protocol):
    def add_token(self, token: int) -> None: ...
    def finalize(self) -> None: ...
    @property
    def last_segment(self) -> str: ...


class TextStream:
    def __init__(self, detokenizer: StreamingDetokenizer, stop: Sequence[str] = ()) -> None:
        self._detokenizer = detokenizer
        self._stop = tuple(s for s in stop if s)
        self._longest_stop = max((len(s) for s in self._stop), default=0)
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended it

    def add(self, token: int) -> str:
        """Feed one generated token; return the text that is now safe to send."""
        self._detokenizer.add_token(token)
        return self._release(self._detokenizer.last_segment, final=False)

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
