"""The runs of the closed loop (`bench.closed_loop`): raw `BatchGenerator` in this process, all
rows at once or with every finished row replaced at once (tokens only, staggered, or detokenized,
each `generator.next()` timed as a prefill or a decode step), and C clients of the isolated server
over HTTP, each sending its next request the moment its last one ended."""

from __future__ import annotations

import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from mlx_lm.generate import BatchGenerator

from bench.figures import ratio
from bench.processes import CPUClock
from bench.raw import RawMLX
from bench.results.parts import StepSummary
from bench.runs import BatchRun
from bench.settings import PREFILL_BATCH
from bench.streams import HTTPBench, gather


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

    def summary(self) -> StepSummary:
        steps = self.prefill_steps + self.decode_steps
        return StepSummary(
            **asdict(self),
            steps=steps,
            prefill_step_fraction=ratio(self.prefill_steps, steps),
            mean_prefill_step_ms=ratio(self.prefill_step_s * 1e3, self.prefill_steps),
            mean_decode_step_ms=ratio(self.decode_step_s * 1e3, self.decode_steps),
            rows_per_step=ratio(self.rows_decoded, steps),
            rows_per_decode_step=ratio(self.rows_decoded - self.rows_decoded_in_prefill_steps, self.decode_steps),
            prompt_rows_per_prefill_step=ratio(self.prompt_rows, self.prefill_steps),
        )


@dataclass(frozen=True)
class LoopRun:
    concurrency: int
    kind: str  # one of `bench.closed_loop.KINDS`
    tokens: int
    rows: int  # rows (requests) finished
    wall_s: float
    cpu_s: dict[str, float]  # "client" (this process), and "parent", "worker" over HTTP
    steps: StepSummary | None = None  # raw closed loops: `Steps.summary()`
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
