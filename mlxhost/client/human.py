"""Numbers for people: durations, byte counts and draft figures as `mlxhost status` and the
console show them."""

from __future__ import annotations

from mlxhost.wire.launch import SpeculationReading

__all__ = ["count", "drafts", "duration", "size"]


def duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def count(value: int) -> str:
    """A count in at most five characters: `9999`, `12.3k`, `4.1M`."""
    if value < 10_000:
        return str(value)
    if value < 999_500:
        return f"{value / 1000:.1f}k" if value < 99_950 else f"{value / 1000:.0f}k"
    return f"{value / 1_000_000:.1f}M"


def drafts(reading: SpeculationReading | None) -> str:
    """A worker's speculative decoding in at most nine characters: the share of its drafts the
    model accepted, and the tokens each verification produced (`75% ×3.5`); `-` before any."""
    rate = reading.acceptance if reading is not None else None
    if reading is None or rate is None:
        return "-"
    per = reading.tokens_per_verification
    return f"{rate:.0%}" + (f" ×{per:.1f}" if per is not None else "")
