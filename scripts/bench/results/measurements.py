"""The records of the measurements taken on the isolated server besides throughput: constrained
decoding, cancellation, the admin event stream (latency, the lagging subscriber, the hub alone),
kill -9 recovery and overload; and the worker group's comparison (--group-only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.results.record import Record, run_list
from bench.results.serving import Startup

if TYPE_CHECKING:
    from bench.cancel import CancelRun
    from bench.constrained import CompileRun, MixedRun
    from bench.lagging import HubRun
    from bench.overload import OverloadRun
    from bench.recovery import Recovery
    from bench.watcher import EventSample


@dataclass(frozen=True)
class FreeMixed(Record):
    free: float
    mixed: float


@dataclass(frozen=True)
class StreamKinds(Record):
    """A figure of the free runs' streams, and of the mixed runs' free and constrained ones."""

    free: Any  # tokens per stream: "32" or a span "30-32"; TTFT: ms
    mixed_free: Any
    mixed_constrained: Any


@dataclass(frozen=True)
class CoresFreeMixed(Record):
    free: dict[str, float]  # by process: parent, worker
    mixed: dict[str, float]


@dataclass(frozen=True)
class CompileTimes(Record):
    """ms: see `bench.constrained` for what each compile is."""

    setup: float
    cold: float
    other: float
    hit: float
    tool: float
    tokenizer: float


@dataclass(frozen=True)
class CompilerTimes(Record):
    cold: float
    other: float
    hit: float
    tool: float


@dataclass(frozen=True)
class ToolSetting(Record):
    name: str
    parameters: dict[str, Any]  # a JSON schema, free-form


@dataclass(frozen=True)
class ConstrainedSettings(Record):
    streams: int
    constrained_streams: int
    max_tokens: int
    family: str | None  # the model's tool-call family, as mlx-lm infers it (None: no tool calls)
    # What the constrained streams carried, as sent (free-form): a response_format (json_tools, or
    # no tool calls), or a forced call's tools and tool_choice (any other family); the other None.
    response_format: dict[str, Any] | None
    forced_call: dict[str, Any] | None
    # Where calls are forced, what every free stream carried too (the same tools, tool_choice "none"),
    # so that all have the same prompt; else None.
    free_fields: dict[str, Any] | None
    rounds: int
    settle_s: float
    compile_rounds: int
    vocab_size: int
    tool: ToolSetting
    other_schema: dict[str, Any]  # a JSON schema, free-form


@dataclass(frozen=True)
class ConstrainedSummary(Record):
    error: str | None
    total_tok_s: FreeMixed
    mixed_vs_free: float
    mixed_vs_free_by_round: list[float]
    meets_target: bool | None
    tokens_per_stream: StreamKinds
    ttft_ms_p50: StreamKinds
    worker_cpu_ms_per_token: FreeMixed
    worker_cpu_mixed_vs_free: float  # above 1: the mixed runs cost the worker more CPU per token
    cpu_cores: CoresFreeMixed
    compile_ms: CompileTimes
    compiler_ms: CompilerTimes
    compile_error: str | None
    settings: ConstrainedSettings
    runs: list[MixedRun] = field(metadata=run_list("total_tok_s"))
    compile_runs: list[CompileRun] = field(metadata=run_list())


@dataclass(frozen=True)
class Spread(Record):
    p50: float
    max: float | None


@dataclass(frozen=True)
class CancelSettings(Record):
    max_tokens: int
    closed_after_frames: int
    poll_ms: float


@dataclass(frozen=True)
class CancelSummary(Record):
    cancel_ms: Spread
    cancel_steps: Spread
    steps_after_close: Spread
    ms_per_step_c1: float  # the isolated server's single-stream decode: one decode step per token
    cancel_ms_p50_in_steps: float
    cancel_ms_max_in_steps: float
    meets_target: bool
    # The parent's records of the sessions (GET /admin/sessions), as the host wrote them.
    outcomes: list[dict[str, Any] | None]
    settings: CancelSettings
    runs: list[CancelRun] = field(metadata=run_list())


@dataclass(frozen=True)
class RejectLatency(Record):
    p50: float
    p99: float
    max: float
    count: int


@dataclass(frozen=True)
class TokSByLoad(Record):
    unloaded: float
    overloaded: float


@dataclass(frozen=True)
class CoresByLoad(Record):
    unloaded: dict[str, float]  # by process: parent, worker, client
    overloaded: dict[str, float]


@dataclass(frozen=True)
class OverloadSettings(Record):
    server_options: list[str]
    admitted_streams: int
    admitted_max_tokens: int
    extra_in_flight: int
    extra_max_tokens: int
    refill_ms: float
    refill_jitter: float
    rounds: int


@dataclass(frozen=True)
class OverloadSummary(Record):
    reject_ms: RejectLatency
    admitted_vs_unloaded: float
    admitted_vs_unloaded_by_round: list[float]
    admitted_tok_s: TokSByLoad
    rejects_per_s: float
    extra_requests: dict[str, int]  # by how they ended: "429", "closed unanswered (queued)", ...
    cpu_cores: CoresByLoad
    parent_cpu_ms_per_429: float
    rejected_by_parent: int
    problems: dict[str, int]  # what 429s lacked, and how many
    reject_ok: bool | None
    admitted_ok: bool
    settings: OverloadSettings
    runs: list[OverloadRun] = field(metadata=run_list("admitted_tok_s", "rejects_per_s"))


@dataclass(frozen=True)
class LatencyStats(Record):
    p50: float
    p95: float
    max: float
    count: int


@dataclass(frozen=True)
class WorkerExited(LatencyStats):
    """Each kill -9 to its worker.exited event's arrival."""

    missing: int
    publish_to_arrival_ms: LatencyStats
    ok: bool | None


