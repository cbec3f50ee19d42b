"""The batch-KV comparison's records and arithmetic (`bench.batch_kv`, --batch-kv): the KV a row
needs from the model's config, each decode run, the medians and ratios per scenario, the table,
and the document --json writes (machine, versions, model, settings, then `batch_kv`:
BatchKVSummary's fields).

Two generators: `raw`, mlx-lm's `BatchGenerator` (one `BatchKVCache` for the batch, every row
left-padded to the longest), and `rows`, mlxhost's `RowBatch` (each row its own KV cache).

A run's figure is its decode rate: the tokens the generator returned over a fixed number of steps,
after every row had its first token, over those steps' wall time. A figure below is the median
of that rate over the rounds; its ratios are of those medians, and beside them (`paired`) the
median of the rounds' own ratios: the two runs of a ratio ran in the same round, one close after
the other, so a machine that drifts moves both.

The KV a row needs (`kv_bytes_per_token`): layers x 2 (keys and values) x KV heads x head
dimensions x the dtype's bytes, for each token in its cache; plain KV only (a sliding-window
layer keeps at most its window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.figures import at_least, median, number, print_table, ratio, verdict
from bench.results.record import Record, run_list
from bench.results.serving import Machine, Model, PartSettings, Versions

GENERATORS = ("raw", "rows")
LABELS = {"raw": "BatchGenerator", "rows": "RowBatch"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# The targets: RowBatch's mixed/aligned rate (on the tiny model, on any other), RowBatch
# aligned against BatchGenerator aligned, its KV against the rows' own, and kv_bits' bytes.
MIXED_TARGET = {"tiny": 0.9, "other": 0.97}
NO_REGRESSION_TARGET = 0.95
KV_OVER_OWN_MAX = 1.2
KV_BITS_BYTES_MAX = 0.35


class ConfigError(ValueError):
    """The model's config does not say what its KV holds per token."""


@dataclass(frozen=True)
class KVGeometry:
    """What one token's KV holds in every layer, read from the model's config."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: str  # an MLX dtype's name: the activations', which the KV has

    @property
    def bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    def own_bytes(self, row_tokens: Sequence[int]) -> int:
        """The KV of rows holding these many tokens each, with nothing padded or spare."""
        return self.bytes_per_token * sum(row_tokens)


def kv_geometry(config: Mapping[str, Any]) -> KVGeometry:
    """From a model's config.json (a multimodal one's text_config where it has one)."""
    text = config.get("text_config") or config
    try:
        layers = int(text["num_hidden_layers"])
        heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    except KeyError as missing:
        raise ConfigError(f"the model's config has no {missing.args[0]!r}") from None
    dtype = str(config.get("torch_dtype") or text.get("torch_dtype") or config.get("dtype") or "float16")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"the model's dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
    return KVGeometry(layers, kv_heads, head_dim, dtype)


@dataclass(frozen=True)
class DecodeRun:
    """One generator's decode over one scenario's rows, in one round."""

    scenario: str  # "aligned", "mixed<long>", "at_once<n>", "staggered<n>", "kv_plain", "kv_bits"
    generator: str  # "raw" or "rows"
    round: int
    rows: int
    steps: int  # decode steps timed
    tokens: int  # tokens the generator returned over them
    seconds: float
    kv_bytes: int  # the generator's prompt_cache_nbytes after the last step
    row_tokens: list[int]  # each row's tokens in its cache then: prompt + generated

    @property
    def tok_s(self) -> float:
        return ratio(self.tokens, self.seconds)


def at_most(value: float, bound: float) -> bool | None:
    """value <= bound; None when there is no value (nan)."""
    return at_least(-value, -bound)


def rates(runs: Sequence[DecodeRun], scenario: str, generator: str) -> dict[int, float]:
    """The tok/s of the scenario's runs of a generator, by round."""
    return {r.round: r.tok_s for r in runs if r.scenario == scenario and r.generator == generator}


@dataclass(frozen=True)
class Compared(Record):
    """A ratio of two medians, and the median of the rounds' own ratios."""

    of_medians: float
    paired: float


def compare(ours: Mapping[int, float], theirs: Mapping[int, float]) -> Compared:
    by_round = [ratio(ours[r], theirs[r]) for r in ours if r in theirs]
    return Compared(ratio(median(list(ours.values())), median(list(theirs.values()))), median(by_round))


