"""`scripts/bench --speculation` runs end to end: edit requests on the built copy model and random
questions on its base, each on a host that drafts and one that does not, and writes its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_speculation_bench_reports_both_workloads_and_drafting_changes_no_answer(tmp_path: Path) -> None:
    report = tmp_path / "speculation.json"
    command = [
        sys.executable, "scripts/bench", "--speculation", "--smoke", "--lines", "8",
        "--work", str(tmp_path / "work"), "--json", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    data = json.loads(report.read_text())
    assert data["command"] == "python scripts/bench " + " ".join(command[2:])
    assert data["settings"]["speculation_available"] and data["settings"]["copy_model"] == "built"
    assert data["settings"]["host_options"]["off"][-1] == "--speculate=off"
    for name in ("edit", "random"):
        cells = data["workloads"][name]["cells"]
        assert set(cells) == {"c1", "c4"}
        assert set(cells["c1"]["decode_tok_s"]) == {"lookup", "off", "raw", "raw_speculative"}
        assert all(rate > 0 for rate in cells["c1"]["decode_tok_s"].values())
        assert cells["c4"]["tok_s"]["lookup"] > 0 and cells["c4"]["tok_s"]["off"] > 0
        # What a client read from the stream of the host that drafts is, answer for answer, what
        # the host that does not draft sent (greedy: drafting must change no token).
        assert cells["c1"]["same_answers_lookup_off"] == "1/1"
        assert cells["c4"]["same_answers_lookup_off"] == "4/4"
    # The built copy model re-emits the file; on one stream the host drafted from the prompt and
    # kept drafts, which the usage reported.
    assert data["copy"]["greedy_copied_share"] > 0.5
    # What a wider step costs here, which bounds what speculation can gain at one stream.
    price = data["step_price"]
    assert price["width"] == 7 and price["one_token_s"] > 0 and price["ceiling"] > 0
    assert data["workloads"]["edit"]["cells"]["c1"]["drafts_kept_per_token"] > 0
    assert data["targets"]["edit_c1_min"] == 1.8 and data["targets"]["random_min"] == 0.95
    runs = data["runs"]
    assert {run["arm"] for run in runs} == {"lookup", "off", "raw", "raw_speculative"}
    assert all(answer["tokens"] > 0 for run in runs for answer in run["answers"])
    assert "targets (tok/s, lookup / off)" in done.stdout
