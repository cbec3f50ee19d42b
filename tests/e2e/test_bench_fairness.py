"""`scripts/bench --fairness` runs end to end and writes its figures (their values are the bench's
to report, not a test's to assert: this machine is shared)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_fairness_bench_writes_both_figures(tmp_path: Path) -> None:
    report = tmp_path / "fairness.json"
    command = [sys.executable, "scripts/bench", "--fairness", "--smoke", "--json", str(report)]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads(report.read_text())
    assert len(data["behind_s"]) == len(data["beside_gap_s"]) == 1
    assert all(math.isfinite(v) and v > 0 for v in (data["behind_median_s"], data["beside_gap_median_s"]))
    assert "a one-token embeddings request behind" in run.stdout