@dataclass(frozen=True)
class MixedFigures(Record):
    """Aligned rows against one long row among short ones, for one long length."""

    long_tokens: int
    short_tokens: int
    rows: int
    aligned_tok_s: dict[str, float]  # by generator: medians
    mixed_tok_s: dict[str, float]
    mixed_vs_aligned: dict[str, Compared]  # by generator
    rows_vs_raw_aligned: Compared  # the no-regression figure
    kv_bytes: dict[str, int]  # by generator: the mixed batch's, at the end of its last round
    own_kv_bytes: dict[str, int]  # by generator: the sum of that run's rows' own KV
    kv_over_own: dict[str, float]
    mixed_target: float
    mixed_ok: bool | None  # RowBatch's mixed/aligned (of medians) >= mixed_target
    no_regression_ok: bool | None
    kv_ok: bool | None  # RowBatch's kv_over_own <= KV_OVER_OWN_MAX


@dataclass(frozen=True)
class KVBitsFigures(Record):
    """RowBatch with quantized KV against RowBatch without, on one mixed batch of `model`."""

    model: str  # the size of the model it ran on ("quantizable" stands in for the tiny one)
    bits: int
    group_size: int
    long_tokens: int
    short_tokens: int
    rows: int
    plain_kv_bytes: int | None
    quantized_kv_bytes: int | None
    bytes_ratio: float  # quantized / plain
    plain_tok_s: float
    quantized_tok_s: float
    tok_s_ratio: Compared  # quantized / plain
    bytes_ok: bool | None  # bytes_ratio <= KV_BITS_BYTES_MAX
    skipped: str | None = None  # why it was not measured


@dataclass(frozen=True)
class StaggeredFigures(Record):
    """`rows` rows inserted one per step against all at once, each generator."""

    rows: int
    prompt_tokens: int
    tok_s: dict[str, dict[str, float]]  # "at_once" / "staggered", then generator: medians
    rows_staggered_vs_raw_at_once: Compared
    rows_staggered_vs_raw_staggered: Compared


@dataclass(frozen=True)
class BatchKVSummary(Record):
    size: str  # the main model's size ("tiny", "bench", "custom")
    rounds: int
    steps: int  # decode steps timed per run (after the last insert, for the staggered runs)
    kv_per_token_bytes: int
    geometry: KVGeometry
    mixed: list[MixedFigures]
    kv_bits: KVBitsFigures
    staggered: list[StaggeredFigures]
    runs: list[DecodeRun] = field(metadata=run_list("tok_s"))


def mixed_figures(
    runs: Sequence[DecodeRun], long: int, short: int, rows: int, geometry: KVGeometry, target: float
) -> MixedFigures:
    scenario = f"mixed{long}"
    aligned = {g: median(list(rates(runs, "aligned", g).values())) for g in GENERATORS}
    mixed = {g: median(list(rates(runs, scenario, g).values())) for g in GENERATORS}
    ratios = {g: compare(rates(runs, scenario, g), rates(runs, "aligned", g)) for g in GENERATORS}
    no_regression = compare(rates(runs, "aligned", "rows"), rates(runs, "aligned", "raw"))
    kv_bytes, own, over = {}, {}, {}
    for g in GENERATORS:
        last = max((r for r in runs if r.scenario == scenario and r.generator == g), key=lambda r: r.round)
        kv_bytes[g], own[g] = last.kv_bytes, geometry.own_bytes(last.row_tokens)
        over[g] = ratio(kv_bytes[g], own[g])
    kv_ok = at_most(over["rows"], KV_OVER_OWN_MAX)
    return MixedFigures(
        long, short, rows, aligned, mixed, ratios, no_regression, kv_bytes, own, over, target,
        at_least(ratios["rows"].of_medians, target), at_least(no_regression.of_medians, NO_REGRESSION_TARGET),
        kv_ok,
    )  # fmt: skip


def kv_bits_figures(
    runs: Sequence[DecodeRun], model: str, bits: int, group_size: int, long: int, short: int, rows: int
) -> KVBitsFigures:
    plain = [r for r in runs if r.scenario == "kv_plain"]
    quantized = [r for r in runs if r.scenario == "kv_bits"]
    plain_bytes = plain[-1].kv_bytes if plain else None
    quantized_bytes = quantized[-1].kv_bytes if quantized else None
    bytes_ratio = float("nan") if not (plain_bytes and quantized_bytes) else quantized_bytes / plain_bytes
    speeds = compare(rates(runs, "kv_bits", "rows"), rates(runs, "kv_plain", "rows"))
    return KVBitsFigures(
        model, bits, group_size, long, short, rows, plain_bytes, quantized_bytes, bytes_ratio,
        median([r.tok_s for r in plain]), median([r.tok_s for r in quantized]), speeds,
        at_most(bytes_ratio, KV_BITS_BYTES_MAX),
    )  # fmt: skip


def skipped_kv_bits(model: str, bits: int, group_size: int, reason: str) -> KVBitsFigures:
    nan = float("nan")
    return KVBitsFigures(
        model, bits, group_size, 0, 0, 0, None, None, nan, nan, nan, Compared(nan, nan), None, reason
    )


