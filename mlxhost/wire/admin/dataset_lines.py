"""A fine-tune's dataset file, line by line: the one reader both the host (when a job is submitted)
and the job process (before it trains) use, so that a file one accepts the other accepts.

A file is JSON Lines: one JSON object (one example) per line, UTF-8. A UTF-8 byte order mark at
its start is passed by (Windows editors write one; mlx-lm's own loader would fail on it, but a job
reads its files only through this). Blank lines are passed by (mlx-lm fails on one; it carries
nothing). Every line is read in bounded memory: `MAX_LINE_BYTES` is the most a line may hold, and
no more than that is ever read into memory at once, whatever the file holds. The first line that
is not an example stops the reading with a `DatasetError` naming the file and the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from mlxhost.wire.inert import escape_controls, excerpt

__all__ = ["FORMATS", "MAX_LINE_BYTES", "DatasetError", "read_examples"]

# One example's line. A job tokenizes every example before training, and tokenizing takes some
# 240 times the text in memory at its peak (measured with the tiny model: 243 MiB for a 1 MiB
# example, 876 MiB for 4 MiB; a 20 MB line took a job to 3.3 GB), so this bounds what one example
# can cost a job. 1 MiB is some 250,000 tokens of English for a real model's tokenizer (about 4
# bytes a token), 128 times the default max_seq_length (2048) and past the context of the models
# mlx-lm fine-tunes on a Mac; training cuts every example at max_seq_length anyway.
MAX_LINE_BYTES = 1 << 20
FORMATS = '{"messages": [...]}, {"prompt": ..., "completion": ...} or {"text": ...}'
_BOM = b"\xef\xbb\xbf"


class DatasetError(ValueError):
    """A dataset file a fine-tune cannot use; the message names the file and, where one is at
    fault, the line (counted from 1, as an editor counts)."""

    def __init__(self, name: str, line: int | None, reason: str) -> None:
        self.line = line
        file = escape_controls(name)
        super().__init__(f"{file} {reason}" if line is None else f"{file} line {line}: {reason}")


def read_examples(file: IO[bytes], name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each example in `file` (opened in binary) with its line number; `name` is the file as the
    errors name it. Raises DatasetError at the first line that is not an example, or at the end
    when the file held none."""
    number = 0
    offset = 0  # of the line in the file, for an error that points at a byte
    found = False
    while raw := file.readline(MAX_LINE_BYTES + 1):
        number += 1
        start, offset = offset, offset + len(raw)
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if len(line) > MAX_LINE_BYTES:
            limit = f"{MAX_LINE_BYTES:,} bytes ({MAX_LINE_BYTES / (1 << 20):g} MiB)"
            raise DatasetError(name, number, f"longer than {limit}, the most one example may take")
        if number == 1 and line.startswith(_BOM):
            line, start = line[len(_BOM) :], start + len(_BOM)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            byte = line[exc.start]
            raise DatasetError(
                name, number, f"not UTF-8 (byte 0x{byte:02x} at byte offset {start + exc.start} of the file)"
            ) from None
        if not text.strip():
            continue
        try:
            example = json.loads(text)
        except RecursionError:
            raise DatasetError(
                name, number, "nests too deeply (JSON more than about 1,000 levels deep)"
            ) from None
        except ValueError as exc:
            raise DatasetError(name, number, f"not JSON ({excerpt(exc, 120)})") from None
        if not isinstance(example, dict):
            raise DatasetError(name, number, f"not a JSON object (one example per line: {FORMATS})")
        found = True
        yield number, example
    if not found:
        raise DatasetError(name, None, f"has no examples (one JSON object per line: {FORMATS})")
