"""The batch-KV comparison's pure parts (`bench.batch_kv_figures`, `bench.batch_kv`): the KV bytes a
token needs from a model's config, the medians, ratios and verdicts, the tables, the JSON, and
which runs a round pairs."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
BENCH_CONFIG = {  # the bench demo model's, as make_tiny_model.py writes it
    "num_hidden_layers": 8,
    "hidden_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "torch_dtype": "float32",
}


@pytest.fixture(scope="module", autouse=True)
def bench_on_path() -> None:
    # The package is `bench` with scripts/ on the path, as `python scripts/bench` runs it.
    sys.path.insert(0, str(REPO / "scripts"))


def test_kv_bytes_per_token_are_layers_keys_and_values_heads_dimensions_and_dtype() -> None:
    from bench.batch_kv_figures import KVGeometry, kv_geometry

    bench = kv_geometry(BENCH_CONFIG)
    assert bench == KVGeometry(layers=8, kv_heads=4, head_dim=64, dtype="float32")
    assert bench.bytes_per_token == 8 * 2 * 4 * 64 * 4 == 16_384
    assert bench.own_bytes([600, 32, 32]) == 16_384 * 664
    # The tiny model's: no head_dim (hidden / heads), and float16 as two bytes.
    tiny = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    assert kv_geometry({**tiny, "torch_dtype": "float32"}).bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert kv_geometry({**tiny, "torch_dtype": "bfloat16"}).bytes_per_token == 2 * 2 * 2 * 16 * 2
    # No KV head count: as many as the query heads; a multimodal config's text_config.
    no_kv = {k: v for k, v in tiny.items() if k != "num_key_value_heads"}
    assert kv_geometry(no_kv).kv_heads == 4
    assert kv_geometry({"text_config": tiny, "torch_dtype": "float16"}).layers == 2


def test_a_config_that_does_not_say_is_an_error() -> None:
    from bench.batch_kv_figures import ConfigError, kv_geometry

    with pytest.raises(ConfigError, match="num_hidden_layers"):
        kv_geometry({"hidden_size": 64})
    with pytest.raises(ConfigError, match="int8"):
        kv_geometry({**BENCH_CONFIG, "torch_dtype": "int8"})


def run(scenario: str, generator: str, number: int, seconds: float, **more: object):  # type: ignore[no-untyped-def]
    from bench.batch_kv_figures import DecodeRun

    rows = int(more.get("rows", 8))
    kv_bytes = int(more.get("kv_bytes", 1000))  # type: ignore[call-overload]
    row_tokens = list(more.get("row_tokens", [10] * rows))  # type: ignore[call-overload]
    return DecodeRun(scenario, generator, number, rows, 10, rows * 10, seconds, kv_bytes, row_tokens)


def mixed_runs():  # type: ignore[no-untyped-def]
    # 80 tokens a run: aligned raw 80 and 40 tok/s (median 60), rows 80 and 80; mixed raw 20 and
    # 20, rows 80 and 40 (median 60).
    return [
        run("aligned", "raw", 0, 1.0), run("aligned", "rows", 0, 1.0),
        run("mixed600", "raw", 0, 4.0, kv_bytes=8 * 700), run("mixed600", "rows", 0, 1.0, kv_bytes=900),
        run("aligned", "rows", 1, 1.0), run("aligned", "raw", 1, 2.0),
        run("mixed600", "rows", 1, 2.0, kv_bytes=990, row_tokens=[610] + [42] * 7),
        run("mixed600", "raw", 1, 4.0, kv_bytes=8 * 768, row_tokens=[610] + [42] * 7),
    ]  # fmt: skip


def test_mixed_medians_ratios_and_verdicts() -> None:
    from bench.batch_kv_figures import KVGeometry, mixed_figures

    geometry = KVGeometry(1, 1, 1, "float16")  # 4 bytes a token
    f = mixed_figures(mixed_runs(), 600, 32, 8, geometry, target=0.9)
    assert f.aligned_tok_s == {"raw": pytest.approx(60.0), "rows": pytest.approx(80.0)}
    assert f.mixed_tok_s == {"raw": pytest.approx(20.0), "rows": pytest.approx(60.0)}
    assert f.mixed_vs_aligned["raw"].of_medians == pytest.approx(20 / 60)
    assert f.mixed_vs_aligned["rows"].of_medians == pytest.approx(0.75)
    assert f.mixed_vs_aligned["rows"].paired == pytest.approx(0.75)  # rounds: 1.0 and 0.5
    assert f.rows_vs_raw_aligned.of_medians == pytest.approx(80 / 60)
    assert f.rows_vs_raw_aligned.paired == pytest.approx(1.5)  # rounds: 1.0 and 2.0
    # KV: the last round's run, against its rows' own: (610 + 7 x 42) tokens x 4 bytes.
    assert f.kv_bytes == {"raw": 8 * 768, "rows": 990}
    assert f.own_kv_bytes == {"raw": 3616, "rows": 3616}
    assert f.kv_over_own["rows"] == pytest.approx(990 / 3616)
    assert (f.mixed_ok, f.no_regression_ok, f.kv_ok) == (False, True, True)


def test_kv_bits_bytes_and_speed() -> None:
    from bench.batch_kv_figures import kv_bits_figures, skipped_kv_bits

    runs = [
        run("kv_plain", "rows", 0, 1.0, kv_bytes=1000), run("kv_bits", "rows", 0, 2.0, kv_bytes=156),
        run("kv_bits", "rows", 1, 2.0, kv_bytes=156), run("kv_plain", "rows", 1, 1.0, kv_bytes=1000),
    ]  # fmt: skip
    k = kv_bits_figures(runs, "quantizable", 4, 64, 2000, 64, 8)
    assert k.bytes_ratio == pytest.approx(0.156) and k.bytes_ok is True
    assert k.quantized_tok_s == pytest.approx(40.0) and k.plain_tok_s == pytest.approx(80.0)
    assert k.tok_s_ratio.of_medians == pytest.approx(0.5) and k.tok_s_ratio.paired == pytest.approx(0.5)
    skipped = skipped_kv_bits("tiny", 4, 64, "quantized KV failed")
    assert skipped.bytes_ok is None and math.isnan(skipped.bytes_ratio)


def staggered_runs():  # type: ignore[no-untyped-def]
    return [
        run("at_once4", "raw", 0, 1.0, rows=4), run("at_once4", "rows", 0, 2.0, rows=4),
        run("staggered4", "raw", 0, 1.25, rows=4), run("staggered4", "rows", 0, 2.0, rows=4),
    ]  # fmt: skip


def test_staggered_against_all_at_once() -> None:
    from bench.batch_kv_figures import staggered_figures, staggered_rows

    s = staggered_figures(staggered_runs(), 4, 64)
    assert s.tok_s["at_once"] == {"raw": pytest.approx(40.0), "rows": pytest.approx(20.0)}
    assert s.tok_s["staggered"] == {"raw": pytest.approx(32.0), "rows": pytest.approx(20.0)}
    assert s.rows_staggered_vs_raw_at_once.of_medians == pytest.approx(0.5)
    assert s.rows_staggered_vs_raw_staggered.of_medians == pytest.approx(20 / 32)
    assert staggered_rows([s]) == [["4", "40.0", "20.0", "32.0", "20.0", "0.50 (0.50)", "0.62 (0.62)"]]


def summary():  # type: ignore[no-untyped-def]
    from bench.batch_kv_figures import (
        BatchKVSummary,
        KVGeometry,
        mixed_figures,
        skipped_kv_bits,
        staggered_figures,
    )

    geometry = KVGeometry(1, 1, 1, "float16")
    runs = mixed_runs() + staggered_runs()
    return BatchKVSummary(
        "tiny", 2, 10, geometry.bytes_per_token, geometry,
        [mixed_figures(runs, 600, 32, 8, geometry, 0.9)], skipped_kv_bits("tiny", 4, 64, "too narrow"),
        [staggered_figures(runs, 4, 64)], runs,
    )  # fmt: skip


def test_the_table_and_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.batch_kv_figures import mixed_rows, print_batch_kv

    s = summary()
    assert mixed_rows(s.mixed) == [
        ["600+7x32", "BatchGenerator", "60.0", "20.0", "0.33 (0.38)", "", "0.01", "0.00", "1.70"],
        ["600+7x32", "RowBatch", "80.0", "60.0", "0.75 (0.75)", "1.33 (1.50)", "0.00", "0.00", "0.27"],
    ]
    print_batch_kv(s)
    out = capsys.readouterr().out
    assert "kv_bits=4: skipped: too narrow" in out
    assert "600: RowBatch mixed/aligned >= 0.9: FAIL; rows/raw aligned >= 0.95: pass" in out


def test_the_document_is_json_with_no_nan() -> None:
    from bench.batch_kv_figures import BatchKVDocument
    from bench.figures import json_safe
    from bench.raw import PromptProbe
    from bench.results.serving import Machine, Model, PartSettings, Versions

    machine = Machine("Linux", "x86_64", None, 2, "3.11", "cpu", None)
    model = Model("/m", "tiny", 1, 0.1, "hi", 3, PromptProbe(True, True, 1.0))
    settings = PartSettings(10, 1, [1], 0.0, 32, False, "batch_kv", False)
    document = BatchKVDocument(machine, Versions("0.32.4", "0.32.2", None), model, settings, summary())
    written = json.loads(json.dumps(json_safe(document.to_json()), allow_nan=False))
    assert list(written) == ["machine", "versions", "model", "settings", "batch_kv"]
    batch_kv = written["batch_kv"]
    assert batch_kv["kv_bits"]["bytes_ratio"] is None and batch_kv["kv_bits"]["skipped"] == "too narrow"
    assert batch_kv["mixed"][0]["mixed_vs_aligned"]["rows"] == {"of_medians": 0.75, "paired": 0.75}
    assert batch_kv["runs"][0]["tok_s"] == pytest.approx(80.0)
    assert batch_kv["geometry"] == {"layers": 1, "kv_heads": 1, "head_dim": 1, "dtype": "float16"}


def test_a_round_pairs_each_ratio_s_runs_and_rotates_their_order() -> None:
    from bench.batch_kv import SMOKE, groups, in_turn, row_prompt

    mixed, kv, staggered = groups(SMOKE, kv=True)
    assert [(a.scenario, a.generator) for a in mixed] == [
        ("aligned", "raw"), ("aligned", "rows"), ("mixed256", "raw"), ("mixed256", "rows"),
    ]  # fmt: skip
    assert mixed[2].lengths == (256,) + (16,) * 7
    assert [(a.scenario, a.kv_bits, a.on_kv_model) for a in kv] == [
        ("kv_plain", None, True),
        ("kv_bits", 4, True),
    ]
    assert [a.staggered for a in staggered] == [False, False, True, True]
    assert len(groups(SMOKE, kv=False)) == 2  # no kv_bits group where the model cannot quantize
    assert [a.scenario for a in in_turn(kv, 1)] == ["kv_bits", "kv_plain"]
    assert in_turn(mixed, 4) == mixed
    # Distinct rows: no two share a prefix.
    assert len({tuple(row_prompt(i, 4)[:1]) for i in range(16)}) == 16
