"""Readings of the servers' processes through psutil: resident memory, CPU seconds over a run
(user + system) turned into the cores a process kept busy, and waiting for a host to go idle."""

from __future__ import annotations

import time
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


QUIET_CORES = 0.1  # a process tree using less than this is idle
QUIET_SAMPLE_S = 0.5
QUIET_TIMEOUT_S = 30.0


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants alive now."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return total
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def wait_quiet(pid: int, timeout: float = QUIET_TIMEOUT_S) -> float:
    """Wait until a host's process tree is idle (a new host spawns a standby interpreter, and a
    worker may write its prompt caches to disk, after it answered): on two cores that work would
    land on whatever is measured next. Returns the seconds waited; gives up after `timeout`."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        before = tree_cpu_s(pid)
        time.sleep(QUIET_SAMPLE_S)
        if tree_cpu_s(pid) - before < QUIET_CORES * QUIET_SAMPLE_S:
            break
    return time.monotonic() - began
