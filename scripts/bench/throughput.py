"""Throughput of the four paths: one stream (decode and end-to-end tok/s) and N streams at once
(total tok/s), the repeats interleaved, the order of the paths rotating from one repeat to the
next, so that a noisy machine slows all of them alike.

Each path is warmed up first: one full single-stream generation, then one short batch at the
highest concurrency (which also opens the HTTP clients' pooled connections). Concurrency N over
HTTP is N streams at once; raw, N rows of one BatchGenerator (see `bench.raw`), and the same
batches again without detokenizing.

Figures, each the median over the repeats:
  decode tok/s    (tokens - 1) / (time of the last token - time of the first token), one stream.
                  The first token is not counted because its time is the TTFT.
  end-to-end      tokens / (call to the last token (raw) or to the end of the stream (HTTP)).
  total tok/s cN  tokens of all N streams / (first insert or request start to the last finish).
  TTFT cN         per concurrency N, over the N streams of every cN run (raw: the insert to each
                  row's first token); c1's TTFT also counts the requests of `bench.ttft`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from bench.figures import median, percentile, progress, ratio
from bench.plan import Plan
from bench.raw import RawMLX
from bench.results.serving import Batched, PathSummary, SingleStream
from bench.runs import Measurements, StreamRun, describe_batch, describe_stream
from bench.settings import LABELS, PATHS, in_turn
from bench.streams import HTTPBench

WARM_TOKENS = 16  # the warm-up batch's max_tokens, or max_tokens if lower


def warm_up_raw(raw: RawMLX, ids: list[int], plan: Plan) -> None:
    progress("raw: warming up")
    raw.stream(ids, plan.max_tokens)
    top = max(plan.concurrency)
    if top > 1:
        raw.batch(ids, top, min(plan.max_tokens, WARM_TOKENS), plan.max_batch)


async def warm_up_http(http: HTTPBench, plan: Plan) -> None:
    await http.stream()
    top = max(plan.concurrency)
    if top > 1:
        await http.batch(top, min(plan.max_tokens, WARM_TOKENS))  # also opens the pooled connections


@dataclass(frozen=True)
class Paths:
    """The four paths, ready: raw mlx-lm with the prompt's token ids, a client per server; and
    where each path's runs go."""

    raw: RawMLX
    ids: list[int]
    http: dict[str, HTTPBench]
    results: dict[str, Measurements]

    async def stream(self, name: str, max_tokens: int) -> StreamRun:
        """One single-stream generation on the path `name`."""
        if name == "raw":
            return self.raw.stream(self.ids, max_tokens)
        return await self.http[name].stream(max_tokens)


async def measure_throughput(plan: Plan, paths: Paths) -> None:
    """Every repeat of every concurrency on every path, into `paths.results`."""
    for repeat in range(plan.repeats):
        for concurrency in plan.concurrency:
            for name in in_turn(repeat):
                results = paths.results[name]
                if concurrency == 1:
                    run = await paths.stream(name, plan.max_tokens)
                    results.single.append(run)
                    result = describe_stream(run)
                elif name == "raw":
                    result = run_raw_batch(paths.raw, results, paths.ids, concurrency, plan)
                else:
                    batch = await paths.http[name].batch(concurrency)
                    results.batches.setdefault(concurrency, []).append(batch)
                    result = describe_batch(batch)
                where = f"repeat {repeat + 1}/{plan.repeats} c{concurrency} {LABELS[name]}"
                progress(f"  {where}: {result}")


def run_raw_batch(
    raw: RawMLX, results: Measurements, ids: list[int], concurrency: int, plan: Plan
) -> str:
    batch = raw.batch(ids, concurrency, plan.max_tokens, plan.max_batch)
    results.batches.setdefault(concurrency, []).append(batch)
    bare = raw.batch(ids, concurrency, plan.max_tokens, plan.max_batch, detokenize=False)
    results.tokens_only.setdefault(concurrency, []).append(bare)
    return describe_batch(batch)


def summarize(results: Measurements) -> PathSummary:
    """One path's figures by concurrency ("c1", "c4", ...), with every run behind them."""
    summary: PathSummary = {}
    # TTFT over every single-stream request: the c1 runs and the TTFT requests.
    ttft_ms = [r.ttft_s * 1e3 for r in [*results.single, *results.ttft_probes]]
    if results.single:
        summary["c1"] = SingleStream(
            decode_tok_s=median([r.decode_tok_s for r in results.single]),
            ttft_ms_p50=percentile(ttft_ms, 50),
            ttft_ms_p95=percentile(ttft_ms, 95),
            ttft_samples=len(ttft_ms),
            ttft_ms_p50_c1_runs=median([r.ttft_s * 1e3 for r in results.single]),
            e2e_tok_s=median([r.e2e_tok_s for r in results.single]),
            total_tok_s=median([r.e2e_tok_s for r in results.single]),  # one stream's total
            tokens=[r.tokens for r in results.single],
            runs=results.single,
            ttft_requests_ms=[r.ttft_s * 1e3 for r in results.ttft_probes],
        )
    for concurrency, runs in sorted(results.batches.items()):
        stream_ttft_ms = [t * 1e3 for r in runs for t in r.ttft_s]
        bare = results.tokens_only.get(concurrency)
        summary[f"c{concurrency}"] = Batched(
            total_tok_s=median([r.total_tok_s for r in runs]),
            ttft_ms_p50=percentile(stream_ttft_ms, 50),
            ttft_ms_p95=percentile(stream_ttft_ms, 95),
            tokens=[r.tokens for r in runs],
            runs=runs,
            tokens_only_total_tok_s=median([r.total_tok_s for r in bare]) if bare else None,
        )
    return summary


class Row(NamedTuple):
    label: str
    values: dict[str, float]  # path to figure
    tokens: str  # tokens per stream, raw / mlx_lm.server / in-process / isolated

    def ratio(self, path: str, base: str = "raw") -> float:
        return ratio(self.values[path], self.values[base])


def table_rows(summaries: dict[str, PathSummary]) -> list[Row]:
    """The report's table: one row per figure, one column per path."""

    def tokens(key: str) -> str:
        def span(runs: list[Any]) -> str:
            flat = [t for run in runs for t in (run if isinstance(run, list) else [run])]
            low, high = min(flat), max(flat)
            return str(low) if low == high else f"{low}-{high}"

        return " / ".join(span(summaries[path][key].tokens) for path in PATHS)

    def row(label: str, key: str, figure: str) -> Row:
        return Row(label, {path: getattr(summaries[path][key], figure) for path in PATHS}, tokens(key))

    rows: list[Row] = []
    if "c1" in summaries["raw"]:
        rows.append(row("single-stream decode tok/s", "c1", "decode_tok_s"))
        rows.append(row("single-stream end-to-end tok/s", "c1", "e2e_tok_s"))
    batched = [key for key in summaries["raw"] if key != "c1"]
    for key in batched:
        rows.append(row(f"total tok/s {key}", key, "total_tok_s"))
    if "c1" in summaries["raw"]:
        samples = summaries["raw"]["c1"].ttft_samples  # type: ignore[union-attr]  # c1 is a SingleStream
        rows.append(row(f"TTFT ms p50 c1 ({samples} requests)", "c1", "ttft_ms_p50"))
        rows.append(row(f"TTFT ms p95 c1 ({samples} requests)", "c1", "ttft_ms_p95"))
    for key in batched:
        rows.append(row(f"TTFT ms p50 {key} (all streams)", key, "ttft_ms_p50"))
        rows.append(row(f"TTFT ms p95 {key} (all streams)", key, "ttft_ms_p95"))
    return rows
