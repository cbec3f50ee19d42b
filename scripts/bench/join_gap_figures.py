"""The join-gap measurement's records and arithmetic (`bench.join_gap`, --join-gap): the largest gap
between a running stream's content frames while a long prompt joins, the medians per layout and
stream count, the table, and the document --json writes (machine, versions, model, settings, then
`join_gap`: JoinGapSummary's fields).

A run's figure, `largest_gap_s`: every running stream's frames (each one token or more) are
stamped as they arrive; of each stream's consecutive frames (a, b) whose interval overlaps the
window from the joining request's send to its first token (b > send and a < first token), the
longest b - max(a, send), and the largest of these over the streams. The start is cut at the send:
a stall already under way when the request left is not its doing (the request reaches the worker
a few ms later, and a decode step takes a few ms). The end is not cut: the running streams' token
after the join's last prefill chunk comes with the decode step that gives the joining request its
first token, or after it, so the last stall ends at or past the window's end. Frames are tokens
here (`bench.join_gap` says how), so a gap is the time between two tokens as the client sees them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.figures import median, number, print_table, verdict
from bench.results.record import Record, run_list
from bench.results.serving import Machine, Model, PartSettings, Versions

LAYOUTS = ("padded", "per_row")  # before, after; the server's --kv-layout
LABELS = {"padded": "padded (before)", "per_row": "per_row (after)"}
TARGET_S = {"per_row": 0.15}  # the target on the tiny model; the padded layout has none


def window_gaps(arrivals: Sequence[float], start: float, end: float) -> list[tuple[float, float]]:
    """The intervals between consecutive arrivals (a, b) that overlap [start, end], in order, each
    from max(a, start) to b: cut at the start, whole past the end (see the module's docstring)."""
    return [(max(a, start), b) for a, b in zip(arrivals, arrivals[1:], strict=False) if b > start and a < end]


def largest_gap(streams: Sequence[Sequence[float]], start: float, end: float) -> tuple[float, float]:
    """The largest gap of any stream in [start, end] (`window_gaps`), and when it began, from
    `start`; NaN for both when no stream has one."""
    gaps = [(b - a, a - start) for arrivals in streams for a, b in window_gaps(arrivals, start, end)]
    return max(gaps) if gaps else (float("nan"), float("nan"))


def steady_period(streams: Sequence[Sequence[float]], since: float, before: float) -> float:
    """Seconds per frame from `since` to `before`: each stream's frames in that span, first to
    last over their count less one, the median over the streams; what a decode step costs with
    nothing joining. (Not the median gap between frames: the relay delivers frames in bursts, and
    most of those gaps are a few microseconds.)"""
    periods = []
    for arrivals in streams:
        early = [t for t in arrivals if since <= t <= before]
        if len(early) > 1:
            periods.append((early[-1] - early[0]) / (len(early) - 1))
    return median(periods)


@dataclass(frozen=True)
class JoinRun:
    """One long prompt joining `streams` running streams, on the server of `layout`."""

    layout: str
    streams: int
    round: int
    send_s: float  # the joining request's send, from the first running stream's start
    ttft_s: float  # its send to its first token
    largest_gap_s: float  # see the module's docstring
    largest_gap_at_s: float  # when that gap began, from the send
    gaps_s: list[float]  # each running stream's largest gap overlapping the window
    steady_period_s: float  # seconds per frame over the settling time before the send
    frames_in_window: list[int]  # each running stream's frames between the send and the first token
    tokens_in_window: list[int]  # and the tokens they carried (more than frames: tokens sent together)
    prompt_tokens: int | None  # the joining request's usage.prompt_tokens
    cached_tokens: int | None  # its usage.prompt_tokens_details.cached_tokens, where sent
    ended_early: int  # running streams that ended before the window did (their gaps are short)


def join_run(
    layout: str,
    number: int,
    began: float,
    steady: float,
    send: float,
    first: float,
    streams: Sequence[Sequence[float]],
    tokens: Sequence[Sequence[int]],
    prompt_tokens: int | None,
    cached_tokens: int | None,
    ended_early: int,
) -> JoinRun:
    """A run's record from its raw times (perf_counter seconds) and each frame's tokens."""
    per_stream = [
        max((b - a for a, b in window_gaps(arrivals, send, first)), default=float("nan"))
        for arrivals in streams
    ]
    gap, at = largest_gap(streams, send, first)
    return JoinRun(
        layout=layout,
        streams=len(streams),
        round=number,
        send_s=send - began,
        ttft_s=first - send,
        largest_gap_s=gap,
        largest_gap_at_s=at,
        gaps_s=per_stream,
        steady_period_s=steady_period(streams, steady, send),
        frames_in_window=[sum(1 for t in arrivals if send < t < first) for arrivals in streams],
        tokens_in_window=[
            sum(n for t, n in zip(arrivals, counts, strict=True) if send < t < first)
            for arrivals, counts in zip(streams, tokens, strict=True)
        ],
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        ended_early=ended_early,
    )


@dataclass(frozen=True)
class JoinFigures(Record):
    """One layout at one stream count, over the rounds: medians."""

    largest_gap_s: float
    largest_gap_s_by_round: list[float]
    ttft_s: float
    steady_period_s: float
    meets_target: bool | None  # largest_gap_s <= the layout's target; None: no target


@dataclass(frozen=True)
class JoinProbe(Record):
    """The running prompt read to its end once, as the running streams read it (with logprobs)."""

    tokens: int  # usage.completion_tokens
    frames: int  # frames that carried tokens
    textless_frames: int  # of those, frames whose tokens had no text yet (held back by the detokenizer)
    finish_reason: str | None

    DERIVED = ("frames_per_token",)

    @property
    def frames_per_token(self) -> float:
        return self.frames / self.tokens if self.tokens else float("nan")


@dataclass(frozen=True)
class JoinServer(Record):
    """How one layout's server ran: its options, and its probe of the running prompt."""

    options: list[str]
    ready_s: float
    probe: JoinProbe


@dataclass(frozen=True)
class JoinSetup(Record):
    """What ran: the running streams' prompt and max_tokens, the joining prompts' length."""

    running_prompt: str
    running_max_tokens: int  # never reached: the streams are closed once the window has passed
    join_prompt_tokens: int  # as this side's tokenizer counts them, chat template included
    join_max_tokens: int


@dataclass(frozen=True)
class JoinGapSummary(Record):
    setup: JoinSetup
    rounds: int
    concurrency: list[int]
    target_s: dict[str, float]
    servers: dict[str, list[JoinServer]]  # by layout: one for each N, in order (restarted)
    figures: dict[str, dict[str, JoinFigures]]  # by layout, then "cN"
    runs: list[JoinRun] = field(metadata=run_list())
    # Each server's first run (N = 1), its prefill budget not yet measured: not in the figures.
    warm_ups: list[JoinRun] = field(metadata=run_list())


def figures_of(runs: Sequence[JoinRun], layout: str) -> JoinFigures:
    gaps = [run.largest_gap_s for run in runs]
    gap = median(gaps)
    target = TARGET_S.get(layout)
    return JoinFigures(
        largest_gap_s=gap,
        largest_gap_s_by_round=gaps,
        ttft_s=median([run.ttft_s for run in runs]),
        steady_period_s=median([run.steady_period_s for run in runs]),
        meets_target=None if target is None or math.isnan(gap) else gap <= target,
    )


def summarize(
    runs: Sequence[JoinRun],
    warm_ups: Sequence[JoinRun],
    servers: Mapping[str, list[JoinServer]],
    setup: JoinSetup,
    rounds: int,
    concurrency: Sequence[int],
) -> JoinGapSummary:
    """Medians per layout and stream count; a layout or count without runs has no figures."""
    figures: dict[str, dict[str, JoinFigures]] = {}
    for layout in LAYOUTS:
        by_level = {}
        for level in concurrency:
            mine = [run for run in runs if run.layout == layout and run.streams == level]
            if mine:
                by_level[f"c{level}"] = figures_of(mine, layout)
        if by_level:
            figures[layout] = by_level
    return JoinGapSummary(
        setup=setup,
        rounds=rounds,
        concurrency=list(concurrency),
        target_s=dict(TARGET_S),
        servers=dict(servers),
        figures=figures,
        runs=list(runs),
        warm_ups=list(warm_ups),
    )


def warm_up_gap(summary: JoinGapSummary, layout: str, level: int) -> float:
    """The largest gap of the warm-up run of `layout`'s server for N = `level`."""
    index = summary.concurrency.index(level)
    mine = [run for run in summary.warm_ups if run.layout == layout]
    return mine[index].largest_gap_s if index < len(mine) else float("nan")


def ms(seconds: float) -> str:
    return number(seconds * 1e3, 0)


def table_rows(summary: JoinGapSummary) -> list[list[str]]:
    """One row per stream count: each layout's median largest gap, TTFT of the joining prompt and
    seconds per frame before it (ms), and the per_row layout's target."""
    rows = []
    for level in summary.concurrency:
        key = f"c{level}"
        cells = [str(level)]
        for layout in LAYOUTS:
            found = summary.figures.get(layout, {}).get(key)
            if found is None:
                cells += ["-", "-", "-"]
            else:
                cells += [ms(found.largest_gap_s), ms(found.ttft_s), number(found.steady_period_s * 1e3, 1)]
        after = summary.figures.get("per_row", {}).get(key)
        cells.append(verdict(None if after is None else after.meets_target))
        rows.append(cells)
    return rows


def print_join_gap(summary: JoinGapSummary) -> None:
    print(
        f"\njoin gap: a {summary.setup.join_prompt_tokens}-token prompt joining N running streams; the "
        f"largest gap between a running stream's tokens from its send to its first token; medians "
        f"of {summary.rounds} alternating rounds (ms)"
    )
    header = ["N"]
    for layout in LAYOUTS:
        short = layout.replace("_", "-")
        header += [f"{short} gap", f"{short} join TTFT", f"{short} step"]
    target = TARGET_S["per_row"]
    header.append(f"per-row gap <= {target * 1e3:.0f}")
    print_table(header, table_rows(summary), ["<", *[">"] * 6, ">"], indent="  ")
    print("  servers: a fresh pair for each N, each warmed up by one join at N = 1 (JSON warm_ups)")
    for layout, started in summary.servers.items():
        for level, server in zip(summary.concurrency, started, strict=False):
            probe = server.probe
            print(
                f"  {LABELS[layout]} N={level}: ready in {server.ready_s:.1f} s; warm-up gap "
                f"{ms(warm_up_gap(summary, layout, level))} ms; probe: {probe.tokens} tokens in "
                f"{probe.frames} frames ({probe.textless_frames} without text), {probe.finish_reason}"
            )
        if started:
            print(f"    {' '.join(started[0].options)}")
    early = sum(run.ended_early for run in summary.runs)
    if early:
        print(f"  warning: {early} running stream(s) ended before a window did; their gaps are short")


@dataclass(frozen=True)
class JoinGapDocument(Record):
    """What --join-gap --json writes: the run's machine, versions, model and settings, then join_gap."""

    machine: Machine
    versions: Versions
    model: Model
    settings: PartSettings
    join_gap: JoinGapSummary
