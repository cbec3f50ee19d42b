"""Readings of the servers' processes through psutil: resident memory, and CPU seconds over a run
(user + system) turned into the cores a process kept busy."""

from __future__ import annotations

from collections.abc import Sequence

import psutil

from bench.figures import median
from bench.settings import MB


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / MB
    except psutil.Error:
        return None


class CPUClock:
    """CPU seconds (user + system) of some processes, from one reading to the next."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        readings = {}
        for name, process in self.processes.items():
            try:
                times = process.cpu_times()
                readings[name] = times.user + times.system
            except psutil.Error:
                readings[name] = float("nan")
        return readings

    def elapsed(self) -> dict[str, float]:
        now = self._read()
        return {name: now[name] - self.start[name] for name in now}


def cores_used(runs: Sequence[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Per process, the median over runs of (CPU seconds, wall seconds) of CPU s / wall s."""
    names = runs[0][0] if runs else {}
    return {name: median([cpu_s[name] / wall_s for cpu_s, wall_s in runs]) for name in names}


def describe_cores(cores: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in cores.items())
