"""What one worker runs as: one interpreter, or a group of MLX ranks started by `mlx.launch`.

`WorkerProcess` (`mlxhost.host.workers.process`) runs either the same way; a `Shape` is the part
that differs: the command, whether a warm standby can stand in, how a ready line is checked, how
the worker is asked to stop or killed, what is left to kill once it exited, and how its exit reads.

A group (`mlxhost.catalog.ranks`): the process is mlx.launch, its ranks on this machine share its process
group, rank 0's ready line says where each rank runs, and mlx.launch says on stderr how each rank
ended (it exits 0 whatever its ranks did). A shape holds what one spawn said, so each spawn gets its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
from typing import Any, Protocol

import anyio.abc

from mlxhost.catalog.ranks import GroupSpec, launch_command
from mlxhost.wire.launch import EXIT_GROUP_BROKEN, HOST_PID, ReadyLine

__all__ = ["RANK_ENDED", "Shape", "SingleWorker", "WorkerGroup", "free_ports", "shape_of"]

# What mlx.launch says on stderr as each rank of a group ends other than cleanly.
RANK_ENDED = re.compile(r"Node with rank (?P<rank>\d+) (?:exited with code (?P<code>-?\d+)|was killed)")


class Shape(Protocol):
    """How one spawn of a worker is started, signalled and read: the part a group does its own way."""

    takes_standby: bool  # whether a warm standby (one interpreter) can be the worker
    ranks: list[dict[str, Any]]  # where each rank runs ({"rank", "host", "pid"}), once ready

    def command(self, worker: list[str]) -> tuple[list[str], dict[str, str] | None]:
        """The argv to spawn, from the worker's own, and its environment (None: the parent's)."""
        ...

    def accept(self, ready: ReadyLine) -> str | None:
        """Why a ready line that answers the launch record is still refused; None if accepted."""
        ...

    def stderr_line(self, line: str) -> None:
        """A line the process wrote on stderr (it is the worker's log as well)."""
        ...

    def kill(self, process: anyio.abc.Process) -> None:
        """SIGKILL the worker (ProcessLookupError if it is gone)."""
        ...

    def terminate(self, process: anyio.abc.Process) -> None:
        """Ask the worker to shut down: it finishes what it runs within its `shutdown_grace`."""
        ...

    def reap(self, pid: int) -> None:
        """Once the process `pid` exited: end whatever it left running."""
        ...

    def exit_code(self, code: int | None) -> tuple[int | None, str | None]:
        """The exit code (negative: the signal) that says how it ended, and why, when known here."""
        ...


class SingleWorker:
    """One interpreter: it is the worker, and its exit is the worker's."""

    takes_standby = True

    def __init__(self) -> None:
        self.ranks: list[dict[str, Any]] = []

    def command(self, worker: list[str]) -> tuple[list[str], dict[str, str] | None]:
        return worker, None

    def accept(self, ready: ReadyLine) -> str | None:
        return None

    def stderr_line(self, line: str) -> None:
        pass

    def kill(self, process: anyio.abc.Process) -> None:
        process.kill()

    def terminate(self, process: anyio.abc.Process) -> None:
        process.terminate()

    def reap(self, pid: int) -> None:
        pass

    def exit_code(self, code: int | None) -> tuple[int | None, str | None]:
        return code, None


class WorkerGroup:
    """`mlx.launch` and its ranks: rank 0 serves, the others follow it."""

    takes_standby = False  # a standby is one interpreter: a group is started whole by mlx.launch

    def __init__(self, group: GroupSpec) -> None:
        self.group = group
        self.ranks: list[dict[str, Any]] = []
        self._rank_exits: list[tuple[int, int | None]] = []  # (rank, code or -signal), as mlx.launch says

    def command(self, worker: list[str]) -> tuple[list[str], dict[str, str] | None]:
        command = launch_command(self.group, free_ports(self.group.ranks), worker[1:])
        return command, {**os.environ, HOST_PID: str(os.getpid())}

    def accept(self, ready: ReadyLine) -> str | None:
        self.ranks = list(ready.ranks)
        if len(self.ranks) != self.group.ranks:
            return f"its ready line names {len(self.ranks)} ranks, not {self.group.ranks}"
        return None

    def stderr_line(self, line: str) -> None:
        if ended := RANK_ENDED.search(line):
            code = ended.group("code")
            self._rank_exits.append((int(ended.group("rank")), None if code is None else int(code)))

    def kill(self, process: anyio.abc.Process) -> None:
        # mlx.launch and every rank on this machine: one process group (its own session).
        # Ranks mlx.launch reached over ssh lose their connection with it.
        os.killpg(process.pid, signal.SIGKILL)

    def terminate(self, process: anyio.abc.Process) -> None:
        # Rank 0 shuts down as a single worker does and closes the followers; mlx.launch
        # itself would just die of a SIGTERM, leaving its ranks running.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.ranks:
                os.kill(self.ranks[0]["pid"], signal.SIGTERM)
            else:
                self.kill(process)

    def reap(self, pid: int) -> None:
        # No rank outlives the group: whatever mlx.launch left running on this machine.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def exit_code(self, code: int | None) -> tuple[int | None, str | None]:
        if not self._rank_exits:
            return code, None
        # mlx.launch exits 0 whatever its ranks did: the first rank to end says how (not
        # rank 0 leaving because another had gone, whichever mlx.launch saw first).
        causes = [e for e in self._rank_exits if e[1] != EXIT_GROUP_BROKEN] or self._rank_exits
        rank, code = causes[0]
        how = "was killed" if code is None else f"exited with {_how(code)}"
        return code, f"rank {rank} {how}"


def shape_of(group: GroupSpec | None) -> Shape:
    """A fresh shape for one spawn of a model's worker: a group's when it has one."""
    return SingleWorker() if group is None else WorkerGroup(group)


def _how(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports free on this machine now, for the ring backend."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("", 0))
            first = probe.getsockname()[1]
        if first + count > 65536:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(first, first + count):
                held.append(socket.socket())
                held[-1].bind(("", port))
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
        return first
    raise OSError("no run of free ports for the group's ranks")
