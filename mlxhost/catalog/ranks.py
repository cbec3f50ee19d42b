"""A model served by a group of MLX ranks: its options, their checks, and `mlx.launch`'s command.

A [[model]] table with `ranks = N` (N > 1) is served by N processes started by MLX's own launcher,
`mlx.launch`, which places them (on this machine, or over ssh from a hostfile) and wires up the
collectives of the `backend` ("ring": TCP over Ethernet or Thunderbolt; "jaccl": RDMA over
Thunderbolt 5). Rank 0 serves the worker socket and runs the engine; the others follow it
(mlxhost/worker/engine/group.py). The model is split by `sharding`: "tensor" (every layer across the
ranks) or "pipeline" (consecutive layers per rank, for the architectures mlx-lm pipelines).

Every option is checked before anything starts, with an error that names it. Nothing here imports
MLX: the hostfile is read here in mlx.launch's format (a list of hosts, or an object with "hosts",
"backend" and "envs"), and whether the architecture splits the asked way is checked by a short
worker-side process (`mlxhost.worker.engine.sharding`).
"""

from __future__ import annotations

import ipaddress
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio

from mlxhost.runtime.children import python_module

__all__ = [
    "BACKENDS",
    "SHARDINGS",
    "GroupSpec",
    "InvalidGroup",
    "check_sharding",
    "group_spec",
    "launch_command",
]

BACKENDS = ("ring", "jaccl", "jaccl-ring")
SHARDINGS = ("tensor", "pipeline")
MAX_RANKS = 64


class InvalidGroup(ValueError):
    """A group option that cannot work; the message names the option."""


@dataclass(frozen=True)
class GroupSpec:
    ranks: int
    backend: str
    sharding: str = "tensor"
    hosts: tuple[str, ...] = ()  # mlx.launch's --hosts: addresses, ranks spread evenly over them
    hostfile: str | None = None  # mlx.launch's --hostfile: one rank per host entry

    @property
    def local(self) -> bool:
        """Whether every rank runs on this machine (mlx.launch starts them without ssh)."""
        return self.hostfile is None and all(h == "127.0.0.1" for h in self.hosts)


def group_spec(item: dict[str, object]) -> GroupSpec | None:
    """The group a [[model]] table asks for; None for a single worker. InvalidGroup names the option."""
    ranks = item.get("ranks", 1)
    if type(ranks) is not int or not 1 <= ranks <= MAX_RANKS:
        raise InvalidGroup(f"'ranks' must be an integer from 1 to {MAX_RANKS}")
    backend = item.get("backend")
    hosts = item.get("hosts")
    hostfile = item.get("hostfile")
    sharding = item.get("sharding")
    if ranks == 1:
        given = [name for name in ("backend", "hosts", "hostfile", "sharding") if item.get(name) is not None]
        if given:
            raise InvalidGroup(f"'{given[0]}' is for a model served by several ranks: set 'ranks' too")
        return None
    if sharding is None:
        sharding = "tensor"
    if sharding not in SHARDINGS:
        raise InvalidGroup(f"'sharding' must be one of {', '.join(SHARDINGS)}, not {sharding!r}")
    if hosts is not None and hostfile is not None:
        raise InvalidGroup("'hosts' and 'hostfile' both place the ranks: give one of them")
    file_backend = None
    if hostfile is not None:
        if not isinstance(hostfile, str) or not hostfile:
            raise InvalidGroup("'hostfile' must be the path of an mlx.launch hostfile")
        entries, file_backend = _read_hostfile(Path(hostfile).expanduser())
        if len(entries) != ranks:
            raise InvalidGroup(f"'hostfile' {hostfile} lists {len(entries)} hosts, one per rank, but 'ranks' is {ranks}")
        hostfile = str(Path(hostfile).expanduser().resolve())
    if backend is None:
        backend = file_backend
    if backend is None:
        raise InvalidGroup(f"'ranks' = {ranks} needs a 'backend': {', '.join(BACKENDS)}")
    if backend not in BACKENDS:
        raise InvalidGroup(f"'backend' must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend.startswith("jaccl") and hostfile is None:
        raise InvalidGroup(f"'backend' {backend} needs a 'hostfile' naming each host's RDMA devices")
    addresses: tuple[str, ...] = ()
    if hostfile is None:
        if hosts is None:
            hosts = ["127.0.0.1"]
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
            raise InvalidGroup("'hosts' must be a list of addresses")
        if ranks % len(hosts):
            raise InvalidGroup(f"'ranks' = {ranks} does not spread evenly over the {len(hosts)} 'hosts'")
        for host in hosts:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                # The ring backend connects the ranks by address; mlx.launch refuses names.
                raise InvalidGroup(f"'hosts' must be IP addresses (the ring backend's), not {host!r}") from None
        addresses = tuple(hosts)
    return GroupSpec(ranks, backend, sharding, addresses, hostfile)


def _read_hostfile(path: Path) -> tuple[list[dict[str, object]], str | None]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InvalidGroup(f"'hostfile' {path} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InvalidGroup(f"'hostfile' {path} is not JSON: {exc}") from None
    backend = None
    if isinstance(data, dict):
        backend = data.get("backend") or None
        data = data.get("hosts")
        if backend is not None and not isinstance(backend, str):
            raise InvalidGroup(f"'hostfile' {path}: its \"backend\" must be a string")
    if not isinstance(data, list) or not data:
        raise InvalidGroup(f"'hostfile' {path} must list hosts: [{{\"ssh\": ..., \"ips\": [...]}}, ...]")
    for number, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("ssh"), str) or not entry["ssh"]:
            raise InvalidGroup(f"'hostfile' {path}: host {number} needs an \"ssh\" name")
        ips = entry.get("ips", [])
        if not isinstance(ips, list) or not all(isinstance(ip, str) for ip in ips):
            raise InvalidGroup(f"'hostfile' {path}: host {number}'s \"ips\" must be a list of addresses")
    return data, backend


def launch_command(group: GroupSpec, port: int, worker: list[str] | None = None) -> list[str]:
    """`mlx.launch` starting the worker on every rank; the ring's ports start at `port`."""
    launcher = Path(sys.executable).parent / "mlx.launch"  # MLX's console script, beside Python
    command = [str(launcher) if launcher.exists() else "mlx.launch", "--backend", group.backend]
    if group.hostfile is not None:
        command += ["--hostfile", group.hostfile]
    else:
        command += ["--hosts", ",".join(group.hosts), "--repeat-hosts", str(group.ranks // len(group.hosts))]
    command += ["--starting-port", str(port), "--python", sys.executable, "--"]
    return command + (worker or python_module("mlxhost.worker")[1:])


async def check_sharding(model_path: Path, group: GroupSpec) -> None:
    """InvalidGroup naming 'sharding' when the model's architecture cannot be split that way."""
    command = python_module("mlxhost.worker.engine.sharding", str(model_path), group.sharding)
    done = await anyio.run_process(command, check=False)
    if done.returncode == 0:
        return
    said = (done.stdout or done.stderr).decode(errors="replace").strip().splitlines()
    why = said[-1] if said else f"the check exited with status {done.returncode}"
    raise InvalidGroup(f"'sharding' = \"{group.sharding}\": {why}")
