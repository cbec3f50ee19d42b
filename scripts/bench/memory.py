"""Memory: the resident set (psutil) of the isolated server's parent and of its worker, of the
in-process server and of mlx_lm.server, read after the throughput runs and before any kill, with
the servers idle; beside them the servers' own readings in /health, and their engine counters.
Target: the isolated parent <= 80 MB (it never imports MLX)."""

from __future__ import annotations

from typing import Any

import httpx

from bench.figures import verdict
from bench.health import engine_statistics
from bench.processes import rss_mb
from bench.results.serving import Memory
from bench.settings import MB

PARENT_RSS_TARGET_MB = 80.0


async def measure_memory(
    worker: dict[str, Any], in_process: httpx.AsyncClient, pids: dict[str, int]
) -> tuple[Memory, dict[str, Any]]:
    """RSS by process (pids: parent, in_process, mlx_lm_server), and the engine statistics of the
    two mlxhost servers. `worker` is the isolated server's, from its parent's /health."""
    in_process_health = (await in_process.get("/health")).json()
    reported = worker.get("memory") or {}
    memory = Memory(
        parent=rss_mb(pids["parent"]),
        worker=rss_mb(worker.get("pid")),
        in_process=rss_mb(pids["in_process"]),
        mlx_lm_server=rss_mb(pids["mlx_lm_server"]),
        # The servers' own readings, for comparison:
        worker_reported=reported.get("rss_bytes", 0) / MB or None,
        in_process_reported=(in_process_health.get("memory") or {}).get("rss_bytes", 0) / MB or None,
    )
    # Each server's engine counters, as its /health reports them (the host's document).
    engines = {
        "in_process": in_process_health.get("engine"),
        "isolated": await engine_statistics(worker.get("socket")),
    }
    return memory, engines


def parent_rss_ok(memory: Memory) -> bool | None:
    parent = memory.parent
    return None if parent is None else parent <= PARENT_RSS_TARGET_MB


def print_memory(memory: Memory) -> None:
    def mb(value: float | None) -> str:
        return "?" if value is None else f"{value:.1f} MB"

    print()
    print("memory (RSS, psutil, after the throughput runs):")
    target = f"target <= {PARENT_RSS_TARGET_MB:g} MB: {verdict(parent_rss_ok(memory))}"
    print(f"  isolated parent   {mb(memory.parent):>10}   {target}")
    print(
        f"  isolated worker   {mb(memory.worker):>10}   "
        f"(its own reading in /health: {mb(memory.worker_reported)})"
    )
    print(
        f"  in-process        {mb(memory.in_process):>10}   "
        f"(its own reading in /health: {mb(memory.in_process_reported)})"
    )
    print(f"  mlx_lm.server     {mb(memory.mlx_lm_server):>10}")
