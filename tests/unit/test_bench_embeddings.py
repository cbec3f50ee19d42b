"""The embeddings measurement's pure parts (`bench.embeddings_figures`, `bench.embeddings_inputs`,
and the round order of `bench.embeddings`): the inputs, the medians and paired ratios, where a
request's time goes, the table and the JSON."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def bench_on_path() -> None:
    # The package is `bench` with scripts/ on the path, as `python scripts/bench` runs it.
    sys.path.insert(0, str(REPO / "scripts"))


def encode(text: str) -> list[int]:
    """A byte-level tokenizer: one token a byte."""
    return list(text.encode())


def decode(ids: list[int]) -> str:
    return bytes(ids).decode(errors="ignore")  # a cut through a character drops its bytes


def run(shape: str, batch: int, arm: str, number: int, seconds: float, inputs: int = 64, tokens: int = 1024):  # type: ignore[no-untyped-def]
    from bench.embeddings_figures import EmbeddingRun

    return EmbeddingRun(shape, batch, arm, number, inputs, tokens, max(1, inputs // batch), seconds)


def test_inputs_split_into_requests_in_order() -> None:
    from bench.embeddings_inputs import Inputs

    inputs = Inputs([f"t{i}" for i in range(5)], [[i] * (i + 1) for i in range(5)])
    assert inputs.tokens == 15
    assert inputs.take(2) == Inputs(["t0", "t1"], [[0], [1, 1]])
    assert inputs.take(9) == inputs
    requests = inputs.requests(2)
    assert [r.texts for r in requests] == [["t0", "t1"], ["t2", "t3"], ["t4"]]
    assert sum(r.tokens for r in requests) == inputs.tokens
    with pytest.raises(ValueError):
        inputs.requests(0)


def test_texts_are_cut_to_their_lengths_the_same_every_run() -> None:
    from bench.embeddings_inputs import code_chunks, cut, mixed_lengths, prose_inputs

    assert cut("abcdef", 3, encode, decode) == "abc"
    assert cut("ab", 5, encode, decode) == "ab"
    with pytest.raises(ValueError):
        cut("ab", 0, encode, decode)
    lengths = mixed_lengths(50, seed=7, bounds=(16, 512))
    assert lengths == mixed_lengths(50, seed=7, bounds=(16, 512))
    assert all(16 <= n <= 512 for n in lengths) and len(set(lengths)) > 10
    with pytest.raises(ValueError):
        mixed_lengths(3, seed=1, bounds=(0, 4))
    prose = prose_inputs([16, 40, 16], seed=3, encode=encode, decode=decode)
    assert prose == prose_inputs([16, 40, 16], seed=3, encode=encode, decode=decode)
    # A cut through a character loses its bytes: a few tokens short at most, never over.
    assert all(n - 3 <= len(ids) <= n for n, ids in zip([16, 40, 16], prose.ids, strict=True))
    assert prose.texts[0] != prose.texts[2]  # distinct inputs
    chunks = code_chunks(4, seed=5, encode=encode, decode=decode, tokens=200)
    assert chunks == code_chunks(4, seed=5, encode=encode, decode=decode, tokens=200)
    assert all(197 <= len(ids) <= 200 for ids in chunks.ids)
    assert len(set(chunks.texts)) == 4


def test_a_cell_s_ratio_is_the_median_of_its_paired_rounds() -> None:
    from bench.embeddings_figures import TARGET, cell_figures, paired_ratios

    runs = [
        run("short", 64, "raw", 0, 1.0), run("short", 64, "host", 0, 2.0),  # 0.5
        run("short", 64, "raw", 1, 3.0), run("short", 64, "host", 1, 3.0),  # 1.0
        run("short", 64, "host", 2, 1.0), run("short", 64, "raw", 2, 0.9),  # 0.9
        run("short", 16, "raw", 0, 1.0), run("short", 16, "host", 0, 1.25),
    ]  # fmt: skip
    hosts = [r for r in runs if r.batch == 64 and r.arm == "host"]
    raws = [r for r in runs if r.batch == 64 and r.arm == "raw"]
    assert paired_ratios(hosts, raws) == pytest.approx([0.5, 1.0, 0.9])
    assert paired_ratios(hosts, raws[:1]) == pytest.approx([0.5])  # an unpaired round is left out
    cell = cell_figures(runs, "short", 64, largest=64)
    assert cell is not None
    assert cell.host_vs_raw == pytest.approx(0.9) and cell.host_vs_raw >= TARGET
    assert cell.meets_target is True
    assert cell.host_inputs_per_s == pytest.approx(64 / 2.0)  # median of 32, 21.3, 64
    assert cell.raw_tokens_per_s == pytest.approx(1024 / 1.0)
    assert (cell.inputs, cell.tokens, cell.requests) == (64, 1024, 1)
    smaller = cell_figures(runs, "short", 16, largest=64)
    assert smaller is not None and smaller.meets_target is None  # the target is at the largest batch
    assert smaller.host_vs_raw == pytest.approx(0.8)
    assert cell_figures(runs, "mixed", 64, largest=64) is None


def test_where_the_time_goes() -> None:
    from bench.embeddings_figures import ComponentRun, breakdown_of

    runs = [
        run("short", 64, "host", 0, 0.055), run("short", 64, "raw", 0, 0.045),
        run("short", 64, "worker", 0, 0.050), run("short", 64, "host_ids", 0, 0.052),
        run("short", 64, "host_base64", 0, 0.049), run("mixed", 64, "host", 0, 0.2),
        run("mixed", 64, "raw", 0, 0.19),
    ]  # fmt: skip
    parts = [ComponentRun("short", 0, 0.002, 0.0001, 0.0019, 0.0008)]
    found = breakdown_of(runs, parts, "short", 64)
    assert found.overhead_ms == pytest.approx(10.0)
    assert found.relay_ms == pytest.approx(5.0)
    assert found.tokenization_ms == pytest.approx(3.0)
    assert found.float_json_ms == pytest.approx(6.0)
    assert found.rest_ms == pytest.approx(50.0 - 45.0 - 2.0 - 0.1 - 1.9 - 0.8)
    # The mixed inputs ran raw and host alone: the other arms' figures are NaN, not zero.
    mixed = breakdown_of(runs, parts, "mixed", 64)
    assert mixed.overhead_ms == pytest.approx(10.0)
    assert math.isnan(mixed.relay_ms) and math.isnan(mixed.tokenize_ms)


def test_the_chunks_seconds_and_rates() -> None:
    from bench.embeddings_figures import CHUNKS, chunk_figures

    runs = [
        run(CHUNKS, 64, "raw", 0, 16.0, inputs=1000, tokens=200_000),
        run(CHUNKS, 64, "host", 0, 20.0, inputs=1000, tokens=200_000),
        run(CHUNKS, 64, "host", 2, 17.0, inputs=1000, tokens=200_000),
        run(CHUNKS, 64, "raw", 2, 17.0, inputs=1000, tokens=200_000),
    ]
    chunks = chunk_figures(runs, 64)
    assert (chunks.chunks, chunks.tokens, chunks.requests) == (1000, 200_000, 15)
    assert chunks.host_s == pytest.approx(18.5) and chunks.raw_s == pytest.approx(16.5)
    assert chunks.host_vs_raw == pytest.approx((0.8 + 1.0) / 2)
    assert chunks.host_chunks_per_s == pytest.approx(1000 / 18.5)


def summary():  # type: ignore[no-untyped-def]
    from bench.embeddings_figures import (
        CHUNKS,
        TARGET,
        Agreement,
        ComponentRun,
        EmbeddingModel,
        EmbeddingsSetup,
        EmbeddingsSummary,
        breakdown_of,
        cells_of,
        chunk_figures,
    )

    runs = []
    for number in range(2):
        for shape in ("short", "mixed"):
            for batch in (1, 16, 64):
                runs += [
                    run(shape, batch, "raw", number, 1.0),
                    run(shape, batch, "host", number, 1.1 + batch / 100),
                ]
        runs += [run(CHUNKS, 64, "raw", number, 16.0, 1000), run(CHUNKS, 64, "host", number, 17.0, 1000)]
    parts = [ComponentRun("short", 0, 0.002, 0.0001, 0.0019, 0.0008)]
    return EmbeddingsSummary(
        model=EmbeddingModel("/m", "tiny", 205_120, 64, 0.1, 1.5),
        setup=EmbeddingsSetup(16, [16, 512], 200, 16384, 256, []),
        rounds=2,
        target=TARGET,
        cells=cells_of(runs, (1, 16, 64)),
        breakdown={shape: breakdown_of(runs, parts, shape, 64) for shape in ("short", "mixed")},
        chunks=chunk_figures(runs, 64),
        agreement=Agreement(0.0, 2, 2, 791, 791, True),
        runs=runs,
        components=parts,
    )


def test_the_table_and_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.embeddings_figures import print_embeddings, table_rows

    found = summary()
    rows = table_rows(found)
    assert [row[:2] for row in rows] == [
        ["short (~16 tokens)", "1"], ["short (~16 tokens)", "16"], ["short (~16 tokens)", "64"],
        ["mixed (16..512 tokens)", "1"], ["mixed (16..512 tokens)", "16"], ["mixed (16..512 tokens)", "64"],
    ]  # fmt: skip
    assert rows[0][6] == "0.90" and rows[0][7] == ""  # 1.0 / 1.11; no target below the largest batch
    assert rows[2][6] == "0.57" and rows[2][7] == "FAIL"  # 1.0 / 1.74
    print_embeddings(found)
    out = capsys.readouterr().out
    assert "1,000 code chunks" in out and "host 17.00 s, raw 16.00 s (host/raw 0.94)" in out
    assert "short: host 1740.0, raw pass 1000.0: the host adds 740.0" in out
    assert "without the parent" not in out  # no worker arm here: its line is left out, not "?"
    assert "a mixed request in 2 passes raw, 2 in the worker" in out


def test_the_document_is_json_with_no_nan() -> None:
    from bench.embeddings_figures import EmbeddingsDocument
    from bench.figures import json_safe
    from bench.results.serving import Machine, PartSettings, Versions

    document = EmbeddingsDocument(
        Machine("linux", "x86_64", None, 2, "3.11", "cpu", None),
        Versions("0.32.4", "0.32.2", None),
        PartSettings(256, 2, [1], 0.0, 32, False, "embeddings", False),
        summary(),
    )
    written = json.loads(json.dumps(json_safe(document.to_json()), allow_nan=False))
    embeddings = written["embeddings"]
    assert embeddings["cells"]["short"]["b64"]["meets_target"] is False
    assert embeddings["breakdown"]["short"]["relay_ms"] is None  # NaN as null
    assert embeddings["chunks"]["host_chunks_per_s"] == pytest.approx(1000 / 17.0)
    assert embeddings["runs"][0]["inputs_per_s"] == pytest.approx(64.0)
    assert set(written) == {"machine", "versions", "settings", "embeddings"}


def test_raw_and_host_run_back_to_back_and_take_turns_first() -> None:
    from bench.embeddings import cells, order, rotated

    assert rotated(("a", "b", "c"), 4) == ("b", "c", "a")
    assert order("mixed", 64, 0) == ("raw", "host")
    assert order("mixed", 64, 1) == ("host", "raw")
    assert order("short", 16, 1) == ("host", "raw")
    assert order("short", 64, 0) == ("raw", "host", "host_ids", "host_base64", "worker")
    assert order("short", 64, 1) == ("host", "raw", "host_base64", "worker", "host_ids")
    runs = {("mixed", 1): 1, ("short", 64): 1, ("short", 1): 1, ("mixed", 64): 1}
    assert cells(runs) == [("short", 1), ("short", 64), ("mixed", 1), ("mixed", 64)]
