"""`scripts/bench --pull` runs end to end: `mlxhost pull` against `hf download` from a hub on
loopback, and a host serving while it pulls, and writes every figure of its report."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.slow
def test_the_pull_bench_compares_both_clients_and_serving_while_the_host_pulls(tmp_path: Path) -> None:
    report = tmp_path / "pull.json"
    command = [
        sys.executable,
        "scripts/bench",
        "--pull",
        "--smoke",
        "--max-tokens",
        "32",
        "--json",
        str(report),
    ]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads(report.read_text())
    pull = data["pull"]
    assert pull["skipped"] is None, pull["skipped"]
    repo = pull["repo"]
    assert "filler.safetensors" in repo["files"] and "config.json" in repo["files"]
    assert repo["filler_mb"] == 16 and repo["bytes"] > 16 * 2**20

    # Both clients fetched the repo's files, no more and no less, into empty caches.
    throughput = pull["throughput"]
    assert throughput["same_files"] is True
    runs = pull["runs"]
    assert {r["path"] for r in runs} == {"mlxhost", "hf"}
    for r in runs:
        assert r["files"] == repo["files"] and r["bytes"] == repo["bytes"]
        assert finite(r["seconds"]) and r["mb_per_s"] > 0
    for key in (
        "mlxhost_mb_per_s",
        "hf_mb_per_s",
        "mlxhost_s",
        "hf_s",
        "mlxhost_vs_hf",
        "mlxhost_cores",
        "hf_cores",
    ):
        assert finite(throughput[key]) and throughput[key] > 0, key
    assert throughput["commands"]["mlxhost"] == ["python", "-m", "mlxhost", "pull", "REPO", "--quiet"]
    assert throughput["commands"]["hf"][-3:] == ["download", "REPO", "--quiet"]

    # Serving with and without the host pulling; the host's pull fetched the repo's files too.
    serving = pull["serving"]
    for key in (
        "decode_tok_s_without", "decode_tok_s_with", "with_vs_without", "total_tok_s_without",
        "total_tok_s_with", "window_s_without", "window_s_with", "pull_mb_per_s_while_serving",
        "pull_s_while_serving", "window_target_s", "streams_per_window",
    ):  # fmt: skip
        assert finite(serving[key]) and serving[key] > 0, key
    assert serving["lanes"] == 4 and serving["max_tokens"] == 32
    assert serving["pull_same_files"] is True
    assert serving["windows_with_pull"] == 1
    windows = pull["windows"]
    assert sorted(w["pulling"] for w in windows) == [False, True]
    for w in windows:
        assert all(tokens == 32 for tokens in w["tokens"]) and finite(w["decode_tok_s"])
    assert next(w for w in windows if w["pulling"])["job_state_at_end"] is not None

    assert data["pull_vs_hf"] == throughput["mlxhost_vs_hf"]
    assert data["serving_while_pulling"] == serving["with_vs_without"]
    targets = data["targets"]
    assert targets["pull_vs_hf_min"] == 0.95 and targets["serving_while_pulling_min"] == 0.9
    assert targets["pull_ok"] in (True, False) and targets["serving_while_pulling_ok"] in (True, False)
    assert data["settings"]["only"] == "pull"
    assert "mlxhost / hf" in run.stdout and "with / without" in run.stdout
