"""The soak in short: scripts/soak.py for half a minute, with worker kills and leaving clients."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


@pytest.mark.slow
def test_a_short_soak_leaks_no_file_descriptors_and_fails_no_client(tiny_model: Path, tmp_path: Path) -> None:
    report_path = tmp_path / "soak.json"
    run = subprocess.run(
        [
            sys.executable, str(SOAK), "--model", str(tiny_model), "--seconds", "20", "--warmup", "10",
            "--kill-every", "7", "--rss-limit", "0.15", "--json", str(report_path),
        ],
        capture_output=True, text=True, timeout=180,
    )
    report = json.loads(report_path.read_text())
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert report["kills"] >= 2 and report["outcomes"].get("completed", 0) > 0
    assert report["outcomes"].get("left", 0) > 0 and not report["failures"]
    assert report["fd_growth"] <= 0 and report["host_exit"] == 0
