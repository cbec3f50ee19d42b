"""The embeddings measurement's records and arithmetic (`bench.embeddings`, --embeddings): the runs,
the medians and paired ratios per input shape and batch, where a request's time goes, the 1,000
code chunks, the table, and the document --json writes (machine, versions, settings, then
`embeddings`: EmbeddingsSummary's fields, the embedding model measured among them).

A run sends (host arms) or computes (raw) a set of inputs in requests of `batch` inputs, one
request at a time; its figures are inputs/s and tokens/s (the inputs' own tokens, no padding).
Every arm of a cell gets the same inputs, so the ratio host/raw of inputs/s is raw seconds over
host seconds; it is taken within each round (the arms of a round run back to back) and the median
of those paired ratios is the cell's ratio. The other figures are medians over the rounds.

Arms: `raw` the forward in this process; `host` the isolated server (parent and worker) sent the
texts, floats back, as a client would; and, for the short inputs at the largest batch, the same
request with one thing taken away: `host_ids` token ids instead of texts (no tokenization in the
worker), `host_base64` vectors as base64 (no float formatting or parsing), `worker` straight to
the worker's private socket (no relay through the parent). Beside them, timed in this process on
a request of each shape at the largest batch: encoding its texts (the worker's tokenizer is the
same), the request's JSON, the answer's JSON (the worker's own `vectors_body`) and parsing it.
`Breakdown` sets them side by side; a figure of an arm a shape did not run is NaN (null).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.figures import at_least, median, number, print_table, ratio, verdict
from bench.results.record import Record, run_list
from bench.results.serving import Machine, PartSettings, Versions

SHAPES = ("short", "mixed")
BATCHES = (1, 16, 64)
ARMS = ("raw", "host", "host_ids", "host_base64", "worker")
PLAIN_ARMS = ("raw", "host")  # every cell's
EXTRA_ARMS = ("host_ids", "host_base64", "worker")  # the short inputs' at the largest batch
TARGET = 0.85  # host/raw inputs/s at the largest batch: the issue's
CHUNKS = "code"  # the 1,000 code chunks' shape


@dataclass(frozen=True)
class EmbeddingRun:
    """One arm's inputs of one cell in one round, sent in requests of `batch`."""

    shape: str  # "short", "mixed" or "code"
    batch: int
    arm: str  # one of ARMS
    round: int
    inputs: int
    tokens: int  # the inputs' own, as the server's usage counts them
    requests: int
    seconds: float

    @property
    def inputs_per_s(self) -> float:
        return ratio(self.inputs, self.seconds)

    @property
    def tokens_per_s(self) -> float:
        return ratio(self.tokens, self.seconds)

    @property
    def ms_per_request(self) -> float:
        return ratio(self.seconds * 1e3, self.requests)


@dataclass(frozen=True)
class ComponentRun:
    """One request of a shape at the largest batch, its parts timed in this process (seconds)."""

    shape: str
    round: int
    tokenize_s: float  # each text encoded, as the worker's tokenizer thread does
    request_json_s: float  # the request's body written
    answer_json_s: float  # the worker's vectors_body: the answer's JSON, floats
    parse_json_s: float  # that answer read back into arrays, as the client does


@dataclass(frozen=True)
class CellFigures(Record):
    """One shape at one batch: the host's and the raw figures (medians) and their paired ratio."""

    inputs: int  # a run's
    tokens: int
    requests: int
    host_inputs_per_s: float
    raw_inputs_per_s: float
    host_tokens_per_s: float
    raw_tokens_per_s: float
    host_vs_raw: float  # median of the rounds' raw seconds / host seconds
    host_vs_raw_by_round: list[float]
    meets_target: bool | None  # host_vs_raw >= TARGET, at the largest batch; None elsewhere


