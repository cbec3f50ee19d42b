"""`scripts/bench.py` runs end to end and writes every figure the README's table is made of."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_benchmark_runs_and_writes_its_ratios(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    command = [
        sys.executable, "scripts/bench.py", "--quick", "--concurrency", "1,4", "--ttft-requests", "2",
        "--max-tokens", "32", "--json", str(report), "--chart", str(tmp_path / "bench.png"),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads(report.read_text())
    ratios = data["ratios"]
    for path in ("isolated_vs_raw", "isolated_vs_mlx_lm_server", "in_process_vs_raw"):
        assert ratios[path]["c1"] > 0 and ratios[path]["c4"] > 0, path
    for path in ("raw", "isolated"):
        assert data["ttft_ms"]["p50"][path] > 0
    assert data["cancel_ms"]["p50"] >= 0
    assert data["recovery_s"] > 0
    assert data["rss_mb"]["parent"] > 0 and data["rss_mb"]["worker"] > 0
    # Every mlxhost request after the first few found its prompt in the worker's prompt cache.
    assert data["cached_prompt_tokens"]["isolated"]
    assert "targets:" in run.stdout
