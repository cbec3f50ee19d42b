"""What the admin API and /health show of a worker: its record, with each rank's memory read now."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any, Protocol

import psutil

from mlxhost.host.workers.requests import Requests
from mlxhost.host.workers.status import WorkerExit, WorkerState
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin import RankRecord, WorkerRecord
from mlxhost.wire.launch import MemoryReading, SpeculationReading

__all__ = ["Supervised", "rank_records", "worker_record"]


class Supervised(Protocol):
    """What a record is made of: a supervisor's readings (a Protocol, so no circle with it)."""

    id: str
    spec: ModelSpec
    state: WorkerState
    pid: int | None
    socket_path: Path
    restarts: int
    requests: Requests
    ready_since: float | None
    ready_seconds: float | None
    last_exit: WorkerExit | None
    memory: MemoryReading | None
    speculation: SpeculationReading | None


def worker_record(supervisor: Supervised, ranks: list[dict[str, Any]]) -> WorkerRecord:
    """The record of `supervisor`'s worker; `ranks` are its group's ({"rank", "host", "pid"})."""
    now = time.monotonic()
    ready_since = supervisor.ready_since
    return WorkerRecord(
        id=supervisor.id,
        model=supervisor.spec.id,
        state=supervisor.state.value,
        pid=supervisor.pid,
        socket=str(supervisor.socket_path),
        restarts=supervisor.restarts,
        in_flight=supervisor.requests.in_flight,
        uptime_s=round(now - ready_since, 3) if ready_since else None,
        ready_s=round(supervisor.ready_seconds, 3) if supervisor.ready_seconds is not None else None,
        last_exit=supervisor.last_exit.record() if supervisor.last_exit else None,
        memory=supervisor.memory,
        speculation=supervisor.speculation,
        ranks=rank_records(ranks) if ready_since is not None else (),
    )


def rank_records(ranks: list[dict[str, Any]]) -> tuple[RankRecord, ...]:
    return tuple(
        RankRecord(rank=r["rank"], host=r["host"], pid=r["pid"], rss_bytes=_rss(r["host"], r["pid"]))
        for r in ranks
    )


def _rss(host: str, pid: int) -> int | None:
    """The resident memory of a rank on this machine; None for one elsewhere, or gone."""
    if host != socket.gethostname():
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None