@dataclass(frozen=True)
class Breakdown(Record):
    """Where one request of the largest batch spends its time, ms, medians over the rounds; the
    differences are between those medians."""

    host_ms: float
    raw_pass_ms: float  # the forward alone, batched as the worker batches
    worker_direct_ms: float
    host_token_ids_ms: float
    host_base64_ms: float
    tokenize_ms: float
    request_json_ms: float
    answer_json_ms: float
    parse_json_ms: float

    DERIVED = ("overhead_ms", "relay_ms", "tokenization_ms", "float_json_ms", "rest_ms")

    @property
    def overhead_ms(self) -> float:
        """All the host adds to the pass."""
        return self.host_ms - self.raw_pass_ms

    @property
    def relay_ms(self) -> float:
        """The parent: its session, admission and the HTTP relay to the worker and back."""
        return self.host_ms - self.worker_direct_ms

    @property
    def tokenization_ms(self) -> float:
        """Texts against token ids, in the host: encoding, its thread hop, the texts' bytes."""
        return self.host_ms - self.host_token_ids_ms

    @property
    def float_json_ms(self) -> float:
        """Floats against base64, both ways."""
        return self.host_ms - self.host_base64_ms

    @property
    def rest_ms(self) -> float:
        """The worker's own time past the pass and what this process timed of its parts: HTTP,
        validation, the queue and the generation thread's hand-overs."""
        parts = self.tokenize_ms + self.request_json_ms + self.answer_json_ms + self.parse_json_ms
        return self.worker_direct_ms - self.raw_pass_ms - parts


@dataclass(frozen=True)
class ChunkFigures(Record):
    """The code chunks embedded in requests of `batch`: seconds for all of them, medians."""

    chunks: int
    tokens: int
    batch: int
    requests: int
    host_s: float
    raw_s: float
    host_s_by_round: list[float]
    raw_s_by_round: list[float]
    host_vs_raw: float  # median of the rounds' raw seconds / host seconds

    DERIVED = ("host_chunks_per_s", "raw_chunks_per_s")

    @property
    def host_chunks_per_s(self) -> float:
        return ratio(self.chunks, self.host_s)

    @property
    def raw_chunks_per_s(self) -> float:
        return ratio(self.chunks, self.raw_s)


@dataclass(frozen=True)
class EmbeddingModel(Record):
    path: str
    size: str
    parameters: int
    width: int
    raw_load_s: float
    host_ready_s: float


@dataclass(frozen=True)
class EmbeddingsSetup(Record):
    short_tokens: int
    mixed_tokens: list[int]  # the bounds lengths are drawn from
    code_tokens: int
    pass_tokens: int  # the worker's default budget of one pass, which the raw path follows
    pass_rows: int
    server_options: list[str]


@dataclass(frozen=True)
class Agreement(Record):
    """That both paths computed the same thing, batched alike: on one request of mixed lengths,
    the largest difference of a vector's value between them and the passes each made (the
    worker's from its /health `pooled` counters); and whether the server counted the tokens this
    side did in every request."""

    max_abs_difference: float
    raw_passes: int
    worker_passes: int
    raw_padded_tokens: int
    worker_padded_tokens: int
    tokens_agree: bool


@dataclass(frozen=True)
class EmbeddingsSummary(Record):
    model: EmbeddingModel
    setup: EmbeddingsSetup
    rounds: int
    target: float
    cells: dict[str, dict[str, CellFigures]]  # by shape, then "b<batch>"
    breakdown: dict[str, Breakdown]  # by shape, at the largest batch
    chunks: ChunkFigures
    agreement: Agreement
    runs: list[EmbeddingRun] = field(metadata=run_list("inputs_per_s", "tokens_per_s", "ms_per_request"))
    components: list[ComponentRun] = field(default_factory=list)


def _of(runs: Sequence[EmbeddingRun], shape: str, batch: int, arm: str) -> list[EmbeddingRun]:
    return sorted(
        (r for r in runs if r.shape == shape and r.batch == batch and r.arm == arm), key=lambda r: r.round
    )


