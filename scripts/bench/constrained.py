"""Constrained decoding: what a grammar costs the batch it shares, and what compiling one costs.

Isolated server, with mlx_lm.server stopped, after the memory readings (the worker's grammars
would add to its RSS) and before any kill; with --constrained-only, an isolated server of its own
(`measure_constrained_only`). What the constrained streams carry depends on the model's tool-call
family (`bench.constrained_request`): `response_format` json_schema ENDLESS_SCHEMA for json_tools,
a forced call that never ends in the family's own syntax for any other. First the check requests
prove that the server constrains (and make the worker compile and cache the grammar, so that no
timed run pays for it), and one short batch of 8 opens the pooled connections. Then
max(--repeats, 5) rounds of two runs, in alternating order, each 8 greedy streams of max_tokens
at once, total tok/s: free, all 8 plain; mixed, 4 of the 8 (every other one) constrained. Same
prompt (where calls are forced, every stream lists the tools, the free ones with tool_choice
"none"), same max_tokens. Target: median
mixed / median free >= 0.9 (`bench.targets`). CPU seconds of the parent and the worker are
recorded per run: the worker's CPU per token, free and mixed, shows what the masks cost even where
a busy machine makes the wall-clock rates swing.

Grammar compile time, in this process: `mlxhost.worker.engine.grammar_compiler.Grammars` on the
tokenizer the raw path loaded, the vocabulary as wide as the model's logits (as the worker does),
max(--repeats, 5) rounds, each on fresh compilers, every compile timed around its `await` (what a
request waits, the hop to the compiling thread included; the compiler's own `compile_seconds` is
kept too):
  setup      `Grammars(tokenizer, vocab)`: the tokenizer serialized, which the worker does at load
  cold       the get_weather tool schema (kind tool_calls, in the model's family's syntax) first:
             llguidance's tokenizer is built from the serialized one, then the grammar
  other      then a different schema (a weather report, kind json_schema), the tokenizer built
  hit        the tool schema again: from the cache
  tool       the tool schema on a second compiler whose tokenizer `other` built first: the
             schema's compile alone
  tokenizer  cold - tool: building llguidance's tokenizer, an estimate
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx

from bench.constrained_request import (
    CHECK_MAX_TOKENS,
    DEFAULT_FAMILY,
    ConstrainedRequest,
    NotConstrained,
    constrained_request,
    fit_request,
    model_family,
)
from bench.figures import at_least, median, number, progress, ratio, verdict
from bench.health import isolated_worker
from bench.plan import Plan
from bench.processes import CPUClock, cores_used, describe_cores
from bench.raw import RawMLX
from bench.results.measurements import (
    CompilerTimes,
    CompileTimes,
    ConstrainedSettings,
    ConstrainedSummary,
    CoresFreeMixed,
    FreeMixed,
    StreamKinds,
    ToolSetting,
)
from bench.runs import BatchRun, describe_batch
from bench.settings import alternating
from bench.streams import HTTPBench
from bench.targets import CONSTRAINED_VS_FREE_MIN
from mlxhost.worker.engine.grammar import GrammarError, GrammarSpec, ToolSpec
from mlxhost.worker.engine.grammar_compiler import Grammars

CONSTRAINED_STREAMS = 8
CONSTRAINED_SHARE = 2  # every other stream of a mixed run is constrained: 4 of 8
CONSTRAINED_MIN_ROUNDS = 5  # rounds (one free and one mixed run each), even with --quick
CONSTRAINED_SETTLE_S = 0.5  # the pause before each run, so none runs into the one before
COMPILE_MIN_ROUNDS = 5

# A typical tool: one function, a few typed and required arguments, as OpenAI's strict mode has it.
WEATHER_TOOL: Final = ToolSpec(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
        },
        "required": ["city", "unit", "days"],
        "additionalProperties": False,
    },
)
REPORT_SPEC: Final = GrammarSpec(
    kind="json_schema",
    param="response_format.json_schema.schema",
    schema={
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temperature": {"type": "number"},
            "conditions": {"type": "string", "enum": ["sunny", "cloudy", "rain", "snow"]},
            "forecast": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "day": {"type": "integer"},
                        "high": {"type": "number"},
                        "low": {"type": "number"},
                    },
                    "required": ["day", "high", "low"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["city", "temperature", "conditions", "forecast"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True)
class MixedRun:
    """CONSTRAINED_STREAMS streams at once, some of them constrained (`bench.constrained_request`)."""

    mixed: bool
    batch: BatchRun
    constrained: list[bool]  # per stream of `batch`: whether it was constrained
    cpu_s: dict[str, float]  # CPU seconds over the run: parent, worker

    @property
    def total_tok_s(self) -> float:
        return self.batch.total_tok_s


@dataclass(frozen=True)
class CompileRun:
    """One round of compiles on fresh compilers (see the module docstring for the names)."""

    wall_ms: dict[str, float]  # around each await, the thread hop included
    compiler_ms: dict[str, float]  # Grammars.compile_seconds: 0 for a cache hit


@dataclass
class Constrained:
    """What `measure_constrained` got: the runs and the compiles, or why it could not."""

    request: ConstrainedRequest  # what the constrained streams carried
    runs: list[MixedRun] = field(default_factory=list)
    error: str | None = None  # why the streams were not measured, or stopped
    compiles: list[CompileRun] = field(default_factory=list)
    compile_error: str | None = None
    vocab_size: int = 0


def vocab_size(raw: RawMLX) -> int:
    """The width of the model's logits, which the worker's compiler is given too."""
    width = getattr(getattr(raw.model, "args", None), "vocab_size", None)
    return width if isinstance(width, int) else len(raw.tokenizer.get_vocab())


async def measure_constrained(
    client: httpx.AsyncClient, parent_pid: int, prompt: str, plan: Plan, raw: RawMLX
) -> Constrained:
    """The free and mixed runs on the isolated server of `client` (its parent's pid given), then
    the compiles in this process."""
    result = Constrained(constrained_request(model_family(raw.tokenizer)), vocab_size=vocab_size(raw))
    # A bench of its own, so that the constrained requests count in none of the path's figures.
    http = HTTPBench(client, prompt, plan.max_tokens)
    max_tokens, rounds = plan.max_tokens, plan.rounds(CONSTRAINED_MIN_ROUNDS)
    try:
        pids = {"parent": parent_pid, "worker": int((await isolated_worker(client))["pid"])}
        # A forced call's tool as the family's grammar takes it (compiled here first).
        request = await fit_request(result.request, raw.tokenizer, result.vocab_size, max_tokens)
        result.request = request
        await request.check(client, prompt, max_tokens)
        await http.batch(CONSTRAINED_STREAMS, min(max_tokens, CHECK_MAX_TOKENS), extras(True, request))
        for index, mixed in alternating(rounds):
            await anyio.sleep(CONSTRAINED_SETTLE_S)
            clock = CPUClock(pids)
            batch = await http.batch(CONSTRAINED_STREAMS, extras=extras(mixed, request))
            run = MixedRun(mixed, batch, kinds(mixed), clock.elapsed())
            result.runs.append(run)
            progress(f"  constrained {index + 1}/{rounds} {describe_run(run)}")
    except (NotConstrained, RuntimeError, httpx.HTTPError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        progress(f"warning: constrained decoding not measured: {result.error}")

    compile_rounds = plan.rounds(COMPILE_MIN_ROUNDS)
    try:
        for _ in range(compile_rounds):
            result.compiles.append(
                await compile_once(raw, result.vocab_size, tool_spec(result.request.family))
            )
    except GrammarError as exc:
        result.compile_error = f"{exc.param}: {exc.message}"
        progress(f"warning: grammar compile not measured: {result.compile_error}")
    if result.compiles:
        tool = median([r.wall_ms["tool"] for r in result.compiles])
        cold = median([r.wall_ms["cold"] for r in result.compiles])
        progress(f"  grammar compile: tool schema {tool:.2f} ms, cold {cold:.2f} ms")
    return result


def kinds(mixed: bool) -> list[bool]:
    return [mixed and i % CONSTRAINED_SHARE == 0 for i in range(CONSTRAINED_STREAMS)]


def extras(mixed: bool, request: ConstrainedRequest) -> list[dict[str, Any] | None]:
    return [request.fields if constrained else request.free_fields for constrained in kinds(mixed)]


def tool_spec(family: str | None) -> GrammarSpec:
    """The get_weather tool forced in `family`'s call syntax (json_tools for a model with none)."""
    return GrammarSpec(
        kind="tool_calls", param="tools", tools=(WEATHER_TOOL,), format=family or DEFAULT_FAMILY
    )


async def compile_once(raw: RawMLX, vocab: int, tool: GrammarSpec) -> CompileRun:
    wall: dict[str, float] = {}
    inside: dict[str, float] = {}

    async def timed(name: str, grammars: Grammars, spec: GrammarSpec) -> None:
        began = time.perf_counter()
        await grammars.compile(spec)
        wall[name] = (time.perf_counter() - began) * 1e3
        inside[name] = grammars.compile_seconds * 1e3

    began = time.perf_counter()
    first = Grammars(raw.tokenizer, vocab)
    wall["setup"] = (time.perf_counter() - began) * 1e3
    await timed("cold", first, tool)
    await timed("other", first, REPORT_SPEC)
    await timed("hit", first, tool)
    second = Grammars(raw.tokenizer, vocab)
    await second.compile(REPORT_SPEC)  # builds the second compiler's tokenizer
    await timed("tool", second, tool)
    return CompileRun(wall, inside)


def describe_run(run: MixedRun) -> str:
    kind = f"mixed ({sum(run.constrained)} constrained)" if run.mixed else "free"
    return f"{kind}: {describe_batch(run.batch)}"


def _span(values: list[int]) -> str:
    if not values:
        return "?"
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def constrained_summary(result: Constrained, max_tokens: int) -> ConstrainedSummary:
    request = result.request
    free = [r.batch.total_tok_s for r in result.runs if not r.mixed]
    mixed = [r.batch.total_tok_s for r in result.runs if r.mixed]
    mixed_vs_free = ratio(median(mixed), median(free))
    # Round by round: each round has one run of each kind, next to each other.
    pairs = list(zip(free, mixed, strict=False))

    # A forced call streams as tool_calls deltas, which `bench.streams` does not time (it times
    # text): those streams' TTFT is not known.
    untimed = request.forces_call

    def streams(mixed: bool, constrained: bool) -> list[tuple[int, float]]:
        """(tokens, TTFT ms) of every stream of that kind of run, constrained or not."""
        return [
            (tokens, math.nan if untimed and under else ttft * 1e3)
            for r in result.runs
            if r.mixed == mixed
            for tokens, ttft, under in zip(r.batch.tokens, r.batch.ttft_s, r.constrained, strict=True)
            if under == constrained
        ]

    kinds_of_stream = {
        "free": streams(False, False),
        "mixed_free": streams(True, False),
        "mixed_constrained": streams(True, True),
    }

    def cpu_ms_per_token(mixed: bool) -> float:
        """The worker's CPU per token generated, median over that kind of run."""
        runs = [r for r in result.runs if r.mixed == mixed]
        return median([ratio(r.cpu_s["worker"] * 1e3, sum(r.batch.tokens)) for r in runs])

    def cores(mixed: bool) -> dict[str, float]:
        return cores_used([(r.cpu_s, r.batch.wall_s) for r in result.runs if r.mixed == mixed])

    cpu_per_token = FreeMixed(free=cpu_ms_per_token(False), mixed=cpu_ms_per_token(True))
    names = ("setup", "cold", "other", "hit", "tool")
    compiles = result.compiles
    compile_ms = {name: median([r.wall_ms[name] for r in compiles]) for name in names}
    tokenizer_ms = median([r.wall_ms["cold"] - r.wall_ms["tool"] for r in compiles])
    return ConstrainedSummary(
        error=result.error,
        total_tok_s=FreeMixed(free=median(free), mixed=median(mixed)),
        mixed_vs_free=mixed_vs_free,
        mixed_vs_free_by_round=[ratio(m, f) for f, m in pairs],
        meets_target=at_least(mixed_vs_free, CONSTRAINED_VS_FREE_MIN),
        tokens_per_stream=StreamKinds(**{k: _span([t for t, _ in v]) for k, v in kinds_of_stream.items()}),
        ttft_ms_p50=StreamKinds(**{k: median([ms for _, ms in v]) for k, v in kinds_of_stream.items()}),
        worker_cpu_ms_per_token=cpu_per_token,
        worker_cpu_mixed_vs_free=ratio(cpu_per_token.mixed, cpu_per_token.free),
        cpu_cores=CoresFreeMixed(free=cores(False), mixed=cores(True)),
        compile_ms=CompileTimes(**compile_ms, tokenizer=tokenizer_ms),
        compiler_ms=CompilerTimes(
            **{name: median([r.compiler_ms[name] for r in compiles]) for name in names if name != "setup"}
        ),
        compile_error=result.compile_error,
        settings=ConstrainedSettings(
            streams=CONSTRAINED_STREAMS,
            constrained_streams=sum(kinds(True)),
            max_tokens=max_tokens,
            family=request.family,
            response_format=None if request.forces_call else request.fields["response_format"],
            forced_call=request.fields if request.forces_call else None,
            free_fields=request.free_fields,
            rounds=len(pairs),
            settle_s=CONSTRAINED_SETTLE_S,
            compile_rounds=len(compiles),
            vocab_size=result.vocab_size,
            tool=ToolSetting(name=WEATHER_TOOL.name, parameters=WEATHER_TOOL.parameters),
            other_schema=REPORT_SPEC.schema,
        ),
        runs=result.runs,
        compile_runs=compiles,
    )


def print_constrained(summary: ConstrainedSummary) -> None:
    settings = summary.settings
    fields = settings.forced_call or {"response_format": settings.response_format}
    carried = ConstrainedRequest(settings.family, fields).describe()
    print()
    print(
        f"constrained decoding (isolated: {settings.streams} greedy streams of max_tokens "
        f"{settings.max_tokens} at once, {settings.rounds} round(s) of a free and a mixed "
        f"run, alternating, medians; in the mixed runs {settings.constrained_streams} of them "
        f"carry {carried}):"
    )
    if summary.error:
        print(f"  not measured: {summary.error}")
    tok_s = summary.total_tok_s
    by_round = ", ".join(f"{r:.3f}" for r in summary.mixed_vs_free_by_round)
    print(
        f"  total tok/s: free {number(tok_s.free)}, mixed {number(tok_s.mixed)}: mixed_vs_free "
        f"{number(summary.mixed_vs_free, 3)} (by round {by_round or '?'}): target >= "
        f"{CONSTRAINED_VS_FREE_MIN:g}: {verdict(summary.meets_target)}"
    )
    tokens, ttft = summary.tokens_per_stream, summary.ttft_ms_p50
    print(
        f"  tokens per stream: free runs {tokens.free}; mixed runs, constrained "
        f"{tokens.mixed_constrained}, free {tokens.mixed_free}. TTFT p50: free runs "
        f"{number(ttft.free)} ms; mixed runs, constrained {number(ttft.mixed_constrained)} ms, "
        f"free {number(ttft.mixed_free)} ms"
        + (" (a forced call's TTFT is not timed: bench.streams times text)" if settings.forced_call else "")
    )
    cpu, cores = summary.worker_cpu_ms_per_token, summary.cpu_cores
    print(
        f"  the worker's CPU per token: free {number(cpu.free, 3)} ms, mixed "
        f"{number(cpu.mixed, 3)} ms: mixed / free {number(summary.worker_cpu_mixed_vs_free, 3)}"
        f" (not a target; steadier than tok/s on a busy machine). CPU cores used (of "
        f"{os.cpu_count()}): free {describe_cores(cores.free)}; mixed {describe_cores(cores.mixed)}"
    )
    ms, inside = summary.compile_ms, summary.compiler_ms
    family = settings.family or DEFAULT_FAMILY
    print(
        "  grammar compile (in this process: mlxhost.worker.engine.grammar_compiler"
        " on the model's tokenizer, "
        f"vocab {settings.vocab_size:,}; {settings.compile_rounds} round(s), medians; ms "
        "around the await, the compiler's own in parentheses):"
    )
    if summary.compile_error:
        print(f"    not measured: {summary.compile_error}")
    print(
        f"    get_weather tool schema (tool_calls, {family} syntax): {number(ms.tool, 2)} ms "
        f"({number(inside.tool, 2)}) with llguidance's tokenizer built; cold "
        f"{number(ms.cold, 2)} ms ({number(inside.cold, 2)}), of which building that tokenizer "
        f"~{number(ms.tokenizer, 2)} ms (cold - built); cache hit {number(ms.hit, 2)} ms"
    )
    print(
        f"    another schema (a weather report, json_schema), tokenizer built: "
        f"{number(ms.other, 2)} ms ({number(inside.other, 2)}); Grammars(tokenizer, vocab), "
        f"which serializes the tokenizer (the worker does it at load): {number(ms.setup, 2)} ms"
    )
