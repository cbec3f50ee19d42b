"""`scripts/bench` runs end to end and writes every figure the README's table is made of."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_benchmark_runs_and_writes_its_ratios(tmp_path: Path) -> None:
    report = tmp_path / "bench.json"
    command = [
        sys.executable, "scripts/bench", "--smoke", "--concurrency", "1,4", "--ttft-requests", "2",
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
    # The in-process host's model load, from its ready record (the parent's says none).
    assert data["recovery"]["startup"]["in_process_load_s"] > 0
    assert data["rss_mb"]["parent"] > 0 and data["rss_mb"]["worker"] > 0
    # Every mlxhost request after the first few found its prompt in the worker's prompt cache.
    assert data["cached_prompt_tokens"]["isolated"]
    # 8 streams, half of them under a JSON schema that cannot close, against 8 free ones: every
    # stream ran to max_tokens, so the two totals compare.
    constrained = data["constrained"]
    assert constrained["error"] is None and data["constrained_vs_free"] > 0
    assert constrained["tokens_per_stream"] == {"free": "32", "mixed_free": "32", "mixed_constrained": "32"}
    assert data["grammar_compile_ms"]["tool"] > 0 and data["grammar_compile_ms"]["cold"] > 0
    assert data["targets"]["constrained_vs_free_min"] == 0.9
    # A fine-tune as a job against mlx_lm.lora run directly, on the same batches; serving around a job.
    assert data["finetune_vs_direct"] > 0 and data["serving_after_job_vs_before"] > 0
    finetune = data["jobs"]["finetune"]
    assert finetune["direct"]["iterations_per_s"] > 0 and finetune["mlxhost"]["iterations_per_s"] > 0
    assert finetune["same_tokens_per_report"]
    assert data["jobs"]["serving"]["before_tok_s"] > 0 and data["jobs"]["serving"]["after_tok_s"] > 0
    assert data["targets"]["finetune_vs_direct_min"] == 0.95
    # Recovery against the model's load time (the respawned worker's own), the older target beside it.
    assert data["recovery"]["model_load_s"] > 0 and data["targets"]["recovery_slack_s"] == 0.3
    assert data["targets"]["recovery_ok_vs_worker_ready"] in (True, False)
    # The closed loop: raw BatchGenerator and the isolated server with every finished row replaced
    # at once, at each concurrency of the run; where the raw steps went; the client's CPU.
    closed = data["closed_loop"]["by_concurrency"]
    assert set(closed) == {"c1", "c4"}
    for level in closed.values():
        kinds = ("all_at_once", "raw_tokens", "raw_staggered", "raw_text", "isolated")
        assert all(level["tok_s"][kind] > 0 for kind in kinds)
        # The target's ratio: each isolated run against the raw runs right before and after it.
        assert level["paired_ratios"] and level["isolated_vs_raw_all_at_once_tokens_only"] > 0
        assert level["isolated_vs_raw_all_at_once_medians"] > 0
        assert level["cores"]["isolated"]["client"] >= 0 and level["cores"]["isolated"]["worker"] > 0
        assert level["steps"]["raw_tokens"]["steps"] > 0
    assert data["closed_loop_isolated_vs_raw_tokens_only"]["c4"] > 0
    assert data["targets"]["closed_loop_isolated_vs_raw_min"] == 0.8
    # The agent scenario (--quick: 4 turns, one after a worker kill, one after a host restart).
    agent = data["agent"]
    events = [turn["event"] for turn in agent["turns"]]
    assert events == ["first", "warm", "warm", "warm", "after_kill", "after_restart"]
    for turn in agent["turns"]:
        assert all(turn["ttft_ms"][path] > 0 for path in ("raw", "mlx_lm_server", "mlxhost"))
        assert turn["prompt_tokens"]["mlxhost"] > 0
    # Each turn re-sends the whole conversation: the prompt only grows.
    lengths = [turn["prompt_tokens"]["mlxhost"] for turn in agent["turns"]]
    assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths)
    assert agent["turns"][1]["hit_rate"]["mlxhost"] > 0  # the previous turn's prefix, from memory
    assert data["agent_disk_bytes"] >= 0 and "after_restart" in data["agent_ttft_vs_cold"]
    assert data["targets"]["agent_ttft_vs_cold_max"] == 0.3
    assert "targets:" in run.stdout
    assert "managed jobs" in run.stdout
    assert "constrained decoding" in run.stdout
    assert "closed loop" in run.stdout and "agent scenario" in run.stdout


@pytest.mark.slow
def test_constrained_decoding_alone_forces_calls_in_the_demo_familys_syntax(tmp_path: Path) -> None:
    report = tmp_path / "constrained.json"
    command = [
        sys.executable, "scripts/bench", "--constrained-only", "--family", "qwen3_coder", "--smoke",
        "--max-tokens", "32", "--json", str(report),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    data = json.loads(report.read_text())
    constrained = data["constrained"]
    # The server forced the family's XML call (the check requests passed) and every stream, free or
    # under the forced call, ran to max_tokens: the two totals compare.
    assert constrained["error"] is None and data["constrained_vs_free"] > 0
    assert constrained["tokens_per_stream"] == {"free": "32", "mixed_free": "32", "mixed_constrained": "32"}
    settings = constrained["settings"]
    assert settings["family"] == "qwen3_coder" and settings["response_format"] is None
    assert settings["forced_call"]["tool_choice"] == {"type": "function", "function": {"name": "write_text"}}
    # The free streams list the same tool, not to be called: every stream has the same prompt.
    assert settings["free_fields"] == {"tools": settings["forced_call"]["tools"], "tool_choice": "none"}
    assert data["grammar_compile_ms"]["tool"] > 0
    assert data["targets"]["constrained_vs_free_min"] == 0.9
    assert "forced call in qwen3_coder syntax" in run.stdout


def test_the_bench_passes_its_admin_token_as_one_word_that_is_never_an_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    # The package is `bench` with scripts/ on the path, as `python scripts/bench` runs it.
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    bench = importlib.import_module("bench.hosts")
    # token_urlsafe starts with '-' one time in 64, and argparse then reads it as an option.
    assert not any(bench.new_admin_token().startswith("-") for _ in range(2000))
    assert bench.admin_token_option("-abc") == "--admin-token=-abc"
    assert bench.admin_token_option() == f"--admin-token={bench.ADMIN_TOKEN}"
