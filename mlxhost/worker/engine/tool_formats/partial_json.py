"""Reading a JSON object that is still being written: the members that are complete so far.

The JSON families stream a call's arguments member by member: a member is sent once the next one
began or the object closed, never half a value, so what was sent is always a prefix of the
finished call's arguments (see `arguments_prefix`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from mlxhost.worker.engine.tool_formats import arguments_prefix

__all__ = ["arguments_so_far", "complete_members", "object_end", "open_string"]

# A member still being written whose value is a string: its key, and the string's text so far
# (closed or not: until a comma or the object's end, the member is not complete).
_OPEN_STRING: Final = re.compile(r'\s*("(?:[^"\\]|\\.)*")\s*:\s*"((?:[^"\\]|\\.)*\\?)(?:"\s*)?\Z', re.DOTALL)
# The backslashes a text ends with, and a \u escape's first hex digits after them.
_TRAILING_ESCAPE: Final = re.compile(r"(\\+)(u[0-9a-fA-F]{0,3})?\Z")


def complete_members(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The members of the object `text` starts with (after any whitespace) that are complete, and
    whether the object itself is: ({...}, True) once it closed, (None, False) before it began or
    while what came is not yet JSON."""
    start = len(text) - len(text.lstrip())
    if start >= len(text) or text[start] != "{":
        return None, False
    end, last_comma = _scan(text, start)
    if end is not None:
        try:
            value = json.loads(text[start : end + 1])
        except ValueError:
            return None, False
        return (value, True) if isinstance(value, dict) else (None, False)
    if last_comma is None:
        return {}, False
    try:
        value = json.loads(text[start:last_comma] + "}")
    except ValueError:
        return None, False
    return (value, False) if isinstance(value, dict) else (None, False)


def arguments_so_far(text: str) -> str | None:
    """What is known of the arguments object `text` starts with, as a prefix of the JSON text the
    finished call's arguments will have: its complete members, then a string member as far as it
    got (a file's content streams as the model writes it); None before the object began."""
    members, complete = complete_members(text)
    if members is None:
        return None
    so_far = arguments_prefix(members, complete)
    if not complete and (member := open_string(text)) is not None and member[0] not in members:
        key, value = member
        so_far += (", " if members else "") + json.dumps(key, ensure_ascii=False) + ": "
        so_far += json.dumps(value, ensure_ascii=False)[:-1]
    return so_far


def open_string(text: str) -> tuple[str, str] | None:
    """The object `text` starts with, when the member it is writing is a string still open: its
    key and the string so far (decoded, whole characters only), else None."""
    start = len(text) - len(text.lstrip())
    if start >= len(text) or text[start] != "{":
        return None
    end, last_comma = _scan(text, start)
    if end is not None:
        return None
    match = _OPEN_STRING.match(text, (last_comma if last_comma is not None else start) + 1)
    if match is None:
        return None
    raw = _whole_escapes(match.group(2))
    try:
        key, value = json.loads(match.group(1)), json.loads(f'"{raw}"')
    except ValueError:
        return None
    if value and "\ud800" <= value[-1] <= "\udbff":
        value = value[:-1]  # half of a surrogate pair: its other half decides the character
    return key, value


def _whole_escapes(raw: str) -> str:
    """`raw` without an escape it ends inside of (a backslash that begins one, and a \\u's first
    hex digits): an odd run of backslashes ends with one that opens an escape."""
    match = _TRAILING_ESCAPE.search(raw)
    if match is None or len(match.group(1)) % 2 == 0:
        return raw
    return raw[: match.end(1) - 1]


def object_end(text: str) -> int | None:
    """The index just past the object `text` starts with (after whitespace), or None if it is open."""
    start = len(text) - len(text.lstrip())
    if start >= len(text) or text[start] != "{":
        return None
    end, _ = _scan(text, start)
    return None if end is None else end + 1


def _scan(text: str, start: int) -> tuple[int | None, int | None]:
    """(the index of the brace closing the object at `start`, or None; the index of its last
    top-level comma, or None)."""
    depth = 0
    in_string = escaped = False
    last_comma = None
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i, last_comma
        elif char == "," and depth == 1:
            last_comma = i
    return None, last_comma
