"""The arithmetic and the few formatting rules every figure of the bench goes through, and the
plain-text table the report prints them in.

A figure that cannot be had (no samples, a zero denominator) is NaN while the bench runs, printed
as "?" and written to the JSON as null (`json_safe`): JSON has no NaN.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from typing import Any


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    if denominator == 0 or math.isnan(denominator):
        return float("nan")
    return numerator / denominator


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def at_least(value: float | None, bound: float) -> bool | None:
    """value >= bound; None when there is no value (nan)."""
    if value is None or math.isnan(value):
        return None
    return value >= bound


def json_safe(value: Any) -> Any:
    """NaN and infinities become null: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def number(value: float | None, digits: int = 1) -> str:
    """A figure for the report: "?" when there is none."""
    return "?" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def verdict(ok: bool | None) -> str:
    """A target's outcome for the report: "?" when it could not be judged."""
    return "?" if ok is None else ("pass" if ok else "FAIL")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def print_table(
    header: Sequence[str], lines: Sequence[Sequence[str]], aligns: Sequence[str], indent: str = ""
) -> None:
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        padded = (f"{cell:{align}{width}}" for cell, align, width in zip(cells, aligns, widths))
        return (indent + "  ".join(padded)).rstrip()

    print(fmt(header))
    print(indent + "  ".join("-" * width for width in widths))
    for line in lines:
        print(fmt(line))
