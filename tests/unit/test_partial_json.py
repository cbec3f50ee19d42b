"""A JSON object still being written: its complete members, and a string member as far as it got,
cut only between whole characters (never inside an escape or a surrogate pair)."""

from __future__ import annotations

import json

import pytest

from mlxhost.worker.engine.tool_formats import tool_format
from mlxhost.worker.engine.tool_formats.partial_json import complete_members, open_string

pytestmark = pytest.mark.unit

ARGUMENTS = {"path": "a.py", "content": 'print("héllo\\n")\n\tdone 👋 \\ "q"', "mode": 420}


def test_every_prefix_reads_as_a_prefix_of_the_whole_text() -> None:
    """The json_tools reader over every prefix of a call: what it says only grows, each a prefix
    of the finished call's arguments, and the content arrives character by character."""
    fmt = tool_format("json_tools")
    assert fmt is not None
    # Written with escapes a model may choose (\u00e9, an escaped surrogate pair), not as dumps would.
    raw = json.dumps(ARGUMENTS, ensure_ascii=True)
    body = '\n{"name": "write_file", "arguments": ' + raw + "}\n"
    whole = json.dumps(ARGUMENTS, ensure_ascii=False)
    seen, grew = "", 0
    for cut in range(len(body) + 1):
        calls = fmt.partial(body[:cut], None)
        if not calls or calls[0].name is None:
            continue
        text = calls[0].arguments
        assert whole.startswith(text) and text.startswith(seen), (body[:cut], text)
        grew += text != seen
        seen = text
    assert seen == whole and grew > 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"b": "he', ("b", "he")),
        ('{"a": 1, "b": "x\\', ("b", "x")),  # a backslash that opens an escape
        ('{"b": "x\\u00', ("b", "x")),  # a \\u escape's first digits
        ('{"b": "x\\u00e9', ("b", "xé")),
        ('{"b": "a\\\\"', ("b", "a\\")),  # an escaped backslash, then the string's end
        ('{"b": "x\\\\u00', ("b", "x\\u00")),  # the same, then plain text
        ('{"b": "\\ud83d', ("b", "")),  # half a surrogate pair
        ('{"b": "ok" ', ("b", "ok")),  # closed, the member not yet
        ('{"a": 1', None),
        ('{"a": "x", "b": 2', None),
        ('{"a": "x"}', None),
    ],
)
def test_an_open_string_member(text: str, expected: tuple[str, str] | None) -> None:
    assert open_string(text) == expected


def test_complete_members_are_those_a_comma_or_the_end_closed() -> None:
    assert complete_members('{"a": 1, "b": [1, {"c": ","}], "d": "x') == (
        {"a": 1, "b": [1, {"c": ","}]},
        False,
    )
    assert complete_members('{"a": 1}') == ({"a": 1}, True)
    assert complete_members("nothing") == (None, False)
