"""The peers comparison's pure parts (`bench.peers_figures`): one usage per response, the medians
and ratios, the table, and the JSON it writes."""

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


USAGE = {"prompt_tokens": 19, "completion_tokens": 200, "total_tokens": 219}


def test_a_usage_sent_twice_counts_once() -> None:
    from bench.peers_figures import one_usage

    # vllm-mlx: on its last content chunk, then again on a chunk of its own.
    assert one_usage([USAGE, dict(USAGE)]) == USAGE
    assert one_usage([USAGE]) == USAGE


def test_a_missing_or_disagreeing_usage_is_an_error() -> None:
    from bench.peers_figures import UsageError, one_usage

    with pytest.raises(UsageError, match="no usage"):
        one_usage([])
    with pytest.raises(UsageError, match="disagree"):
        one_usage([USAGE, {**USAGE, "completion_tokens": 199}])


def test_the_order_rotates_from_one_round_to_the_next() -> None:
    from bench.peers_figures import PEERS, in_turn

    orders = [in_turn(number) for number in range(3)]
    assert orders[0] == PEERS
    assert [order[0] for order in orders] == list(PEERS)  # each server first once
    assert in_turn(3) == PEERS


def batch(server: str, level: int, number: int, wall_s: float, tokens: int = 10):  # type: ignore[no-untyped-def]
    from bench.peers_figures import PeerBatch

    return PeerBatch(server, level, number, wall_s, [tokens] * level, [19] * level, [3] * level)


def summary_of_two_rounds():  # type: ignore[no-untyped-def]
    from bench.peers_figures import PeerServer, summarize

    runs = [
        # c1: mlxhost 100 and 50 tok/s, mlx_lm.server 50 and 50: medians 75 and 50.
        batch("mlxhost", 1, 0, 0.1), batch("mlx_lm_server", 1, 0, 0.2),
        batch("mlx_lm_server", 1, 1, 0.2), batch("mlxhost", 1, 1, 0.2),
        # c2: one short response on mlx_lm.server (9 tokens of 10).
        batch("mlxhost", 2, 0, 0.1), batch("mlx_lm_server", 2, 0, 0.2, tokens=9),
    ]  # fmt: skip
    servers = {
        "mlxhost": PeerServer(["mlxhost", "serve"], {"mlx": "0.32.4"}, 1.5),
        "vllm_mlx": PeerServer(None, {}, None, skipped="vllm-mlx is not installed in /x"),
        "mlx_lm_server": PeerServer(["python", "-m", "mlx_lm", "server"], {"mlx": "0.32.4"}, 1.0),
    }
    return summarize(runs, servers, max_tokens=10, rounds=2, concurrency=[1, 2])


def test_medians_ratios_and_short_responses() -> None:
    summary = summary_of_two_rounds()
    c1 = summary.figures["mlxhost"]["c1"]
    assert c1.tok_s == pytest.approx(75.0) and c1.tok_s_by_round == pytest.approx([100.0, 50.0])
    assert c1.responses == 2 and c1.short_responses == 0 and c1.cached_prompt_tokens == 6
    ratios = summary.ratios["mlxhost_vs_mlx_lm_server"]
    assert ratios["c1"] == pytest.approx(75.0 / 50.0)
    # Paired: the rounds' own ratios, 2.0 and 1.0.
    assert summary.paired_ratios["mlxhost_vs_mlx_lm_server"]["c1"] == pytest.approx(1.5)
    assert ratios["c2"] == pytest.approx(200.0 / 90.0)
    assert summary.figures["mlx_lm_server"]["c2"].short_responses == 2
    # The skipped peer has no figures, and its ratios are not numbers.
    assert "vllm_mlx" not in summary.figures
    assert math.isnan(summary.ratios["mlxhost_vs_vllm_mlx"]["c1"])


def test_the_table_has_a_row_per_concurrency() -> None:
    from bench.peers_figures import table_rows

    rows = table_rows(summary_of_two_rounds())
    assert rows == [
        ["c1", "75.0", "-", "50.0", "? (?)", "1.50 (1.50)", "0/-/0"],
        ["c2", "200.0", "-", "90.0", "? (?)", "2.22 (2.22)", "0/-/2"],
    ]


def test_the_printed_report_says_why_a_peer_was_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.peers_figures import print_peers

    print_peers(summary_of_two_rounds())
    out = capsys.readouterr().out
    assert "vllm-mlx: skipped: vllm-mlx is not installed in /x" in out
    assert "medians of 2 alternating rounds, max_tokens 10" in out


def test_the_document_is_json_with_no_nan() -> None:
    from bench.figures import json_safe
    from bench.peers_figures import PeersDocument
    from bench.raw import PromptProbe
    from bench.results.serving import Machine, Model, PartSettings, Versions

    machine = Machine("Linux", "x86_64", None, 2, "3.11", "cpu", None)
    model = Model("/m", "custom", 1, 0.1, "hi", 3, PromptProbe(True, True, 1.0))
    settings = PartSettings(10, 1, [1, 2], 0.0, 32, False, "peers", False)
    document = PeersDocument(
        machine, Versions("0.32.4", "0.32.2", None), model, settings, summary_of_two_rounds()
    )
    written = json.loads(json.dumps(json_safe(document.to_json()), allow_nan=False))
    assert list(written) == ["machine", "versions", "model", "settings", "peers"]
    peers = written["peers"]
    assert peers["ratios"]["mlxhost_vs_vllm_mlx"]["c1"] is None
    assert peers["servers"]["vllm_mlx"]["skipped"].startswith("vllm-mlx is not installed")
    assert peers["runs"][0]["tok_s"] == pytest.approx(100.0)
    assert peers["runs"][0]["completion_tokens"] == [10]
