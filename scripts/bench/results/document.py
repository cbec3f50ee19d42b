"""The two documents --json writes: a whole run's (`BenchDocument`) and a --*-only run's
(`PartDocument`), each composed of the records of its measurements. Their `to_json` spells out the
top-level layout, copies and old names included, that the package's docstring documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.results.measurements import (
    CancelSummary,
    ConstrainedSummary,
    EventLatency,
    EventsSummary,
    GroupFigures,
    OverloadSummary,
    RecoverySummary,
)
from bench.results.parts import (
    AgentSummary,
    AgentTargets,
    ClosedLoopSummary,
    ClosedLoopTargets,
    JobsSummary,
    JobsTargets,
)
from bench.results.record import Record, encode
from bench.results.serving import (
    Machine,
    Memory,
    Model,
    PartSettings,
    PathSummary,
    Peer,
    Ratios,
    RunSettings,
    SpeedTargets,
    TTFTFigures,
    Versions,
)


@dataclass(frozen=True)
class RecoveryTargets(Record):
    """recovery_s <= the model's load time + recovery_slack_s (the load alone, without interpreter
    start and imports, as the respawned worker reports it); the older target beside it,
    recovery_s <= worker_ready_s + recovery_ready_slack_s."""

    recovery_slack_s: float
    model_load_s: float | None
    recovery_ok: bool | None
    recovery_ready_slack_s: float
    recovery_ok_vs_worker_ready: bool

    @classmethod
    def of(cls, recovery: RecoverySummary) -> RecoveryTargets:
        return cls(
            recovery.slack_s, recovery.model_load_s, recovery.meets_target, recovery.ready_slack_s,
            recovery.meets_ready_target,
        )  # fmt: skip


@dataclass(frozen=True)
class Targets(Record):
    """Every target of a whole run, with its bound and its verdict (None: could not be judged)."""

    speed: SpeedTargets
    parent_rss_mb_max: float
    parent_rss_ok: bool | None
    recovery: RecoveryTargets
    constrained_vs_free_min: float
    constrained_ok: bool | None
    cancel_steps_max: int
    cancel_ok: bool
    reject_ms_p99_below: float
    reject_ok: bool | None
    admitted_vs_unloaded_min: float
    admitted_ok: bool
    event_latency_p95_ms_max: float
    event_latency_ok: bool
    hub_events_per_s_min: float
    hub_ok: bool
    lagging_subscriber_ratio_min: float
    lagging_ok: bool
    jobs: JobsTargets
    closed_loop: ClosedLoopTargets
    agent: AgentTargets

    def to_json(self) -> dict[str, Any]:
        recovery = self.recovery.to_json()
        # recovery_ok_vs_model_load: the older name of recovery_ok, kept after it.
        recovery = {
            **{key: recovery[key] for key in ("recovery_slack_s", "model_load_s", "recovery_ok")},
            "recovery_ok_vs_model_load": self.recovery.recovery_ok,
            **{key: recovery[key] for key in ("recovery_ready_slack_s", "recovery_ok_vs_worker_ready")},
        }
        return {
            **self.speed.to_json(),
            "parent_rss_mb_max": self.parent_rss_mb_max,
            "parent_rss_ok": self.parent_rss_ok,
            **recovery,
            "constrained_vs_free_min": self.constrained_vs_free_min,
            "constrained_ok": self.constrained_ok,
            "cancel_steps_max": self.cancel_steps_max,
            "cancel_ok": self.cancel_ok,
            "reject_ms_p99_below": self.reject_ms_p99_below,
            "reject_ok": self.reject_ok,
            "admitted_vs_unloaded_min": self.admitted_vs_unloaded_min,
            "admitted_ok": self.admitted_ok,
            "event_latency_p95_ms_max": self.event_latency_p95_ms_max,
            "event_latency_ok": self.event_latency_ok,
            "hub_events_per_s_min": self.hub_events_per_s_min,
            "hub_ok": self.hub_ok,
            "lagging_subscriber_ratio_min": self.lagging_subscriber_ratio_min,
            "lagging_ok": self.lagging_ok,
            **self.jobs.to_json(),
            **self.closed_loop.to_json(),
            **self.agent.to_json(),
        }


@dataclass(frozen=True)
class BenchDocument(Record):
    """A whole run: every measurement."""

    machine: Machine
    versions: Versions
    model: Model
    settings: RunSettings
    results: dict[str, PathSummary]  # raw, mlx_lm_server, in_process, isolated
    ratios: Ratios
    ttft_ms: TTFTFigures
    mlx_lm_server: Peer
    stream_retries: dict[str, dict[str, int]]  # by path: streams tried again, by what failed
    cached_prompt_tokens: dict[str, dict[str, int]]  # by path: cached_tokens to how many requests
    rss_mb: Memory
    recovery: RecoverySummary
    constrained: ConstrainedSummary
    cancel: CancelSummary
    overload: OverloadSummary
    targets: Targets
    # Each mlxhost server's engine counters as its /health reports them: the host's own document.
    server_engine_statistics: dict[str, Any]
    prompt_tokens_served: dict[str, int]  # by HTTP path: usage.prompt_tokens of the prompt
    chart: str | None
    event_latency: EventLatency
    events: EventsSummary
    jobs: JobsSummary
    closed_loop: ClosedLoopSummary
    agent: AgentSummary

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine.to_json(),
            "versions": self.versions.to_json(),
            "model": self.model.to_json(),
            "settings": self.settings.to_json(),
            "results": encode(self.results),
            "ratios": self.ratios.to_json(),
            "ttft_ms": self.ttft_ms.to_json(),
            "mlx_lm_server": self.mlx_lm_server.to_json(),
            "stream_retries": self.stream_retries,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "rss_mb": self.rss_mb.to_json(),
            "recovery_s": self.recovery.recovery_s,
            "worker_ready_s": self.recovery.worker_ready_s,
            "recovery": self.recovery.to_json(),
            "constrained_vs_free": self.constrained.mixed_vs_free,
            "grammar_compile_ms": self.constrained.compile_ms.to_json(),
            "constrained": self.constrained.to_json(),
            "cancel_ms": self.cancel.cancel_ms.to_json(),
            "cancel_steps": self.cancel.cancel_steps.to_json(),
            "cancel": self.cancel.to_json(),
            "overload": self.overload.to_json(),
            "targets": self.targets.to_json(),
            "server_engine_statistics": self.server_engine_statistics,
            "prompt_tokens_served": self.prompt_tokens_served,
            "chart": self.chart,
            "event_latency_ms": self.event_latency.to_json(),
            "events": self.events.to_json(),
            **self.jobs.top_level(),
            **self.closed_loop.top_level(),
            **self.agent.top_level(),
        }


Part = JobsSummary | ClosedLoopSummary | AgentSummary | GroupFigures | RecoverySummary | ConstrainedSummary


@dataclass(frozen=True)
class PartDocument(Record):
    """A --jobs-only, --closed-loop-only, --agent-only, --group-only, --recovery-only or
    --constrained-only run: what it ran on, and that part's keys alone."""

    machine: Machine
    versions: Versions
    model: Model
    settings: PartSettings
    part: Part

    def to_json(self) -> dict[str, Any]:
        head = {
            "machine": self.machine.to_json(),
            "versions": self.versions.to_json(),
            "model": self.model.to_json(),
            "settings": self.settings.to_json(),
        }
        part = self.part
        if isinstance(part, GroupFigures):
            return {**head, "group": part.to_json()}
        if isinstance(part, ConstrainedSummary):
            # Imported here: bench.targets imports these records, so a module-level import would
            # be circular.
            from bench.targets import CONSTRAINED_VS_FREE_MIN

            # The whole run's keys for it, and its target (as Targets writes it).
            return {
                **head,
                "constrained_vs_free": part.mixed_vs_free,
                "grammar_compile_ms": part.compile_ms.to_json(),
                "constrained": part.to_json(),
                "targets": {
                    "constrained_vs_free_min": CONSTRAINED_VS_FREE_MIN,
                    "constrained_ok": part.meets_target,
                },
            }
        if isinstance(part, RecoverySummary):
            return {
                **head,
                "recovery_s": part.recovery_s,
                "worker_ready_s": part.worker_ready_s,
                "recovery": part.to_json(),
                "targets": RecoveryTargets.of(part).to_json(),
            }
        return {**head, **part.top_level(), "targets": part.targets().to_json()}
