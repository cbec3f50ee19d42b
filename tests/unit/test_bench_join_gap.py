"""The join-gap measurement's pure parts (`bench.join_gap_figures`, and the joining prompts of
`bench.join_gap`): the gaps from frame times, the medians, the table and the JSON."""

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


def test_only_the_gaps_that_overlap_the_window_count() -> None:
    from bench.join_gap_figures import window_gaps

    arrivals = [0.0, 0.1, 0.2, 1.0, 1.1, 2.0]
    # The window [0.5, 1.05]: (0.2, 1.0) straddles its start and is cut there, (1.0, 1.1) straddles
    # its end and counts whole.
    assert window_gaps(arrivals, 0.5, 1.05) == [(0.5, 1.0), (1.0, 1.1)]
    assert window_gaps(arrivals, 5.0, 6.0) == []  # nothing after the window
    assert window_gaps([0.3], 0.0, 1.0) == []  # one frame has no gap


def test_the_largest_gap_of_any_stream_and_when_it_began() -> None:
    from bench.join_gap_figures import largest_gap

    send, first = 10.0, 11.0
    streams = [
        [9.9, 10.05, 10.1, 10.9, 11.2],  # 0.8 s, begun 0.1 s after the send
        [9.95, 10.2, 10.3, 11.05],  # 0.75 s
    ]
    gap, at = largest_gap(streams, send, first)
    assert gap == pytest.approx(0.8)
    assert at == pytest.approx(0.1)
    # A stall under way at the send counts from the send on.
    gap, at = largest_gap([[9.5, 10.5]], send, first)
    assert (gap, at) == (pytest.approx(0.5), 0.0)
    assert all(math.isnan(x) for x in largest_gap([[1.0, 2.0]], send, first))


def test_the_steady_period_is_per_frame_over_the_span_not_a_median_of_bursts() -> None:
    from bench.join_gap_figures import steady_period

    # Frames come in bursts of two, 10 ms apart: the median gap would be ~0, the period is 5 ms.
    bursts = [t for k in range(10) for t in (k * 0.010, k * 0.010 + 1e-6)]
    assert steady_period([bursts], 0.0, 1.0) == pytest.approx(0.09 / 19, rel=1e-3)
    # Only the frames in [since, before]; a stream with fewer than two there has no period.
    assert steady_period([[0.0, 0.5, 0.6, 0.7, 2.0]], 0.4, 1.0) == pytest.approx(0.1)
    assert math.isnan(steady_period([[0.0, 2.0]], 0.5, 1.0))


def run(layout: str, streams: int, number: int, gap: float):  # type: ignore[no-untyped-def]
    from bench.join_gap_figures import join_run

    send = 1.0
    # A frame every 50 ms from 0.5 s on, one stall of `gap` 50 ms after the send, then every 50 ms.
    stalled = send + 0.05
    frames = [
        *(0.5 + 0.05 * k for k in range(12)),
        stalled + gap,
        *(stalled + gap + 0.05 * k for k in range(1, 30)),
    ]
    arrivals = [frames for _ in range(streams)]
    tokens = [[2 if t == stalled + gap else 1 for t in frames] for _ in range(streams)]  # two after the stall
    return join_run(layout, number, 0.0, 0.5, send, send + 1.0, arrivals, tokens, 4000, 4, 0)


def test_a_run_from_its_times() -> None:
    record = run("per_row", 2, 0, 0.12)
    assert record.streams == 2
    assert record.ttft_s == pytest.approx(1.0)
    assert record.largest_gap_s == pytest.approx(0.12)
    assert record.largest_gap_at_s == pytest.approx(0.05)
    assert record.gaps_s == [pytest.approx(0.12)] * 2
    # Between the send and the first token (2.0): 1.05, 1.17, then 1.22 to 1.97 every 50 ms.
    assert record.frames_in_window == [18, 18]
    assert record.tokens_in_window == [19, 19]
    assert record.steady_period_s == pytest.approx(0.05)


