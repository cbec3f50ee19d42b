"""What the chunks' reader tests share: text that looks like structure, the SSE encodings beyond the
compact one, and a reader fed a stream in pieces."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mlxhost.wire.reading import StreamReader

__all__ = ["TRICKY", "Encode", "pretty", "read", "spaced"]

Encode = Callable[[dict[str, Any]], bytes]

# Text that a pattern over the bytes would take for structure.
TRICKY = 'say "finish_reason":"length" and "content":"x"\n\ndata: [DONE]\n\n'


def pretty(payload: dict[str, Any]) -> bytes:
    """One frame whose JSON spans several `data:` lines, as SSE allows."""
    lines = json.dumps(payload, indent=2, ensure_ascii=False).split("\n")
    return "".join(f"data: {line}\n" for line in lines).encode() + b"\n"


def spaced(payload: dict[str, Any]) -> bytes:
    """One line, with json.dumps's default separators, CRLF line ends and no space after the colon."""
    return b"data:" + json.dumps(payload).encode() + b"\r\n\r\n"


def read(data: bytes, *splits: int) -> StreamReader:
    reader = StreamReader()
    start = 0
    for end in (*splits, len(data)):
        reader.feed(data[start:end])
        start = end
    return reader
