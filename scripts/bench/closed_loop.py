"""Closed-loop load (issue 14, part 4): C rows of CLOSED_LOOP_TOKENS each, every row that finishes
replaced at once by a new one with the same prompt, as an agent's or a load tester's clients do;
raw `BatchGenerator` in this process against the isolated server over HTTP, at every concurrency
of the plan (default 1, 4, 8, 16).

Per concurrency C, the runs of one repeat in rotating order:
  all at once     raw: C rows inserted together and stepped to the end, tokens only (what
                  `bench.raw` measures as tokens_only_total_tok_s, here at CLOSED_LOOP_TOKENS).
                  Run right before and right after each isolated run (see PAIRED below).
  raw tokens      raw closed loop, tokens only: for `window_s` each finished row is replaced by a
                  new one at once; then the rows left run out.
  raw staggered   the same, tokens only, but the first rows' max_tokens spread over 1/C .. 1 of
                  CLOSED_LOOP_TOKENS, so that from the first refill on the rows finish at different
                  steps, as a closed loop's rows drift apart over HTTP: prefills come one or two at
                  a time between decode steps. (In the plain raw loop rows that start together end
                  together, and the loop runs in waves.)
  raw text        the plain raw loop, each row's tokens through its own streaming detokenizer.
  isolated        C clients against an isolated server of its own, each sending its next streamed
                  request the moment the last one ended, for `window_s`; then the last ones end.
tok/s is every token generated / (the first insert or request to the last finish). Alongside: CPU
seconds (user + system) of this process (the client, or the raw generator), and over HTTP of the
host's parent and its worker (psutil), as cores = CPU s / wall s.

The raw closed loop also says where its steps go: each `generator.next()` is timed and counted as
a prefill step (it processed or finished a prompt) or a pure decode step, with the rows it decoded;
mlx-lm's own counters (`BatchGenerator.stats`) split the same time into prompt, decode and
overhead. Target (issue 14): isolated >= 0.8 x raw all at once (tokens only) at every
concurrency, on the tiny model, with the client's CPU beside it.

PAIRED: this machine's speed drifts by 15-30% over tens of seconds (other tenants, clocks), and
raw all at once runs for only a second or two. A ratio of two medians taken minutes apart then
measures the drift as much as the host. So each isolated run is sandwiched between two raw
all-at-once runs, and its ratio is to their mean: a drift that is steady over the sandwich
cancels. The target is read on the median of these paired ratios; the ratio of the medians is
reported beside it.
"""

from __future__ import annotations

import functools
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import httpx
from mlx_lm.generate import BatchGenerator

from bench import hosts
from bench.figures import at_least, median, number, print_table, progress, ratio, verdict
from bench.health import isolated_worker
from bench.plan import Plan
from bench.processes import CPUClock, wait_quiet
from bench.raw import RawMLX, choose_prompt
from bench.runs import BatchRun
from bench.settings import PREFILL_BATCH, REQUEST_TIMEOUT_S
from bench.streams import HTTPBench, gather

# Each row's max_tokens is plan.closed_loop_tokens: CLOSED_LOOP_TOKENS (bench.plan, 400, as in the
# issue's profile), or --max-tokens when given.
WINDOW_S = {False: 6.0, True: 2.0}  # by --quick: how long finished rows are replaced
SMOKE_WINDOW_S = 0.5
WARM_TOKENS = 16  # each warm-up row's max_tokens
ISOLATED_VS_RAW_MIN = 0.8  # isolated closed loop / raw all at once, tokens only
KINDS = ("all_at_once", "raw_tokens", "raw_staggered", "raw_text", "isolated")
# What one repeat runs, in turn (rotated per repeat and concurrency): the isolated run between two
# raw all-at-once runs (PAIRED, in the docstring), then the raw loops.
SCHEDULE = (("all_at_once", "isolated", "all_at_once"), ("raw_tokens",), ("raw_staggered",), ("raw_text",))
RAW_LOOPS = ("raw_tokens", "raw_staggered", "raw_text")
LABELS = {
    "all_at_once": "raw all at once (tokens)",
    "raw_tokens": "raw closed loop (tokens)",
    "raw_staggered": "raw closed loop, staggered (tokens)",
    "raw_text": "raw closed loop (text)",
    "isolated": "isolated closed loop",
}


