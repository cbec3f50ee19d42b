"""How a result record becomes JSON: its fields in the order they are declared, each under its own
name, then the derived figures its class names in DERIVED (properties, and the old names kept as
aliases). Nested records, lists and dicts are written alike; a plain dataclass that is not a
record (a run as measured) is written as `dataclasses.asdict` writes it, its fields alone.

Two field markers: `OPTIONAL`, a key written only when it has a value (a figure only one path
has), and `run_list(*derived)`, a list of runs each written with the named derived figures after its
fields (a run's rate, which its dataclass computes).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Final

_OMIT_IF_NONE = "omit_if_none"
_RUN_FIGURES = "run_figures"


class Record:
    """A frozen dataclass of results that writes itself as JSON (`to_json`)."""

    DERIVED: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        written = encode(self)
        assert isinstance(written, dict)
        return written


# A field written only when it is not None: `field(default=None, metadata=OPTIONAL)`.
OPTIONAL: Final = {_OMIT_IF_NONE: True}


def run_list(*derived: str) -> dict[str, tuple[str, ...]]:
    """A list of runs, each written as its fields and then these derived figures:
    `field(metadata=run_list("total_tok_s"))`."""
    return {_RUN_FIGURES: derived}


def encode(value: Any) -> Any:
    """`value` as JSON's types (NaN stays a float: `bench.figures.json_safe` turns it to null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        written: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if item is None and field.metadata.get(_OMIT_IF_NONE):
                continue
            derived = field.metadata.get(_RUN_FIGURES)
            if derived is not None:
                written[field.name] = [_with(run, derived) for run in item]
            else:
                written[field.name] = encode(item)
        if isinstance(value, Record):
            for name in value.DERIVED:
                written[name] = encode(getattr(value, name))
        return written
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    return value


def _with(run: Any, derived: tuple[str, ...]) -> dict[str, Any]:
    written = encode(run)
    for name in derived:
        written[name] = encode(getattr(run, name))
    return written
