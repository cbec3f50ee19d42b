"""The state directory on a real host: private whatever it was before, and refused, by name, when
it cannot be written.

It holds prompts (cache files are token ids that decode to the prompt), the job store and job
logs: after a host has served a request and run a job, nothing in it is open to other users.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mlxhost.testing import RunningHost, start_host
from tests.e2e.test_jobs import submit, wait_job
from tests.e2e.test_prompt_cache_disk import ask, conversation, wait_written
from tests.filesystems import small_tmpfs

pytestmark = pytest.mark.slow


def open_to_others(root: Path) -> list[str]:
    """What under `root` a user other than its owner could read or enter.

    Every folder (`root` itself included) must be 0700: then nothing beneath is reachable. The
    files the host writes are 0600 as well; a copy of the base model's files in a job's output
    keeps the model's own mode, behind its 0700 folders.
    """
    written = ("*.safetensors", "jobs.db*", "lock", "log.jsonl", "stderr.log", "spec.json")
    loose = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        checked = stat.S_ISDIR(mode) or any(path.match(pattern) for pattern in written)
        if checked and stat.S_IMODE(mode) & 0o077:
            loose.append(f"{path.relative_to(root)} {stat.S_IMODE(mode):o}")
    return loose


def serve_a_cached_prompt(host: RunningHost) -> None:
    with host.client() as client:
        ask(client, conversation())
    wait_written(host, 1)


def test_an_existing_open_state_dir_is_made_private_with_all_the_host_writes(tiny_model: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)  # whatever the test's umask
    with start_host("--model", str(tiny_model), "--state-dir", str(state)) as host:
        serve_a_cached_prompt(host)
        with host.http(timeout=60.0) as admin:
            done = wait_job(admin, submit(admin, kind="quantize", model="tiny", group_size=32)["id"])
        assert done["state"] == "succeeded", done
    log = "".join(host.log)
    assert f"state directory {state} was mode 755: now 0700" in log
    assert list(state.glob("prompt-cache/*/*.safetensors")) and (state / "jobs.db").exists()
    assert list(state.glob("jobs/*/log.jsonl"))
    assert open_to_others(state) == []


def test_in_process_the_state_dir_is_private_too(tiny_model: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o755)
    with start_host("--model", str(tiny_model), "--in-process", "--state-dir", str(state)) as host:
        serve_a_cached_prompt(host)
    assert list(state.glob("prompt-cache/*/*.safetensors"))
    assert open_to_others(state) == []


def test_a_read_only_state_dir_is_refused_naming_the_option(tiny_model: Path, tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "ro", 1024, read_only=True) as state:
        result = subprocess.run(
            [sys.executable, "-m", "mlxhost", "serve", "--model", str(tiny_model), "--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"mlxhost: the state directory {state} (--state-dir) is read-only; name a writable one with --state-dir"
    )
    assert "Traceback" not in result.stderr