def summary():  # type: ignore[no-untyped-def]
    from bench.join_gap_figures import JoinProbe, JoinServer, JoinSetup, summarize

    runs = [
        run("padded", 1, 0, 0.9),
        run("per_row", 1, 0, 0.10),
        run("per_row", 1, 1, 0.30),
        run("padded", 1, 1, 0.95),
        run("padded", 1, 2, 0.94),
        run("per_row", 1, 2, 0.12),
        run("per_row", 4, 0, 0.2),
    ]
    servers = {
        layout: [JoinServer([f"--kv-layout={layout}"], 1.5, JoinProbe(200, 200, 18, "length"))]
        for layout in ("padded", "per_row")
    }
    warm_ups = [run("padded", 1, -1, 0.9), run("per_row", 1, -1, 0.17)]
    return summarize(runs, warm_ups, servers, JoinSetup("Go on forever", 3000, 4000, 4), 3, [1, 4])


def test_the_medians_and_the_target() -> None:
    figures = summary().figures
    assert figures["padded"]["c1"].largest_gap_s == pytest.approx(0.94)
    assert figures["padded"]["c1"].meets_target is None  # the padded layout has no target
    assert figures["per_row"]["c1"].largest_gap_s == pytest.approx(0.12)
    assert figures["per_row"]["c1"].largest_gap_s_by_round == pytest.approx([0.10, 0.30, 0.12])
    assert figures["per_row"]["c1"].meets_target is True
    assert figures["per_row"]["c4"].meets_target is False
    assert "c4" not in figures["padded"]  # no runs, no figures


def test_the_table() -> None:
    from bench.join_gap_figures import table_rows

    rows = table_rows(summary())
    assert rows[0] == ["1", "940", "1000", "50.0", "120", "1000", "50.0", "pass"]
    assert rows[1] == ["4", "-", "-", "-", "200", "1000", "50.0", "FAIL"]


def test_the_json() -> None:
    from bench.figures import json_safe

    written = json.loads(json.dumps(json_safe(summary().to_json())))
    assert written["setup"]["join_prompt_tokens"] == 4000
    assert written["figures"]["per_row"]["c1"]["largest_gap_s"] == pytest.approx(0.12)
    assert written["target_s"] == {"per_row": 0.15}
    assert len(written["runs"]) == 7
    assert written["runs"][0]["layout"] == "padded"
    assert written["servers"]["per_row"][0]["probe"]["frames_per_token"] == 1.0
    assert [r["largest_gap_s"] for r in written["warm_ups"]] == pytest.approx([0.9, 0.17])


def test_the_report_prints() -> None:
    from bench.join_gap_figures import print_join_gap, warm_up_gap

    assert warm_up_gap(summary(), "per_row", 1) == pytest.approx(0.17)
    assert math.isnan(warm_up_gap(summary(), "per_row", 4))  # no server was started for it
    print_join_gap(summary())


def test_a_chunks_tokens_are_its_logprobs_entries() -> None:
    from bench.join_gap import tokens_in

    entry = {"token": "a", "logprob": -1.0, "bytes": [97], "top_logprobs": []}
    # A token whose text is held back still has its entry; two tokens sent together, two entries.
    assert tokens_in({"choices": [{"delta": {}, "logprobs": {"content": [entry]}}]}) == 1
    assert tokens_in({"choices": [{"delta": {"content": "ab"}, "logprobs": {"content": [entry] * 2}}]}) == 2
    assert tokens_in({"choices": [{"delta": {"role": "assistant", "content": ""}, "logprobs": None}]}) == 0
    assert tokens_in({"choices": [], "usage": {"completion_tokens": 3}}) == 0


def test_a_joining_prompt_fills_its_tokens_and_is_its_own() -> None:
    from bench.join_gap import join_prompt

    def encode(text: str) -> list[int]:  # a word a token, and three for a chat template
        return [0] * (len(text.split()) + 3)

    first = join_prompt(0, 100, encode)
    assert len(encode(first)) == 100
    second = join_prompt(1, 100, encode)
    assert first.split()[0] != second.split()[0]  # distinct from the first word on
    assert join_prompt(0, 100, encode) == first  # the same index, the same prompt
