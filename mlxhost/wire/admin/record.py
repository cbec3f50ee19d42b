"""How an admin record becomes JSON and back: its dataclass fields are its keys, in order."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Self, TypeVar

from mlxhost.wire.inert import excerpt

__all__ = ["JSON", "BadRecord", "Record", "field_names", "optional"]

JSON = dict[str, Any]


class BadRecord(ValueError):
    """A document that does not have the fields of the record it should be."""


_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """A record's field names, in order (looked up once per class)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return names


class Record:
    """A frozen dataclass whose fields are its JSON keys, in order; nested records override
    `_encode` and `_decode`."""

    def _encode(self) -> JSON:
        return {name: getattr(self, name) for name in field_names(type(self))}

    @classmethod
    def _decode(cls, data: Mapping[str, Any]) -> JSON:
        return {name: data[name] for name in field_names(cls)}

    def to_json(self) -> JSON:
        return self._encode()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        try:
            return cls(**cls._decode(data))
        except (KeyError, TypeError, AttributeError) as exc:  # a missing key, or not an object
            raise BadRecord(f"not a {cls.__name__}: {excerpt(exc)}") from None


R = TypeVar("R", bound=Record)


def optional(record: type[R], data: Any) -> R | None:
    return None if data is None else record.from_json(data)
