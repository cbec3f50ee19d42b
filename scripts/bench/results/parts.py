"""The records of the parts that run on servers of their own after the main run, or alone with
--jobs-only, --closed-loop-only and --agent-only: managed jobs, the closed loop, the agent
scenario. Each gives the document's top-level keys of its part (`top_level`) and its targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.results.record import Record, run_list

if TYPE_CHECKING:
    from bench.agent_turns import Turn
    from bench.closed_loop_runs import LoopRun
    from bench.finetune import FinetuneRun
    from bench.runs import BatchRun


@dataclass(frozen=True)
class LoadAverages(Record):
    start: list[float]
    end: list[float]


@dataclass(frozen=True)
class JobsSettings(Record):
    model: str
    iters: int
    batch_size: int
    num_layers: int
    steps_per_report: int
    steps_per_eval: int
    train_examples: int
    valid_examples: int
    warm_up_reports_dropped: int
    rounds: int
    direct_command: list[str]
    serving_concurrency: int
    serving_max_tokens: int
    serving_runs: int
    host_options: list[str]  # the state directory is a temporary one
    load_average: LoadAverages


@dataclass(frozen=True)
class HostCores(Record):
    parent: float
    worker: float


@dataclass(frozen=True)
class FinetuneSide(Record):
    """One way of fine-tuning (direct, or as an mlxhost job): medians over the counted reports."""

    iterations_per_s: float
    tokens_per_s: float
    iterations_per_s_by_run: list[float]
    wall_s: float
    reports_counted: int
    host_cores: HostCores


@dataclass(frozen=True)
class FinetuneSummary(Record):
    direct: FinetuneSide
    mlxhost: FinetuneSide
    mlxhost_vs_direct: float
    mlxhost_vs_direct_by_round: list[float]
    tokens_per_s_ratio: float
    # A whole run's speed, start to end (model load and validations included), as a ratio of rates:
    end_to_end_vs_direct: float
    same_tokens_per_report: bool
    train_loss_spread: float
    target: float
    meets_target: bool | None
    runs: list[FinetuneRun] = field(metadata=run_list())


@dataclass(frozen=True)
class ServingJob(Record):
    id: str | None
    wall_s: float
    iterations: int


@dataclass(frozen=True)
class ServingRuns(Record):
    before: list[BatchRun] = field(metadata=run_list("total_tok_s"))
    after: list[BatchRun] = field(metadata=run_list("total_tok_s"))


@dataclass(frozen=True)
class ServingSummary(Record):
    before_tok_s: float
    after_tok_s: float
    after_vs_before: float
    target: float
    meets_target: bool | None
    job: ServingJob
    released_after_outcome_s: float
    runs: ServingRuns


@dataclass(frozen=True)
class JobsTargets(Record):
    finetune_vs_direct_min: float
    finetune_ok: bool | None
    serving_after_job_vs_before_min: float
    serving_after_job_ok: bool | None


@dataclass(frozen=True)
class JobsSummary(Record):
    settings: JobsSettings
    finetune: FinetuneSummary
    serving: ServingSummary

    def top_level(self) -> dict[str, Any]:
        return {
            "jobs": self.to_json(),
            "finetune_vs_direct": self.finetune.mlxhost_vs_direct,
            "serving_after_job_vs_before": self.serving.after_vs_before,
        }

    def targets(self) -> JobsTargets:
        return JobsTargets(
            self.finetune.target, self.finetune.meets_target, self.serving.target, self.serving.meets_target
        )


@dataclass(frozen=True)
class StepSummary(Record):
    """Where a raw closed loop's `generator.next()` calls went (`bench.closed_loop_runs.Steps`)."""

    prefill_steps: int
    decode_steps: int
    prefill_step_s: float
    decode_step_s: float
    rows_decoded: int
    rows_decoded_in_prefill_steps: int
    prompt_rows: int
    outside_s: float
    mlx_lm: dict[str, float]  # BatchGenerator.stats(), as mlx-lm names its counters
    steps: int
    prefill_step_fraction: float
    mean_prefill_step_ms: float
    mean_decode_step_ms: float
    rows_per_step: float
    rows_per_decode_step: float
    prompt_rows_per_prefill_step: float


@dataclass(frozen=True)
class LoopKinds(Record):
    """A figure of each kind of closed-loop run (see `bench.closed_loop`)."""

    all_at_once: float
    raw_tokens: float
    raw_staggered: float
    raw_text: float
    isolated: float


