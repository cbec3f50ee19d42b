"""`mlxhost models` as a user runs it: the real command over a Hugging Face cache that the real
`mlxhost pull` filled from the loopback hub (`mlxhost.testing_hub`), with and without a running
host serving one of its snapshots."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mlxhost.demo import ensure_demo_model
from mlxhost.testing import start_host
from mlxhost.testing_hub import HubServer

TINY = "mlx-community/tiny"
OTHER = "mlx-community/other"


@dataclass(frozen=True)
class Machine:
    """A user's machine: HF cache, state directory, runtime directory (where a host announces itself)."""

    env: dict[str, str]
    cache: Path
    state: Path
    commits: dict[str, str]

    def snapshot(self, repo: str) -> Path:
        return self.cache / f"models--{repo.replace('/', '--')}" / "snapshots" / self.commits[repo]


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    demo = ensure_demo_model(size="tiny")
    other = shutil.copytree(demo, tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"quantization": {"group_size": 64, "bits": 4}}))
    # Short: the host puts its sockets under the runtime directory, and a socket path is short.
    runtime = Path(tempfile.mkdtemp(prefix="mx-run-"))
    env = {
        "HF_HUB_CACHE": str(tmp_path / "cache"),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "MLXHOST_STATE_DIR": str(tmp_path / "state"),
        "XDG_RUNTIME_DIR": str(runtime),
        "COLUMNS": "80",
    }
    try:
        with HubServer() as hub:
            commits = {TINY: hub.add_repo(TINY, demo), OTHER: hub.add_repo(OTHER, other)}
            for repo in commits:
                done = mlxhost("pull", "--quiet", repo, env=env | {"HF_ENDPOINT": hub.endpoint})
                assert done.returncode == 0, done.stderr
        yield Machine(env, tmp_path / "cache", tmp_path / "state", commits)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def mlxhost(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dropped = ("HF_TOKEN", "MLXHOST_ADMIN_TOKEN", "HF_ENDPOINT")
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    command = [sys.executable, "-m", "mlxhost", *args]
    return subprocess.run(command, capture_output=True, text=True, env=clean | env, timeout=60)


def listing(machine: Machine, *args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    done = mlxhost("models", "--json", *args, env=machine.env | (env or {}))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_models_listed_and_removed(machine: Machine) -> None:
    shown = mlxhost("models", env=machine.env)
    assert shown.returncode == 0, shown.stderr
    header, *rows = shown.stdout.split("\n\n")[0].splitlines()
    assert header.split() == ["ID", "REV", "SIZE", "ARCH", "BITS", "LOADS", "SERVED", "LAST", "USED"]
    assert all(len(line) <= 80 for line in [header, *rows])
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells[OTHER][:7] == [OTHER, machine.commits[OTHER][:7], "866K", "llama", "4", "yes", "-"]
    assert cells[TINY][:7] == [TINY, machine.commits[TINY][:7], "866K", "llama", "-", "yes", "-"]
    assert f"  HF cache:  {machine.cache}" in shown.stdout and f"  state dir: {machine.state}" in shown.stdout

    models = listing(machine)
    assert [m["id"] for m in models] == [OTHER, TINY]
    tiny = models[1]
    assert tiny["path"] == str(machine.snapshot(TINY)) and tiny["revision"] == machine.commits[TINY][:12]
    assert tiny["loadable"] is True and tiny["source"] == "hf-cache" and tiny["served"] is None
    assert tiny["size_bytes"] > 800_000 and tiny["quantization_bits"] is None
    assert models[0]["quantization_bits"] == 4

    unknown = mlxhost("models", "rm", "org/nothing", env=machine.env)
    assert unknown.returncode == 2
    said = "no model 'org/nothing' on this machine; the models here: mlx-community/other, mlx-community/tiny"
    assert said in unknown.stderr

    removed = mlxhost("models", "rm", TINY, env=machine.env)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith(f"removed {TINY} from the Hugging Face cache: freed ")
    assert not (machine.cache / "models--mlx-community--tiny").exists()
    assert [m["id"] for m in listing(machine)] == [OTHER]


def test_a_served_snapshot_is_not_removed_until_its_host_stops(machine: Machine) -> None:
    snapshot = machine.snapshot(TINY)
    host_env = machine.env | {"HF_HUB_OFFLINE": "1"}
    with start_host("--model", str(snapshot), "--model-id", "tiny", env=host_env) as host:
        # The host announced itself in the runtime directory: `models` finds it there, no flags.
        deadline = time.monotonic() + 30
        while True:
            tiny = next(m for m in listing(machine) if m["id"] == TINY)
            if tiny["served"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert tiny["served"] is True and tiny["host_model"] == "tiny"
        other = next(m for m in listing(machine) if m["id"] == OTHER)
        assert other["served"] is False and other["host_model"] is None
        # --url, and the admin token from the environment, as a script on another shell would.
        by_url = listing(machine, "--url", host.url or "", env={"MLXHOST_ADMIN_TOKEN": host.admin_token})
        assert next(m for m in by_url if m["id"] == TINY)["served"] is True

        table = mlxhost("models", env=machine.env)
        served = {row.split()[0]: row.split()[6] for row in table.stdout.split("\n\n")[0].splitlines()[1:]}
        assert served == {TINY: "yes", OTHER: "no"}

        refused = mlxhost("models", "rm", TINY, env=machine.env)
        assert refused.returncode == 1
        assert f"{TINY} is served by the host at " in refused.stderr
        assert f"(pid {host.pid}) as model tiny" in refused.stderr
        assert f"Stop that host (kill {host.pid})" in refused.stderr
        assert snapshot.is_dir()

        # A token that does not open the admin API: the host is there, but cannot say; nothing is removed.
        wrong_token = machine.env | {"MLXHOST_ADMIN_TOKEN": "nope"}
        wrong = mlxhost("models", "--url", host.url or "", "rm", TINY, env=wrong_token)
        assert wrong.returncode == 1 and "cannot tell whether the host at" in wrong.stderr
        assert "answered 401" in wrong.stderr
        assert snapshot.is_dir()

        # A model the host does not serve goes while it runs.
        assert mlxhost("models", "rm", OTHER, env=machine.env).returncode == 0
    removed = mlxhost("models", "rm", TINY, env=machine.env)
    assert removed.returncode == 0, removed.stderr
    assert not snapshot.exists() and listing(machine) == []
