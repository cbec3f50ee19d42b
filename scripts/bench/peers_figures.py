"""The peers comparison's records and arithmetic (`bench.peers`, --peers): one usage per response,
each server's runs, the medians and ratios per concurrency, the table, and the document --json
writes (machine, versions, model, settings, then `peers`: PeersSummary's fields).

A server's figure at a concurrency is the median, over the rounds, of its aggregate generated
tokens/s: the completion tokens of all the round's streams (from their usage) over the time from
the first request's start to the last stream's end. `ratios` are ratios of those medians;
`paired_ratios` the median of the rounds' own ratios (the two servers' runs of one round are
neighbours in time, so a machine that drifts moves both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.figures import median, number, print_table, ratio
from bench.results.record import Record, run_list
from bench.results.serving import Machine, Model, PartSettings, Versions

PEERS = ("mlxhost", "vllm_mlx", "mlx_lm_server")  # the order of a round's first turn
LABELS = {"mlxhost": "mlxhost", "vllm_mlx": "vllm-mlx", "mlx_lm_server": "mlx_lm.server"}
COMPARED = ("vllm_mlx", "mlx_lm_server")  # mlxhost / each of these


class UsageError(RuntimeError):
    """A response's usage is missing, or its copies disagree."""


def one_usage(usages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The usage of one response, from every usage the stream carried. vllm-mlx sends it twice (on
    its last content chunk and again on a chunk of its own): the copies are the same figures, so
    one is taken; adding them up would count the response's tokens twice."""
    if not usages:
        raise UsageError("the response carried no usage")
    first = usages[0]
    for other in usages[1:]:
        if dict(other) != dict(first):
            raise UsageError(f"the response's usage copies disagree: {dict(first)} and {dict(other)}")
    return first


def in_turn(round_number: int) -> tuple[str, ...]:
    """The servers in the order of round `round_number`, rotating, so that none is always first."""
    shift = round_number % len(PEERS)
    return PEERS[shift:] + PEERS[:shift]


@dataclass(frozen=True)
class PeerBatch:
    """One server's streams of one round, started together."""

    server: str
    concurrency: int
    round: int
    wall_s: float  # the first request's start to the last stream's end
    completion_tokens: list[int]  # per stream, from its one usage
    prompt_tokens: list[int]
    cached_tokens: list[int | None]  # usage.prompt_tokens_details.cached_tokens, where sent

    @property
    def tok_s(self) -> float:
        return ratio(sum(self.completion_tokens), self.wall_s)


@dataclass(frozen=True)
class PeerServer(Record):
    """How a server was run, or why it was not."""

    command: list[str] | None
    versions: dict[str, str]  # the packages it ran on
    ready_s: float | None  # start to its first answer
    skipped: str | None = None


@dataclass(frozen=True)
class PeerFigures(Record):
    """One server at one concurrency, over the rounds."""

    tok_s: float  # median of tok_s_by_round
    tok_s_by_round: list[float]
    responses: int
    short_responses: int  # responses with fewer (or more) completion tokens than max_tokens
    cached_prompt_tokens: int  # over every response: prompt-cache hits (distinct prompts: ~0)


@dataclass(frozen=True)
class PeersSummary(Record):
    max_tokens: int
    rounds: int
    concurrency: list[int]
    first_order: list[str]  # round 0's order; it rotates by one each round
    servers: dict[str, PeerServer]
    figures: dict[str, dict[str, PeerFigures]]  # by server, then "cN"
    ratios: dict[str, dict[str, float]]  # "mlxhost_vs_<peer>", then "cN": ratio of the medians
    paired_ratios: dict[str, dict[str, float]]  # the same, the median of the rounds' ratios
    runs: list[PeerBatch] = field(metadata=run_list("tok_s"))


def peer_figures(batches: Sequence[PeerBatch], max_tokens: int) -> PeerFigures:
    rates = [batch.tok_s for batch in batches]
    counts = [count for batch in batches for count in batch.completion_tokens]
    cached = [c for batch in batches for c in batch.cached_tokens if c]
    return PeerFigures(
        tok_s=median(rates),
        tok_s_by_round=rates,
        responses=len(counts),
        short_responses=sum(1 for count in counts if count != max_tokens),
        cached_prompt_tokens=sum(cached),
    )


def summarize(
    runs: Sequence[PeerBatch],
    servers: Mapping[str, PeerServer],
    max_tokens: int,
    rounds: int,
    concurrency: Sequence[int],
) -> PeersSummary:
    """Medians and ratios per concurrency; a server without runs (skipped) has none, and its
    ratios are NaN."""
    figures: dict[str, dict[str, PeerFigures]] = {}
    for name in PEERS:
        by_level = {}
        for level in concurrency:
            batches = [b for b in runs if b.server == name and b.concurrency == level]
            if batches:
                by_level[f"c{level}"] = peer_figures(batches, max_tokens)
        if by_level:
            figures[name] = by_level
    ratios: dict[str, dict[str, float]] = {}
    paired: dict[str, dict[str, float]] = {}
    for peer in COMPARED:
        key = ratio_key(peer)
        ratios[key], paired[key] = {}, {}
        for level in concurrency:
            ours = _rates(runs, "mlxhost", level)
            theirs = _rates(runs, peer, level)
            ratios[key][f"c{level}"] = ratio(median(list(ours.values())), median(list(theirs.values())))
            by_round = [ratio(ours[r], theirs[r]) for r in ours if r in theirs]
            paired[key][f"c{level}"] = median(by_round)
    return PeersSummary(
        max_tokens=max_tokens,
        rounds=rounds,
        concurrency=list(concurrency),
        first_order=list(in_turn(0)),
        servers=dict(servers),
        figures=figures,
        ratios=ratios,
        paired_ratios=paired,
        runs=list(runs),
    )


def _rates(runs: Sequence[PeerBatch], name: str, level: int) -> dict[int, float]:
    return {b.round: b.tok_s for b in runs if b.server == name and b.concurrency == level}


def table_rows(summary: PeersSummary) -> list[list[str]]:
    """One row per concurrency: each server's median tok/s, the two ratios (paired in brackets),
    and each server's responses that did not run to max_tokens."""
    rows = []
    for level in summary.concurrency:
        key = f"c{level}"
        cells = [key]
        for name in PEERS:
            found = summary.figures.get(name, {}).get(key)
            cells.append(number(found.tok_s) if found else "-")
        for peer in COMPARED:
            of = ratio_key(peer)
            of_medians, paired = summary.ratios[of][key], summary.paired_ratios[of][key]
            cells.append(f"{number(of_medians, 2)} ({number(paired, 2)})")
        shorts = [summary.figures.get(name, {}).get(key) for name in PEERS]
        cells.append("/".join("-" if s is None else str(s.short_responses) for s in shorts))
        rows.append(cells)
    return rows


def ratio_key(peer: str) -> str:
    return f"mlxhost_vs_{peer}"


def print_peers(summary: PeersSummary) -> None:
    print(
        f"\npeers: aggregate generated tok/s, medians of {summary.rounds} alternating rounds, "
        f"max_tokens {summary.max_tokens}, distinct prompts per stream and round, greedy"
    )
    header = [
        "streams", *(f"{LABELS[name]} tok/s" for name in PEERS),
        *(f"mlxhost/{LABELS[peer]} (paired)" for peer in COMPARED), "short responses",
    ]  # fmt: skip
    print_table(header, table_rows(summary), ["<", ">", ">", ">", ">", ">", ">"], indent="  ")
    print(f"  short responses: completion tokens != max_tokens, {'/'.join(LABELS[n] for n in PEERS)}")
    for name, server in summary.servers.items():
        if server.skipped:
            print(f"  {LABELS[name]}: skipped: {server.skipped.splitlines()[0]}")
        elif server.ready_s is not None and not math.isnan(server.ready_s):
            versions = ", ".join(f"{k} {v}" for k, v in server.versions.items())
            print(f"  {LABELS[name]}: ready in {server.ready_s:.1f} s; {versions}")


@dataclass(frozen=True)
class PeersDocument(Record):
    """What --peers --json writes: the run's machine, versions, model and settings, then peers."""

    machine: Machine
    versions: Versions
    model: Model
    settings: PartSettings
    peers: PeersSummary
