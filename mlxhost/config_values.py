"""The checks of one option's value, whichever source gave it (the TOML file, the environment,
a flag, a worker's launch record): each parser returns the value as `Settings` holds it, or raises
ValueError. Its docstring says what is valid, for the error; `InvalidValue` says more when it can.

A model's and its names' checks are mlxhost.catalog.spec's; the demo's and the log level's are
beside `Settings` in mlxhost.config.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "InvalidValue",
    "boolean",
    "integer",
    "names",
    "non_negative_number",
    "optional_text",
    "positive_number",
    "text",
]


class InvalidValue(ValueError):
    """A parser's own account of what is wrong (plain ValueErrors fall back to its docstring)."""


def integer(low: int, high: int | None = None) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool):
            raise ValueError
        number = int(value) if isinstance(value, str) else value
        if not isinstance(number, int) or number < low or (high is not None and number > high):
            raise ValueError
        return number

    parse.__doc__ = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    return parse


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError
    return float(value)


def positive_number(value: object) -> float:
    """a number > 0"""
    if not (number := _number(value)) > 0:
        raise ValueError
    return number


def non_negative_number(value: object) -> float:
    """a number >= 0"""
    if not (number := _number(value)) >= 0:
        raise ValueError
    return number


def text(value: object) -> str:
    """a non-empty string"""
    if not isinstance(value, str) or not value.strip():
        raise ValueError
    return value


def optional_text(value: object) -> str | None:
    """a string (empty for none)"""
    if not isinstance(value, str):
        raise ValueError
    return value or None


def names(value: object) -> tuple[str, ...]:
    """a name, a comma-separated list of names, or a list of names"""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError
    found = tuple(i.strip() for i in items if i.strip())
    if any(any(c.isspace() or not c.isprintable() for c in name) for name in found):
        raise InvalidValue("names with spaces or control characters")
    return found


def boolean(value: object) -> bool:
    """true or false"""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return value.lower() in {"1", "true", "yes", "on"}
    raise ValueError