def paired_ratios(hosts: Sequence[EmbeddingRun], raws: Sequence[EmbeddingRun]) -> list[float]:
    """Raw seconds over host seconds, round by round (a round with only one of them is left out)."""
    raw_by_round = {r.round: r.seconds for r in raws}
    return [ratio(raw_by_round[h.round], h.seconds) for h in hosts if h.round in raw_by_round]


def cell_figures(runs: Sequence[EmbeddingRun], shape: str, batch: int, largest: int) -> CellFigures | None:
    """A cell's figures; None when it has no runs of either arm."""
    hosts, raws = _of(runs, shape, batch, "host"), _of(runs, shape, batch, "raw")
    if not hosts or not raws:
        return None
    paired = paired_ratios(hosts, raws)
    host_vs_raw = median(paired)
    return CellFigures(
        inputs=hosts[0].inputs,
        tokens=hosts[0].tokens,
        requests=hosts[0].requests,
        host_inputs_per_s=median([r.inputs_per_s for r in hosts]),
        raw_inputs_per_s=median([r.inputs_per_s for r in raws]),
        host_tokens_per_s=median([r.tokens_per_s for r in hosts]),
        raw_tokens_per_s=median([r.tokens_per_s for r in raws]),
        host_vs_raw=host_vs_raw,
        host_vs_raw_by_round=paired,
        meets_target=at_least(host_vs_raw, TARGET) if batch == largest else None,
    )


def breakdown_of(
    runs: Sequence[EmbeddingRun], components: Sequence[ComponentRun], shape: str, batch: int
) -> Breakdown:
    def ms(arm: str) -> float:
        return median([r.ms_per_request for r in _of(runs, shape, batch, arm)])

    mine = [c for c in components if c.shape == shape]

    def part(name: str) -> float:
        return median([getattr(c, name) * 1e3 for c in mine])

    return Breakdown(
        host_ms=ms("host"),
        raw_pass_ms=ms("raw"),
        worker_direct_ms=ms("worker"),
        host_token_ids_ms=ms("host_ids"),
        host_base64_ms=ms("host_base64"),
        tokenize_ms=part("tokenize_s"),
        request_json_ms=part("request_json_s"),
        answer_json_ms=part("answer_json_s"),
        parse_json_ms=part("parse_json_s"),
    )


def chunk_figures(runs: Sequence[EmbeddingRun], batch: int) -> ChunkFigures:
    hosts, raws = _of(runs, CHUNKS, batch, "host"), _of(runs, CHUNKS, batch, "raw")
    first = (hosts or raws)[0]
    return ChunkFigures(
        chunks=first.inputs,
        tokens=first.tokens,
        batch=batch,
        requests=first.requests,
        host_s=median([r.seconds for r in hosts]),
        raw_s=median([r.seconds for r in raws]),
        host_s_by_round=[r.seconds for r in hosts],
        raw_s_by_round=[r.seconds for r in raws],
        host_vs_raw=median(paired_ratios(hosts, raws)),
    )


def cells_of(runs: Sequence[EmbeddingRun], batches: Sequence[int]) -> dict[str, dict[str, CellFigures]]:
    largest = max(batches)
    cells: dict[str, dict[str, CellFigures]] = {}
    for shape in SHAPES:
        found = {f"b{b}": f for b in batches if (f := cell_figures(runs, shape, b, largest)) is not None}
        if found:
            cells[shape] = found
    return cells


def shape_label(shape: str, setup: EmbeddingsSetup) -> str:
    if shape == "short":
        return f"short (~{setup.short_tokens} tokens)"
    low, high = setup.mixed_tokens
    return f"mixed ({low}..{high} tokens)"


