"""Client-derived text made safe to keep and to show: short, and free of control characters.

Anything a request carries (a field name, a model name, a path, a worker's error about it) may be
quoted back in an error, kept in a session's outcome, published as an event and drawn on the
operator's terminal. Each of those places keeps it only through `excerpt`, so none of them can be
made to hold megabytes, and no ESC sequence from a client ever reaches a terminal.
"""

from __future__ import annotations

import re

__all__ = ["CONTROLS", "EXCERPT_CHARS", "MESSAGE_CHARS", "escape_controls", "excerpt"]

EXCERPT_CHARS = 64  # a quoted name or value inside a message
MESSAGE_CHARS = 512  # a whole message kept in an outcome or an event

# C0 (with DEL) and C1 controls, plus the Unicode line and paragraph separators and the
# bidirectional overrides that can make a terminal line read differently than it is.
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written out as an escape (`\\x1b`), nothing dropped."""
    return CONTROLS.sub(_escape, text)


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """About `limit` characters of `value`, controls escaped, saying how long it was if cut."""
    text = value if isinstance(value, str) else str(value)
    cut = text[: limit + 1]  # never escape (or even scan) more than what can be kept
    escaped = escape_controls(cut)
    if len(text) <= limit and len(escaped) <= limit:
        return escaped
    kept = escaped[:limit]
    if "\\" in kept[-5:]:  # do not end in half an escape
        kept = kept[: kept.rindex("\\", max(0, len(kept) - 5))]
    return f"{kept}… ({len(text)} characters in all)"
