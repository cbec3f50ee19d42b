"""The dataset reader the host and the job process share (`mlxhost.wire.admin.dataset_lines`): what it
accepts, and what each refusal says, on real files."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest

from mlxhost.wire.admin.dataset_lines import MAX_LINE_BYTES, DatasetError, read_examples

GOOD = json.dumps({"text": "one example"})


def read(path: Path) -> list[tuple[int, dict[str, object]]]:
    with path.open("rb") as file:
        return list(read_examples(file, str(path)))


def refusal(tmp_path: Path, content: bytes) -> DatasetError:
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    with pytest.raises(DatasetError) as caught:
        read(path)
    assert str(caught.value).startswith(f"{path} "), caught.value  # the file, by its whole path
    assert "\n" not in str(caught.value)
    return caught.value


def test_examples_come_with_their_line_numbers_past_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_bytes(f"{GOOD}\n\n   \n{GOOD}\r\n{GOOD}".encode())  # CRLF, and no newline at the end
    assert [number for number, _ in read(path)] == [1, 4, 5]


def test_a_byte_order_mark_is_passed_by(tmp_path: Path) -> None:
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + f"{GOOD}\n{GOOD}\n".encode())
    assert read(path) == [(1, {"text": "one example"}), (2, {"text": "one example"})]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", " has no examples (one JSON object per line: "),
        (b"\n  \n\n", " has no examples"),
        (f"{GOOD}\n{GOOD}\n{{oops\n".encode(), " line 3: not JSON (Expecting property name"),
        (f"{GOOD}\n[1, 2]\n".encode(), ' line 2: not a JSON object (one example per line: {"messages"'),
        (f"{GOOD}\n".encode() + b"[" * 100_000 + b"]" * 100_000, " line 2: nests too deeply"),
        (
            b'{"text": "ok"}\n{"text": "caf\xe9"}\n',
            " line 2: not UTF-8 (byte 0xe9 at byte offset 28 of the file)",
        ),
        (
            b"\xef\xbb\xbf" + b'{"text": "\xff"}',
            " line 1: not UTF-8 (byte 0xff at byte offset 13 of the file)",
        ),
        (b"\xef\xbb\xbf\xef\xbb\xbf" + GOOD.encode(), " line 1: not JSON"),  # only one mark is a mark
    ],
    ids=[
        "empty",
        "only-blank",
        "not-json",
        "not-an-object",
        "too-deep",
        "latin-1",
        "bad-byte-after-bom",
        "two-boms",
    ],
)
def test_each_refusal_names_the_file_and_the_line(tmp_path: Path, content: bytes, message: str) -> None:
    error = refusal(tmp_path, content)
    assert message in str(error)


def test_a_line_of_exactly_the_limit_is_an_example(tmp_path: Path) -> None:
    line = json.dumps({"text": ""}).encode()
    line = line[:-2] + b"a" * (MAX_LINE_BYTES - len(line)) + b'"}'
    assert len(line) == MAX_LINE_BYTES
    path = tmp_path / "train.jsonl"
    path.write_bytes(line + b"\n" + line)  # with a newline, and without one at the end
    assert [number for number, _ in read(path)] == [1, 2]


def test_a_line_over_the_limit_is_refused_naming_the_limit(tmp_path: Path) -> None:
    over = json.dumps({"text": "a" * MAX_LINE_BYTES}).encode()
    error = refusal(tmp_path, GOOD.encode() + b"\n" + over + b"\n")
    assert str(error).endswith(" line 2: longer than 1,048,576 bytes (1 MiB), the most one example may take")
    assert error.line == 2


def test_a_long_line_is_never_read_whole() -> None:
    """A 64 MiB line with no newline (as from a stream, so nothing is on disk): the reader holds
    about one limit's worth of it before it refuses, not the line."""
    size = 64 << 20

    class Endless(io.RawIOBase):
        def __init__(self) -> None:
            self.left = size

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            n = min(len(buffer), self.left)
            buffer[:n] = b"a" * n
            self.left -= n
            return n

    tracemalloc.start()
    try:
        with pytest.raises(DatasetError, match="line 1: longer than"):
            list(read_examples(io.BufferedReader(Endless()), "train.jsonl"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE_BYTES, f"the reader held {peak:,} bytes"