def table_rows(summary: EmbeddingsSummary) -> list[list[str]]:
    """One row per shape and batch: inputs/s and tokens/s of the host and raw, and their ratio."""
    rows = []
    for shape, cells in summary.cells.items():
        for key, cell in cells.items():
            rows.append(
                [
                    shape_label(shape, summary.setup), key[1:],
                    number(cell.host_inputs_per_s), number(cell.raw_inputs_per_s),
                    number(cell.host_tokens_per_s, 0), number(cell.raw_tokens_per_s, 0),
                    number(cell.host_vs_raw, 2),
                    "" if cell.meets_target is None else verdict(cell.meets_target),
                ]
            )  # fmt: skip
    return rows


def breakdown_lines(shape: str, found: Breakdown) -> list[str]:
    """Where a request's time goes, as text; the host's other arms only where they ran."""
    ms = lambda value: number(value, 1)  # noqa: E731
    lines = [
        f"{shape}: host {ms(found.host_ms)}, raw pass {ms(found.raw_pass_ms)}: the host adds "
        f"{ms(found.overhead_ms)}"
    ]
    if not math.isnan(found.worker_direct_ms):
        lines.append(
            f"  without the parent (worker's socket) {ms(found.worker_direct_ms)}: relay "
            f"{ms(found.relay_ms)}; token ids for texts {ms(found.host_token_ids_ms)}: tokenization "
            f"{ms(found.tokenization_ms)}; base64 for floats {ms(found.host_base64_ms)}: float JSON "
            f"{ms(found.float_json_ms)}"
        )
    rest = "" if math.isnan(found.rest_ms) else f"; the worker's rest {ms(found.rest_ms)}"
    lines.append(
        f"  in this process: encoding the texts {ms(found.tokenize_ms)}, request JSON "
        f"{ms(found.request_json_ms)}, answer JSON {ms(found.answer_json_ms)}, parsing it "
        f"{ms(found.parse_json_ms)}{rest}"
    )
    return lines


def print_embeddings(summary: EmbeddingsSummary) -> None:
    model, setup = summary.model, summary.setup
    print(
        f"\nembeddings: {model.path} ({model.parameters:,} parameters, width {model.width}); "
        f"isolated host against the raw forward in this process, one request at a time; medians of "
        f"{summary.rounds} alternating rounds"
    )
    largest = max(int(key[1:]) for cells in summary.cells.values() for key in cells)
    header = ["inputs", "batch", "host in/s", "raw in/s", "host tok/s", "raw tok/s", "host/raw"]
    header.append(f">= {summary.target} at {largest}")
    print_table(header, table_rows(summary), ["<", ">", ">", ">", ">", ">", ">", ">"], indent="  ")
    chunks = summary.chunks
    print(
        f"  {chunks.chunks:,} code chunks (~{setup.code_tokens} tokens, {chunks.tokens:,} in all) in "
        f"{chunks.requests} requests of up to {chunks.batch}: host {number(chunks.host_s, 2)} s, raw "
        f"{number(chunks.raw_s, 2)} s (host/raw {number(chunks.host_vs_raw, 2)})"
    )
    print(f"  where a request of {largest} goes (ms, medians):")
    for shape, found in summary.breakdown.items():
        for line in breakdown_lines(shape, found):
            print(f"    {line}")
    agreement = summary.agreement
    print(
        f"  same vectors: largest difference {agreement.max_abs_difference:.2g}; token counts "
        f"{'agree' if agreement.tokens_agree else 'DIFFER'}; a mixed request in {agreement.raw_passes} "
        f"passes raw, {agreement.worker_passes} in the worker ({agreement.raw_padded_tokens:,} and "
        f"{agreement.worker_padded_tokens:,} padded tokens)"
    )


@dataclass(frozen=True)
class EmbeddingsDocument(Record):
    """What --embeddings --json writes: the run's machine, versions and settings, then embeddings
    (whose `model` is the embedding model measured, not the chat model the run also loads)."""

    machine: Machine
    versions: Versions
    settings: PartSettings
    embeddings: EmbeddingsSummary