@dataclass(frozen=True)
class EventSettings(Record):
    requests: int
    max_tokens: int


@dataclass(frozen=True)
class EventLatency(LatencyStats):
    """Over the session events; its own p50, p95, max and count first."""

    by_type: dict[str, LatencyStats]  # session.opened, session.closed
    publish_to_arrival_ms: LatencyStats
    worker_exited: WorkerExited
    meets_target: bool
    types_seen: dict[str, int]  # every event type the subscriber saw, counted
    subscriber_error: str | None
    settings: EventSettings
    samples: list[EventSample] = field(metadata=run_list())
    worker_exited_samples: list[EventSample] = field(metadata=run_list())


@dataclass(frozen=True)
class LaggingRead(Record):
    """What the lagging subscriber had queued for it, read after a run."""

    bytes: int
    events: int
    last_type: str | None
    dropped: bool
    stream_ended: bool


@dataclass(frozen=True)
class HubFigures(Record):
    """The event hub alone, in this process (`bench.hub`)."""

    events: int
    events_per_s: float
    wall_s: float
    publish_s: float
    received_by_reader: int
    reader_kept: bool
    dropped_subscribers: int
    lagging_got: int
    lagging_last_type: str | None
    lagging_dropped: bool


@dataclass(frozen=True)
class BySubscribers(Record):
    no_subscriber: Any  # tok/s, or CPU cores by process
    with_subscribers: Any


@dataclass(frozen=True)
class EventsSettings(Record):
    streams: int
    max_tokens: int
    rounds: int
    lagging_rcvbuf: int
    hub_events: int
    subscriber_buffer: int


@dataclass(frozen=True)
class EventsSummary(Record):
    hub_events_per_s: float
    lagging_subscriber_ratio: float
    lagging_subscriber_ratio_by_round: list[float]
    tok_s: BySubscribers
    cpu_cores: BySubscribers
    events_published_per_run: list[int | None]
    events_seen_by_reader_per_run: list[int | None]
    lagging_dropped: list[bool]
    lagging_received: list[LaggingRead]
    hub_micro: HubFigures
    hub_ok: bool
    lagging_ok: bool
    settings: EventsSettings
    runs: list[HubRun] = field(metadata=run_list("total_tok_s"))


@dataclass(frozen=True)
class RecoverySummary(Record):
    """Medians over the kills, and how the worker's start splits (`startup`)."""

    recovery_s: float
    worker_ready_s: float
    respawn_ready_s: float
    model_load_s: float | None
    model_load_from: str | None  # "worker", "in_process" or None
    slack_s: float
    meets_target: bool | None
    ready_slack_s: float
    meets_ready_target: bool
    runs: list[Recovery] = field(metadata=run_list("meets_target", "meets_ready_target"))
    startup: Startup | None = None


@dataclass(frozen=True)
class GroupFigures(Record):
    """--group-only: a worker group of ranks against one worker."""

    ranks: int
    backend: str
    sharding: str
    max_tokens: int
    paths: dict[str, dict[str, dict[str, float]]]  # "single"/"group", then "c1", ..., tok_s, ttft_s
    ready_s: dict[str, float]
    group_vs_single: dict[str, float]
    ttft_group_vs_single: dict[str, float]
    collective_ms_per_step: float