def staggered_figures(runs: Sequence[DecodeRun], rows: int, prompt_tokens: int) -> StaggeredFigures:
    tok_s = {
        mode: {g: median(list(rates(runs, f"{mode}{rows}", g).values())) for g in GENERATORS}
        for mode in ("at_once", "staggered")
    }
    ours = rates(runs, f"staggered{rows}", "rows")
    return StaggeredFigures(
        rows,
        prompt_tokens,
        tok_s,
        compare(ours, rates(runs, f"at_once{rows}", "raw")),
        compare(ours, rates(runs, f"staggered{rows}", "raw")),
    )


def _ratio_cell(compared: Compared) -> str:
    return f"{number(compared.of_medians, 2)} ({number(compared.paired, 2)})"


def mixed_rows(figures: Sequence[MixedFigures]) -> list[list[str]]:
    """One line per long length and generator."""
    lines = []
    for f in figures:
        for g in GENERATORS:
            lines.append(
                [
                    f"{f.long_tokens}+{f.rows - 1}x{f.short_tokens}",
                    LABELS[g],
                    number(f.aligned_tok_s[g]),
                    number(f.mixed_tok_s[g]),
                    _ratio_cell(f.mixed_vs_aligned[g]),
                    _ratio_cell(f.rows_vs_raw_aligned) if g == "rows" else "",
                    f"{f.kv_bytes[g] / 1e6:.2f}",
                    f"{f.own_kv_bytes[g] / 1e6:.2f}",
                    number(f.kv_over_own[g], 2),
                ]
            )
    return lines


def staggered_rows(figures: Sequence[StaggeredFigures]) -> list[list[str]]:
    return [
        [
            str(f.rows),
            *(number(f.tok_s[mode][g]) for mode in ("at_once", "staggered") for g in GENERATORS),
            _ratio_cell(f.rows_staggered_vs_raw_at_once),
            _ratio_cell(f.rows_staggered_vs_raw_staggered),
        ]
        for f in figures
    ]


def print_batch_kv(summary: BatchKVSummary) -> None:
    print(
        f"\nbatch KV: BatchGenerator against RowBatch in this process, decode only (every row past its "
        f"first token), {summary.steps} steps a run, medians of {summary.rounds} alternating rounds; "
        f"ratios of medians (paired in brackets); KV {summary.kv_per_token_bytes:,} B a token"
    )
    header = [
        "rows", "generator", "aligned tok/s", "mixed tok/s", "mixed/aligned", "rows/raw aligned",
        "KV MB", "own KV MB", "KV/own",
    ]  # fmt: skip
    print_table(header, mixed_rows(summary.mixed), ["<", "<", *[">"] * 7], indent="  ")
    for f in summary.mixed:
        print(
            f"  {f.long_tokens}: RowBatch mixed/aligned >= {f.mixed_target}: {verdict(f.mixed_ok)}; "
            f"rows/raw aligned >= {NO_REGRESSION_TARGET}: {verdict(f.no_regression_ok)}; "
            f"KV <= {KV_OVER_OWN_MAX} x own: {verdict(f.kv_ok)}"
        )
    k = summary.kv_bits
    if k.skipped:
        print(f"  kv_bits={k.bits}: skipped: {k.skipped}")
    else:
        print(
            f"  kv_bits={k.bits} (group {k.group_size}) on the {k.model} model, {k.long_tokens}+"
            f"{k.rows - 1}x{k.short_tokens}: KV {_megabytes(k.quantized_kv_bytes)} MB against "
            f"{_megabytes(k.plain_kv_bytes)} MB, {number(k.bytes_ratio, 3)} (<= {KV_BITS_BYTES_MAX}: "
            f"{verdict(k.bytes_ok)}); {number(k.quantized_tok_s)} against {number(k.plain_tok_s)} tok/s, "
            f"{_ratio_cell(k.tok_s_ratio)}"
        )
    print(f"\n  staggered: one row inserted per step, then {summary.steps} steps timed")
    header = [
        "rows", "raw at once", "rows at once", "raw staggered", "rows staggered",
        "rows stag./raw at once", "rows stag./raw stag.",
    ]  # fmt: skip
    print_table(header, staggered_rows(summary.staggered), ["<", *[">"] * 6], indent="  ")


def _megabytes(value: int | None) -> str:
    return "?" if value is None else f"{value / 1e6:.2f}"


@dataclass(frozen=True)
class BatchKVDocument(Record):
    """What --batch-kv --json writes: the run's machine, versions, model and settings, then batch_kv."""

    machine: Machine
    versions: Versions
    model: Model
    settings: PartSettings
    batch_kv: BatchKVSummary
