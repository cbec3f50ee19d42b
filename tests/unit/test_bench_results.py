"""The bench's result records write the JSON layout `scripts/bench/results` documents."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def bench_on_path() -> None:
    # The package is `bench` with scripts/ on the path, as `python scripts/bench` runs it.
    sys.path.insert(0, str(REPO / "scripts"))


def test_a_path_summary_writes_its_runs_with_their_rates_and_omits_what_it_lacks() -> None:
    from bench.results.serving import Batched, SingleStream
    from bench.runs import BatchRun, StreamRun

    run = StreamRun(tokens=3, ttft_s=0.01, first_to_last_s=0.02, total_s=0.03, text_frames=3)
    c1 = SingleStream(1.0, 2.0, 3.0, 1, 2.0, 5.0, 5.0, [3], [run], [10.0]).to_json()
    assert list(c1) == [
        "decode_tok_s", "ttft_ms_p50", "ttft_ms_p95", "ttft_samples", "ttft_ms_p50_c1_runs", "e2e_tok_s",
        "total_tok_s", "tokens", "runs", "ttft_requests_ms",
    ]  # fmt: skip
    assert c1["runs"] == [
        {"tokens": 3, "ttft_s": 0.01, "first_to_last_s": 0.02, "total_s": 0.03, "text_frames": 3,
         "decode_tok_s": run.decode_tok_s, "e2e_tok_s": run.e2e_tok_s}
    ]  # fmt: skip
    batch = BatchRun(tokens=[4, 4], wall_s=0.5, ttft_s=[0.1, 0.2])
    served = Batched(16.0, 100.0, 200.0, [[4, 4]], [batch]).to_json()
    assert "tokens_only_total_tok_s" not in served  # only raw has it
    assert served["runs"] == [{"tokens": [4, 4], "wall_s": 0.5, "ttft_s": [0.1, 0.2], "total_tok_s": 16.0}]
    raw = Batched(16.0, 100.0, 200.0, [[4, 4]], [batch], tokens_only_total_tok_s=20.0).to_json()
    assert raw["tokens_only_total_tok_s"] == 20.0


def test_the_old_names_stay_as_aliases_of_the_isolated_figures() -> None:
    from bench.results.serving import Ratios, TTFTByPath

    isolated = {"c1": 0.9, "c1_e2e": 0.8, "ttft_p50": 1.5}
    ratios = Ratios(isolated, {}, {}, {}, {}, {}).to_json()
    assert list(ratios) == [
        "isolated_vs_raw", "isolated_vs_mlx_lm_server", "in_process_vs_raw", "in_process_vs_mlx_lm_server",
        "mlx_lm_server_vs_raw", "isolated_vs_in_process", "mlxhost_vs_raw",
    ]  # fmt: skip
    assert ratios["mlxhost_vs_raw"] == isolated
    ttft = TTFTByPath(raw=4.0, mlx_lm_server=7.0, in_process=8.0, isolated=10.0).to_json()
    assert ttft == {"raw": 4.0, "mlx_lm_server": 7.0, "in_process": 8.0, "isolated": 10.0, "mlxhost": 10.0}


def test_a_recovery_only_document_has_the_documented_keys_and_no_nan() -> None:
    from bench.raw import PromptProbe
    from bench.recovery import Recovery
    from bench.results.document import PartDocument
    from bench.results.measurements import RecoverySummary
    from bench.results.serving import Machine, Model, PartSettings, Startup, Versions

    kill = Recovery(
        killed_pid=10, new_pid=11, worker_ready_s=1.2, respawn_ready_s=None, recovery_s=0.5,
        warm_request_s=0.1, attempts={"200": 1}, retry_after=[], exit_seen_at_s=0.03, respawned_at_s=0.04,
        ready_at_s=0.4, model_load_s=0.3,
    )  # fmt: skip
    recovery = RecoverySummary(
        recovery_s=0.5, worker_ready_s=1.2, respawn_ready_s=math.nan, model_load_s=0.3,
        model_load_from="worker", slack_s=0.3, meets_target=True, ready_slack_s=1.0, meets_ready_target=True,
        runs=[kill], startup=Startup(raw_load_s=0.1, in_process_load_s=None, worker_import_s=0.9),
    )  # fmt: skip
    document = PartDocument(
        Machine("Linux", "x86_64", None, 2, "3.12", "Device(cpu, 0)", [1.0, 1.0, 1.0]),
        Versions("0.32", "0.32", "abc1234"),
        Model("tiny", "tiny", 205_000, 0.1, "hello", 5, PromptProbe(True, True, 1.0)),
        PartSettings(32, 1, [1, 4], 0.0, 32, True, "recovery", False),
        recovery,
    ).to_json()
    assert list(document) == [
        "machine", "versions", "model", "settings", "recovery_s", "worker_ready_s", "recovery", "targets",
    ]  # fmt: skip
    assert document["model"]["reply_probe"] == {
        "reaches_max_tokens": True, "first_token_visible": True, "visible_fraction": 1.0,
    }  # fmt: skip
    assert document["recovery"]["runs"][0]["meets_target"] is True  # a kill's verdicts beside its fields
    assert document["recovery"]["startup"]["in_process_load_s"] is None
    assert document["targets"] == {
        "recovery_slack_s": 0.3, "model_load_s": 0.3, "recovery_ok": True, "recovery_ready_slack_s": 1.0,
        "recovery_ok_vs_worker_ready": True,
    }  # fmt: skip
    # NaN stays a float in the record; the bench writes it as null (`json_safe`).
    from bench.figures import json_safe

    assert json.loads(json.dumps(json_safe(document)))["recovery"]["respawn_ready_s"] is None
