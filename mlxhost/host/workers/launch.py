"""Starting a worker: its command, its launch record, and what it says on its way up.

The parent accepts a worker's ready line only when it answers the launch record: the socket it
was given and this host's protocol version. Anything else is a worker from another build (or
not a worker at all), and no retry would change that.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc

from mlxhost.config import Settings
from mlxhost.catalog.spec import ModelSpec
from mlxhost.catalog.sources import model_kind, resolve_model
from mlxhost.runtime.children import python_module
from mlxhost.wire.inert import excerpt
from mlxhost.wire.launch import PROTOCOL_VERSION, WORKER_OPTIONS, LaunchRecord, ReadyLine, WorkerOptions
from mlxhost.wire.layout import state_dir

__all__ = ["MAX_LINE", "launch_record", "lines", "refusal", "worker_command"]

MAX_LINE = 1 << 20


def worker_command(settings: Settings) -> list[str]:
    """The worker's argv; ValueError for a `worker_command` that names none."""
    if settings.worker_command:
        command = shlex.split(settings.worker_command)
        if not command:
            raise ValueError("worker_command is empty")
        return command
    return python_module("mlxhost.worker")


def launch_record(spec: ModelSpec, model_path: Path, settings: Settings, socket: Path) -> LaunchRecord:
    values = {name: getattr(settings, name) for name in WORKER_OPTIONS}
    # Resolved here, so that every worker of this host files its prompt caches in the same place.
    values["state_dir"] = str(state_dir(settings))
    for name in ("max_batch", "max_tokens_limit", "kv_bits", "kv_group_size", "speculate", "draft_tokens"):
        if getattr(spec, name) is not None:
            values[name] = getattr(spec, name)
    options = WorkerOptions(**values)
    return LaunchRecord(
        worker_id=spec.id,
        socket=str(socket),
        model_path=str(model_path),
        model_id=spec.id,
        options=options,
        adapter_path=spec.adapter,
        draft_path=None if spec.draft is None else str(resolve_model(spec.draft)),
        sharding=None if spec.group is None else spec.group.sharding,
        tasks=list(model_kind(spec).tasks),
    )


def refusal(line: ReadyLine, socket: Path) -> str | None:
    """Why a ready line does not answer the launch record for `socket`; None when it does."""
    if type(line.version) is not int or line.version != PROTOCOL_VERSION:
        return (
            f"its ready line speaks protocol version {excerpt(repr(line.version))}, this host "
            f"{PROTOCOL_VERSION}: parent and worker come from different mlxhost versions"
        )
    if line.socket != str(socket):
        return f"its ready line names the socket '{excerpt(line.socket, 256)}', not its own '{socket}'"
    return None


async def lines(stream: anyio.abc.ByteReceiveStream) -> AsyncIterator[str]:
    """A worker's output, line by line; a runaway line is cut at `MAX_LINE`, not held without bound."""
    pending = b""
    while True:
        try:
            chunk = await stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            if pending:
                yield pending.decode(errors="replace")
            return
        *complete, pending = (pending + chunk).split(b"\n")
        if len(pending) > MAX_LINE:
            complete.append(pending)
            pending = b""
        for line in complete:
            yield line.decode(errors="replace").rstrip("\r")