def process_cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Steps:
    """Where a raw closed loop's `generator.next()` calls went."""

    prefill_steps: int = 0  # a prompt was processed, or moved to decoding, in the step
    decode_steps: int = 0  # decoding alone
    prefill_step_s: float = 0.0  # time inside next() of the prefill steps
    decode_step_s: float = 0.0
    rows_decoded: int = 0  # tokens generated, over all steps
    rows_decoded_in_prefill_steps: int = 0
    prompt_rows: int = 0  # prompt responses, over the prefill steps
    outside_s: float = 0.0  # between next() calls: counting, detokenizing, inserting
    mlx_lm: dict[str, float] = field(default_factory=dict)  # BatchGenerator.stats(): its own split

    def summary(self) -> dict[str, Any]:
        steps = self.prefill_steps + self.decode_steps
        return {
            **asdict(self),
            "steps": steps,
            "prefill_step_fraction": ratio(self.prefill_steps, steps),
            "mean_prefill_step_ms": ratio(self.prefill_step_s * 1e3, self.prefill_steps),
            "mean_decode_step_ms": ratio(self.decode_step_s * 1e3, self.decode_steps),
            "rows_per_step": ratio(self.rows_decoded, steps),
            "rows_per_decode_step": ratio(
                self.rows_decoded - self.rows_decoded_in_prefill_steps, self.decode_steps
            ),
            "prompt_rows_per_prefill_step": ratio(self.prompt_rows, self.prefill_steps),
        }


@dataclass(frozen=True)
class LoopRun:
    concurrency: int
    kind: str  # one of KINDS
    tokens: int
    rows: int  # rows (requests) finished
    wall_s: float
    cpu_s: dict[str, float]  # "client" (this process), and "parent", "worker" over HTTP
    steps: dict[str, Any] | None = None  # raw closed loops: `Steps.summary()`
    tokens_per_row: list[int] = field(default_factory=list)  # over HTTP: each request's usage

    @property
    def tok_s(self) -> float:
        return ratio(self.tokens, self.wall_s)

    def cores(self) -> dict[str, float]:
        return {name: ratio(seconds, self.wall_s) for name, seconds in self.cpu_s.items()}


@dataclass(frozen=True)
class Paired:
    """An isolated run and the mean of the raw all-at-once runs right before and after it."""

    concurrency: int
    isolated: LoopRun
    raw_tok_s: float

    @property
    def ratio(self) -> float:
        return ratio(self.isolated.tok_s, self.raw_tok_s)


