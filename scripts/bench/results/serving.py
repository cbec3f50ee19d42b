"""The records of the four paths' serving figures: what ran (machine, versions, model, settings),
throughput and TTFT by path and concurrency, the ratios between paths, the targets on them, the
peer's own figures and the servers' memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.raw import PromptProbe
from bench.results.record import OPTIONAL, Record, run_list
from bench.runs import BatchRun, StreamRun


@dataclass(frozen=True)
class Machine(Record):
    platform: str
    machine: str
    processor: str | None
    cpu_count: int | None
    python: str
    mlx_device: str
    load_average_at_start: list[float] | None


@dataclass(frozen=True)
class Versions(Record):
    mlx: str
    mlx_lm: str
    mlxhost_commit: str | None


@dataclass(frozen=True)
class Model(Record):
    path: str
    size: str
    parameters: int
    load_s: float
    prompt: str
    prompt_tokens: int
    reply_probe: PromptProbe


@dataclass(frozen=True)
class ServerOptions(Record):
    in_process: list[str]
    isolated: list[str]
    mlx_lm_server: list[str]
    overload: list[str]


@dataclass(frozen=True)
class RunSettings(Record):
    """A whole run's settings."""

    max_tokens: int
    repeats: int
    concurrency: list[int]
    temperature: float
    max_batch: int
    prefill_batch: int
    server_options: ServerOptions
    ttft_requests: int
    ttft_max_tokens: int


@dataclass(frozen=True)
class PartSettings(Record):
    """A --*-only run's settings."""

    max_tokens: int
    repeats: int
    concurrency: list[int]
    temperature: float
    max_batch: int
    quick: bool
    only: str | None
    jobs_only: bool


@dataclass(frozen=True)
class SingleStream(Record):
    """A path's c1 figures: one stream at a time, medians over the repeats."""

    decode_tok_s: float
    ttft_ms_p50: float  # over every single-stream request: the c1 runs and the TTFT requests
    ttft_ms_p95: float
    ttft_samples: int
    ttft_ms_p50_c1_runs: float
    e2e_tok_s: float
    total_tok_s: float  # one stream's total: its end-to-end rate
    tokens: list[int]
    runs: list[StreamRun] = field(metadata=run_list("decode_tok_s", "e2e_tok_s"))
    ttft_requests_ms: list[float]


@dataclass(frozen=True)
class Batched(Record):
    """A path's cN figures: N streams at once, medians over the repeats."""

    total_tok_s: float
    ttft_ms_p50: float  # over every stream of the cN runs, from its own start
    ttft_ms_p95: float
    tokens: list[list[int]]
    runs: list[BatchRun] = field(metadata=run_list("total_tok_s"))
    tokens_only_total_tok_s: float | None = field(default=None, metadata=OPTIONAL)  # raw only: batches that never detokenize


# A path's figures by concurrency: "c1" (one stream) and "c4", "c8", ... (N at once).
PathSummary = dict[str, SingleStream | Batched]


@dataclass(frozen=True)
class Ratios(Record):
    """path / base by concurrency (c1: decode tok/s; cN: total tok/s), c1_e2e and ttft_p50."""

    isolated_vs_raw: dict[str, float]
    isolated_vs_mlx_lm_server: dict[str, float]
    in_process_vs_raw: dict[str, float]
    in_process_vs_mlx_lm_server: dict[str, float]
    mlx_lm_server_vs_raw: dict[str, float]
    isolated_vs_in_process: dict[str, float]
    DERIVED = ("mlxhost_vs_raw",)

    @property
    def mlxhost_vs_raw(self) -> dict[str, float]:
        """The old key: the default (isolated) server."""
        return self.isolated_vs_raw


@dataclass(frozen=True)
class ByPath(Record):
    raw: float | None
    mlx_lm_server: float | None
    in_process: float | None
    isolated: float | None


@dataclass(frozen=True)
class TTFTByPath(ByPath):
    DERIVED = ("mlxhost",)

    @property
    def mlxhost(self) -> float | None:
        """The old key: the isolated server."""
        return self.isolated


@dataclass(frozen=True)
class Percentiles(Record):
    p50: float
    p95: float


@dataclass(frozen=True)
class TTFTFigures(Record):
    p50: TTFTByPath
    p95: TTFTByPath
    count: ByPath
    by_concurrency: dict[str, dict[str, Percentiles]]  # path, then "c1", "c4", ...


@dataclass(frozen=True)
class IsolatedAndRaw(Record):
    isolated: float | None
    raw: float | None


@dataclass(frozen=True)
class SpeedTargets(Record):
    """The targets on the table's figures (`bench.targets`)."""

    isolated_vs_raw_min: float
    isolated_vs_raw: dict[str, float | None]  # by concurrency
    isolated_vs_raw_ok_by_concurrency: dict[str, bool | None]
    isolated_vs_raw_ok: bool | None
    isolated_vs_mlx_lm_server_min: float
    isolated_vs_mlx_lm_server_at: str
    isolated_vs_mlx_lm_server: float | None
    isolated_vs_mlx_lm_server_ok: bool | None
    ttft_p50_slack_ms: float
    ttft_p50_ms: IsolatedAndRaw
    ttft_p50_isolated_minus_raw_ms: float | None
    ttft_ok: bool | None
    isolated_vs_raw_tokens_only: dict[str, float]  # not a target: raw batches that never detokenize


@dataclass(frozen=True)
class Peer(Record):
    """How mlx_lm.server ran."""

    command: list[str]
    options: list[str]
    listen_backlog: int
    as_shipped: bool
    ready_s: float
    # prompt_tokens_details.cached_tokens (its prompt cache) to the number of requests:
    cached_prompt_tokens: dict[str, int]


@dataclass(frozen=True)
class Memory(Record):
    """RSS in MB (psutil), and the servers' own readings beside them."""

    parent: float | None
    worker: float | None
    in_process: float | None
    mlx_lm_server: float | None
    worker_reported: float | None
    in_process_reported: float | None


@dataclass(frozen=True)
class Startup(Record):
    raw_load_s: float
    in_process_load_s: float | None
    worker_import_s: float


@dataclass(frozen=True)
class Info(Record):
    """What a run ran on: the first three keys of every document."""

    machine: Machine
    versions: Versions
    model: Model
