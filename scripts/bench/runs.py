"""The records of generation runs every path produces: one stream, N streams started together, and
all of one path's runs (`Measurements`). Rates come from the tokens actually generated."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StreamRun:
    """One stream, timed from the call (request start)."""

    tokens: int
    ttft_s: float  # call to the first token
    first_to_last_s: float  # first token to last token
    total_s: float  # call to the end (raw: the last token; HTTP: the stream's end)
    text_frames: int  # responses (raw) or SSE frames (HTTP) that carried text

    @property
    def decode_tok_s(self) -> float:
        if self.tokens < 2 or self.first_to_last_s <= 0:
            return float("nan")
        return (self.tokens - 1) / self.first_to_last_s

    @property
    def e2e_tok_s(self) -> float:
        return self.tokens / self.total_s


@dataclass(frozen=True)
class BatchRun:
    """N streams started together, timed from the first start to the last finish."""

    tokens: list[int]  # per stream
    wall_s: float
    ttft_s: list[float] = field(default_factory=list)  # per stream: its start to its first token

    @property
    def total_tok_s(self) -> float:
        return sum(self.tokens) / self.wall_s


@dataclass
class Measurements:
    single: list[StreamRun] = field(default_factory=list)
    batches: dict[int, list[BatchRun]] = field(default_factory=dict)
    # raw only: the same batches with no detokenizing, tokens alone (a floor no server can reach)
    tokens_only: dict[int, list[BatchRun]] = field(default_factory=dict)
    ttft_probes: list[StreamRun] = field(default_factory=list)  # the TTFT requests


def describe_stream(run: StreamRun) -> str:
    return (
        f"{run.tokens} tokens, decode {run.decode_tok_s:.1f} tok/s, "
        f"TTFT {run.ttft_s * 1e3:.1f} ms, end-to-end {run.e2e_tok_s:.1f} tok/s, "
        f"{run.text_frames} text frames"
    )


def describe_batch(run: BatchRun) -> str:
    return f"{sum(run.tokens)} tokens in {run.wall_s:.2f} s, {run.total_tok_s:.1f} tok/s"