def raw_closed_loop(
    raw: RawMLX,
    prompt: list[int],
    concurrency: int,
    max_tokens: int,
    window_s: float,
    max_batch: int,
    detokenize: bool,
    staggered: bool = False,
) -> LoopRun:
    """`concurrency` rows; for `window_s` each one that finishes is replaced at once by a new one
    (same prompt); then the rows left run to their end. No stop tokens: every row is max_tokens,
    but with `staggered` the first rows', spread over max_tokens / concurrency .. max_tokens."""
    generator = BatchGenerator(
        raw.model,
        stop_tokens=None,
        sampler=raw.sampler,
        completion_batch_size=max_batch,
        prefill_batch_size=PREFILL_BATCH,
    )
    steps = Steps()
    detokenizers: dict[int, Any] = {}

    def insert(count: int, lengths: list[int] | None = None) -> list[int]:
        lengths = lengths or [max_tokens] * count
        uids: list[int] = generator.insert([prompt] * count, max_tokens=lengths)
        if detokenize:
            for uid in uids:
                detokenizers[uid] = raw.tokenizer.detokenizer
                detokenizers[uid].reset()
        return uids

    try:
        cpu_start = process_cpu_s()
        start = time.perf_counter()
        deadline = start + window_s
        tokens = rows = 0
        with generator.stats() as stats:
            first = [max_tokens * (i + 1) // concurrency for i in range(concurrency)] if staggered else None
            running = set(insert(concurrency, first))
            while running:
                before = time.perf_counter()
                prompt_responses, responses = generator.next()
                after = time.perf_counter()
                if prompt_responses:
                    steps.prefill_steps += 1
                    steps.prefill_step_s += after - before
                    steps.prompt_rows += len(prompt_responses)
                    steps.rows_decoded_in_prefill_steps += len(responses)
                else:
                    steps.decode_steps += 1
                    steps.decode_step_s += after - before
                steps.rows_decoded += len(responses)
                finished = 0
                for response in responses:
                    tokens += 1
                    if detokenize:
                        detokenizers[response.uid].add_token(response.token)
                        detokenizers[response.uid].last_segment  # noqa: B018  # the text, as a server does
                    if response.finish_reason is not None:
                        running.discard(response.uid)
                        detokenizers.pop(response.uid, None)
                        finished += 1
                rows += finished
                if finished and after < deadline:
                    running.update(insert(finished))
                steps.outside_s += time.perf_counter() - after
        wall = time.perf_counter() - start
        cpu = process_cpu_s() - cpu_start
    finally:
        generator.close()
    steps.mlx_lm = {
        "prompt_time_s": stats.prompt_time,
        "decode_time_s": stats.decode_time,
        "overhead_time_s": stats.overhead_time,
        "wall_time_s": stats.wall_time,
        "prompt_tokens": stats.prompt_tokens,
        "generation_tokens": stats.generation_tokens,
        "generation_steps": stats.generation_steps,
    }
    kind = "raw_text" if detokenize else ("raw_staggered" if staggered else "raw_tokens")
    return LoopRun(concurrency, kind, tokens, rows, wall, {"client": cpu}, steps.summary())


def raw_all_at_once(
    raw: RawMLX, prompt: list[int], concurrency: int, max_tokens: int, max_batch: int
) -> LoopRun:
    cpu_start = process_cpu_s()
    batch: BatchRun = raw.batch(prompt, concurrency, max_tokens, max_batch, detokenize=False)
    cpu = process_cpu_s() - cpu_start
    return LoopRun(concurrency, "all_at_once", sum(batch.tokens), concurrency, batch.wall_s, {"client": cpu})


async def http_closed_loop(
    http: HTTPBench, pids: dict[str, int], concurrency: int, max_tokens: int, window_s: float
) -> LoopRun:
    """`concurrency` clients, each sending its next streamed request as soon as its last one
    ended, for `window_s`; the last requests run to their end."""
    clock = CPUClock(pids)
    cpu_start = process_cpu_s()
    start = time.perf_counter()
    deadline = start + window_s
    per_row: list[int] = []

    async def client() -> None:
        while True:
            run = await http.stream(max_tokens)
            per_row.append(run.tokens)
            if time.perf_counter() >= deadline:
                return

    calls: list[Callable[[], Awaitable[None]]] = [client] * concurrency
    await gather(calls)
    wall = time.perf_counter() - start
    cpu = {"client": process_cpu_s() - cpu_start, **clock.elapsed()}
    return LoopRun(concurrency, "isolated", sum(per_row), len(per_row), wall, cpu, tokens_per_row=per_row)


def describe_run(run: LoopRun) -> str:
    cores = ", ".join(f"{name} {value:.2f}" for name, value in run.cores().items())
    return (
        f"{run.tokens} tokens, {run.rows} rows in {run.wall_s:.2f} s: {run.tok_s:.1f} tok/s (cores: {cores})"
    )


async def measure_closed_loop(plan: Plan, raw: RawMLX) -> dict[str, Any]:
    """Every kind of run at every concurrency, --repeats times, on an isolated server of its own
    (stopped when this ends); the summary. Raw runs happen in this thread, which made `raw`."""
    window_s = SMOKE_WINDOW_S if plan.smoke else WINDOW_S[plan.quick]
    progress(f"closed loop: choosing a prompt whose greedy reply runs to {plan.closed_loop_tokens} tokens")
    text, ids, probe = choose_prompt(raw, plan.closed_loop_tokens)
    top = max(plan.concurrency)
    progress("closed loop: starting an isolated server of its own")
    options = hosts.server_options("isolated", plan)
    host = await anyio.to_thread.run_sync(
        hosts.start, "closed_loop", plan.model_path, plan.max_batch, options
    )
    runs: list[LoopRun] = []
    pairs: list[Paired] = []
    limits = httpx.Limits(max_connections=top + 4, max_keepalive_connections=top + 4)
    with hosts.running(host):
        async with httpx.AsyncClient(base_url=host.url, timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
            http = HTTPBench(client, text, plan.closed_loop_tokens)
            pids = {"parent": host.pid, "worker": int((await isolated_worker(client))["pid"])}
            for repeat in range(plan.repeats):
                for concurrency in plan.concurrency:
                    if repeat == 0:  # warm-ups: a short batch of this size each way (the first run
                        # of a batch size was always the slowest); they also open the connections
                        raw_all_at_once(raw, ids, concurrency, WARM_TOKENS, plan.max_batch)
                        await http.batch(concurrency, WARM_TOKENS)
                        await anyio.to_thread.run_sync(wait_quiet, host.pid)
                    shift = (repeat + plan.concurrency.index(concurrency)) % len(SCHEDULE)
                    for unit in SCHEDULE[shift:] + SCHEDULE[:shift]:
                        done = []
                        for kind in unit:
                            run = await _run(kind, raw, ids, http, pids, concurrency, window_s, plan)
                            done.append(run)
                            where = f"repeat {repeat + 1}/{plan.repeats} c{concurrency} {LABELS[kind]}"
                            progress(f"  closed loop {where}: {describe_run(run)}")
                        runs += done
                        if len(done) == 3:
                            before, isolated, after = done
                            pairs.append(Paired(concurrency, isolated, (before.tok_s + after.tok_s) / 2))
    return closed_loop_summary(runs, pairs, plan, window_s, text, len(ids), probe.reaches_max_tokens)


async def _run(
    kind: str,
    raw: RawMLX,
    ids: list[int],
    http: HTTPBench,
    pids: dict[str, int],
    concurrency: int,
    window_s: float,
    plan: Plan,
) -> LoopRun:
    if kind == "isolated":
        return await http_closed_loop(http, pids, concurrency, plan.closed_loop_tokens, window_s)
    if kind == "all_at_once":
        return raw_all_at_once(raw, ids, concurrency, plan.closed_loop_tokens, plan.max_batch)
    loop = functools.partial(
        raw_closed_loop, raw, ids, concurrency, plan.closed_loop_tokens, window_s, plan.max_batch
    )
    return loop(detokenize=kind == "raw_text", staggered=kind == "raw_staggered")


def closed_loop_summary(
    runs: list[LoopRun],
    pairs: list[Paired],
    plan: Plan,
    window_s: float,
    prompt: str,
    prompt_tokens: int,
    reaches_max_tokens: bool,
) -> dict[str, Any]:
    levels: dict[str, Any] = {}
    for concurrency in plan.concurrency:
        mine = {kind: [r for r in runs if r.concurrency == concurrency and r.kind == kind] for kind in KINDS}
        tok_s = {kind: median([r.tok_s for r in kind_runs]) for kind, kind_runs in mine.items()}
        cores = {
            kind: {
                name: median([r.cores()[name] for r in kind_runs])
                for name in (kind_runs[0].cpu_s if kind_runs else {})
            }
            for kind, kind_runs in mine.items()
        }
        paired = [p.ratio for p in pairs if p.concurrency == concurrency]
        vs_all_at_once = median(paired)
        raw_steps = {
            kind: _median_steps([r.steps for r in mine[kind] if r.steps is not None]) for kind in RAW_LOOPS
        }
        levels[f"c{concurrency}"] = {
            "tok_s": tok_s,
            "cores": cores,
            "isolated_vs_raw_all_at_once_tokens_only": vs_all_at_once,  # the median paired ratio
            "paired_ratios": paired,
            "isolated_vs_raw_all_at_once_medians": ratio(tok_s["isolated"], tok_s["all_at_once"]),
            "isolated_vs_raw_closed_loop_tokens_only": ratio(tok_s["isolated"], tok_s["raw_tokens"]),
            "isolated_vs_raw_closed_loop_text": ratio(tok_s["isolated"], tok_s["raw_text"]),
            "isolated_vs_raw_staggered": ratio(tok_s["isolated"], tok_s["raw_staggered"]),
            "raw_staggered_vs_all_at_once": ratio(tok_s["raw_staggered"], tok_s["all_at_once"]),
            "raw_closed_loop_vs_all_at_once": ratio(tok_s["raw_tokens"], tok_s["all_at_once"]),
            "meets_target": at_least(vs_all_at_once, ISOLATED_VS_RAW_MIN),
            "steps": raw_steps,
            "http_tokens_per_row": sorted({t for r in mine["isolated"] for t in r.tokens_per_row}),
            "runs": [{**asdict(r), "tok_s": r.tok_s} for kind_runs in mine.values() for r in kind_runs],
        }
    verdicts = [level["meets_target"] for level in levels.values()]
    return {
        "settings": {
            "max_tokens": plan.closed_loop_tokens,
            "window_s": window_s,
            "concurrency": plan.concurrency,
            "repeats": plan.repeats,
            "max_batch": plan.max_batch,
            "prefill_batch": PREFILL_BATCH,
            "prompt": prompt,
            "prompt_tokens": prompt_tokens,
            "reply_reaches_max_tokens": reaches_max_tokens,
            "server_options": hosts.server_options("isolated", plan),
        },
        "target": ISOLATED_VS_RAW_MIN,
        "meets_target": None if None in verdicts or not verdicts else all(verdicts),
        "by_concurrency": levels,
    }


def _median_steps(summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run whose steps took the median time in next(), whole (its figures belong together)."""
    if not summaries:
        return None
    ordered = sorted(summaries, key=lambda s: s["prefill_step_s"] + s["decode_step_s"])
    return ordered[len(ordered) // 2]


def closed_loop_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The JSON's top-level keys of this module (beside the whole summary, `closed_loop`)."""
    levels = summary["by_concurrency"]
    return {
        "closed_loop": summary,
        "closed_loop_tok_s": {key: level["tok_s"] for key, level in levels.items()},
        "closed_loop_isolated_vs_raw_tokens_only": {
            key: level["isolated_vs_raw_all_at_once_tokens_only"] for key, level in levels.items()
        },
        "closed_loop_isolated_vs_raw_closed_loop": {
            key: level["isolated_vs_raw_closed_loop_tokens_only"] for key, level in levels.items()
        },
        "closed_loop_client_cores": {
            key: level["cores"]["isolated"].get("client") for key, level in levels.items()
        },
    }


def print_closed_loop(summary: dict[str, Any]) -> None:
    settings, levels = summary["settings"], summary["by_concurrency"]
    print()
    print(
        f"closed loop (rows of max_tokens {settings['max_tokens']}, each finished row replaced at "
        f"once for {settings['window_s']:g} s, then the rest run out; prompt of "
        f"{settings['prompt_tokens']} tokens; medians of {settings['repeats']} repeat(s)):"
    )
    header = (
        "C", "all at once (tok)", "raw loop (tok)", "raw staggered (tok)", "raw loop (text)",
        "isolated loop", "iso/all-at-once (paired)", "(of medians)", "iso/raw loop", "iso/raw staggered",
        "client cores",
        "parent", "worker", "raw loop cores",
    )  # fmt: skip
    lines = []
    for key, level in levels.items():
        tok_s, cores = level["tok_s"], level["cores"]
        http = cores.get("isolated", {})
        lines.append(
            (
                key,
                *(number(tok_s[kind]) for kind in KINDS),
                number(level["isolated_vs_raw_all_at_once_tokens_only"], 3)
                + ("" if level["meets_target"] is not False else " FAIL"),
                number(level["isolated_vs_raw_all_at_once_medians"], 3),
                number(level["isolated_vs_raw_closed_loop_tokens_only"], 3),
                number(level["isolated_vs_raw_staggered"], 3),
                number(http.get("client"), 2),
                number(http.get("parent"), 2),
                number(http.get("worker"), 2),
                number(cores.get("raw_tokens", {}).get("client"), 2),
            )
        )
    print_table(header, lines, ["<", *">" * 13], indent="  ")
    print(
        f"  target: isolated closed loop >= {ISOLATED_VS_RAW_MIN:g} x raw all at once (tokens "
        f"only) at every concurrency, on the median of the paired ratios (each isolated run against "
        f"the raw runs right before and after it): {verdict(summary['meets_target'])} (cores: CPU s / "
        "wall s; client: this process, the bench)"
    )
    print("  raw closed loops (tokens only), where the steps go:")
    step_header = (
        "C", "loop", "steps", "prefill steps", "ms/prefill step", "ms/decode step", "rows/step",
        "rows/decode step", "prompts/prefill step", "outside next() s", "mlx-lm prompt/decode/overhead s",
    )  # fmt: skip
    step_lines = []
    for key, level in levels.items():
        for kind in ("raw_tokens", "raw_staggered"):
            steps = level["steps"][kind]
            if steps is not None:
                step_lines.append(_step_line(key, "staggered" if kind == "raw_staggered" else "plain", steps))
    print_table(step_header, step_lines, ["<", "<", *">" * 9], indent="    ")


def _step_line(key: str, loop: str, steps: dict[str, Any]) -> tuple[str, ...]:
    own = steps["mlx_lm"]
    return (
        key,
        loop,
        str(steps["steps"]),
        f"{steps['prefill_steps']} ({number(steps['prefill_step_fraction'] * 100)}%)",
        number(steps["mean_prefill_step_ms"], 2),
        number(steps["mean_decode_step_ms"], 2),
        number(steps["rows_per_step"], 2),
        number(steps["rows_per_decode_step"], 2),
        number(steps["prompt_rows_per_prefill_step"], 2),
        number(steps["outside_s"], 3),
        "/".join(number(own[k], 2) for k in ("prompt_time_s", "decode_time_s", "overhead_time_s")),
    )