@dataclass(frozen=True)
class LoopLevel(Record):
    """One concurrency of the closed loop."""

    tok_s: LoopKinds
    cores: dict[str, dict[str, float]]  # by kind of run, then by process (client, parent, worker)
    isolated_vs_raw_all_at_once_tokens_only: float  # the median paired ratio: the target's
    paired_ratios: list[float]
    isolated_vs_raw_all_at_once_medians: float
    isolated_vs_raw_closed_loop_tokens_only: float
    isolated_vs_raw_closed_loop_text: float
    isolated_vs_raw_staggered: float
    raw_staggered_vs_all_at_once: float
    raw_closed_loop_vs_all_at_once: float
    meets_target: bool | None
    steps: dict[str, StepSummary | None]  # raw_tokens, raw_staggered, raw_text: the median run's
    http_tokens_per_row: list[int]
    runs: list[LoopRun] = field(metadata=run_list("tok_s"))


@dataclass(frozen=True)
class ClosedLoopSettings(Record):
    max_tokens: int
    window_s: float
    concurrency: list[int]
    repeats: int
    max_batch: int
    prefill_batch: int
    prompt: str
    prompt_tokens: int
    reply_reaches_max_tokens: bool
    server_options: list[str]


@dataclass(frozen=True)
class ClosedLoopTargets(Record):
    closed_loop_isolated_vs_raw_min: float
    closed_loop_ok: bool | None


@dataclass(frozen=True)
class ClosedLoopSummary(Record):
    settings: ClosedLoopSettings
    target: float
    meets_target: bool | None
    by_concurrency: dict[str, LoopLevel]  # "c1", "c4", ...

    def top_level(self) -> dict[str, Any]:
        levels = self.by_concurrency.items()
        return {
            "closed_loop": self.to_json(),
            "closed_loop_tok_s": {key: level.tok_s.to_json() for key, level in levels},
            "closed_loop_isolated_vs_raw_tokens_only": {
                key: level.isolated_vs_raw_all_at_once_tokens_only for key, level in levels
            },
            "closed_loop_isolated_vs_raw_closed_loop": {
                key: level.isolated_vs_raw_closed_loop_tokens_only for key, level in levels
            },
            "closed_loop_client_cores": {key: level.cores["isolated"].get("client") for key, level in levels},
        }

    def targets(self) -> ClosedLoopTargets:
        return ClosedLoopTargets(self.target, self.meets_target)


@dataclass(frozen=True)
class AgentSettings(Record):
    turns: int
    extra_turns: list[str]
    system_prompt_tokens: int
    tools: int
    max_tokens: int
    temperature: float
    host_options: list[str]  # and a temporary --state-dir


@dataclass(frozen=True)
class AgentTurn(Record):
    """One turn on every path; the dicts are by path (raw, mlx_lm_server, mlxhost), in the order
    the paths took the turn."""

    turn: int
    event: str  # "first", "warm", "after_kill" or "after_restart"
    prompt_tokens: dict[str, int]
    ttft_ms: dict[str, float]
    cold_ttft_ms_at_mlxhost_length: float
    mlxhost_vs_cold: float
    mlx_lm_server_vs_cold: float
    cached_tokens: dict[str, int | None]
    hit_rate: dict[str, float | None]
    completion_tokens: dict[str, int]
    disk_bytes: int | None
    disk_files: int | None


@dataclass(frozen=True)
class VsCold(Record):
    warm_median: float
    warm_max: float
    after_kill: float
    after_restart: float
    max_after_first: float


@dataclass(frozen=True)
class PeerVsCold(Record):
    warm_median: float
    warm_max: float


@dataclass(frozen=True)
class HitRates(Record):
    warm_median: float
    after_kill: float | None
    after_restart: float | None


@dataclass(frozen=True)
class AgentTargets(Record):
    agent_ttft_vs_cold_max: float
    agent_ok: bool | None


@dataclass(frozen=True)
class AgentSummary(Record):
    settings: AgentSettings
    turns: list[AgentTurn]
    mlxhost_vs_cold: VsCold
    mlx_lm_server_vs_cold: PeerVsCold
    hit_rate: dict[str, HitRates]  # mlxhost, mlx_lm_server
    disk_bytes: int
    disk_files: int
    # What happened between turns, each by its name: kill_to_ready_s, quiet_after_kill_s, ...
    events: dict[str, float]
    target: float
    ok_by_turn: dict[int, bool]
    meets_target: bool | None
    runs: list[Turn] = field(metadata=run_list("hit_rate"))

    def top_level(self) -> dict[str, Any]:
        return {
            "agent": self.to_json(),
            "agent_ttft_vs_cold": self.mlxhost_vs_cold.to_json(),
            "agent_hit_rate": {path: rates.to_json() for path, rates in self.hit_rate.items()},
            "agent_disk_bytes": self.disk_bytes,
        }

    def targets(self) -> AgentTargets:
        return AgentTargets(self.target, self.meets_target)
