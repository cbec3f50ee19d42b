"""GET /metrics: the host in Prometheus text format, through prometheus-client.

Counters and histograms are fed as sessions close; gauges (running and waiting sessions, worker
state, restarts, memory, warm standbys and what they cost, the execution lease and jobs) are read
from the live host at scrape time, so they are never stale. So is speculative decoding: each
worker's totals as it last reported them (they start again from 0 with a new process, as any
process's counters do) and the two ratios they give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mlxhost.host.serving.sessions import Session
from mlxhost.host.workers.status import WorkerState
from mlxhost.wire.admin import HostState

__all__ = ["CONTENT_TYPE", "HostMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HostMetrics:
    def __init__(self, read_state: Callable[[], HostState]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "mlxhost_requests",
            "Requests answered, by model and HTTP status",
            ["model", "status"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "mlxhost_tokens",
            "Tokens processed, by model and kind (prompt, completion)",
            ["model", "kind"],
            registry=self.registry,
        )
        self.outcomes = Counter(
            "mlxhost_sessions_closed",
            "Sessions closed, by model, kind (generate, embed, rerank), outcome and reason",
            ["model", "kind", "outcome", "reason"],
            registry=self.registry,
        )
        # Embed and rerank sessions generate nothing: what they did is inputs pooled and the
        # tokens those inputs were (their prompt tokens, also in mlxhost_tokens).
        self.pooled_inputs = Counter(
            "mlxhost_pooled_inputs",
            "Inputs of completed embed and rerank sessions (texts, documents), by model and kind",
            ["model", "kind"],
            registry=self.registry,
        )
        self.pooled_tokens = Counter(
            "mlxhost_pooled_tokens",
            "Tokens of the inputs of completed embed and rerank sessions, by model and kind",
            ["model", "kind"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "mlxhost_time_to_first_token_seconds",
            "From arrival to the first streamed text",
            ["model"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.token_latency = Histogram(
            "mlxhost_token_latency_seconds",
            "Average time per generated token after the first",
            ["model"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
            registry=self.registry,
        )
        self.registry.register(_LiveCollector(read_state))

    def session_closed(self, session: Session) -> None:
        model = session.model
        if session.status is not None:
            self.requests.labels(model, str(session.status)).inc()
        outcome = session.outcome
        if outcome is not None:
            reason = outcome.reason or outcome.finish_reason or outcome.code or ""
            self.outcomes.labels(model, session.kind, outcome.kind, reason).inc()
            if session.kind != "generate" and outcome.kind == "completed":
                self.pooled_inputs.labels(model, session.kind).inc(session.inputs)
                self.pooled_tokens.labels(model, session.kind).inc(session.prompt_tokens)
        if session.prompt_tokens:
            self.tokens.labels(model, "prompt").inc(session.prompt_tokens)
        if session.tokens:
            self.tokens.labels(model, "completion").inc(session.tokens)
        if session.first_token_at is not None:
            self.ttft.labels(model).observe(session.first_token_at - session.opened_clock)
            if session.tokens > 1 and session.closed_clock is not None:
                per_token = (session.closed_clock - session.first_token_at) / (session.tokens - 1)
                self.token_latency.labels(model).observe(per_token)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _LiveCollector(Collector):
    def __init__(self, read_state: Callable[[], HostState]) -> None:
        self._read_state = read_state

    def collect(self) -> Iterator[Metric]:
        state = self._read_state()
        running = GaugeMetricFamily(
            "mlxhost_sessions_running", "Sessions running, by model", labels=["model"]
        )
        waiting = GaugeMetricFamily(
            "mlxhost_sessions_waiting", "Sessions waiting, by model", labels=["model"]
        )
        rejected = CounterMetricFamily(
            "mlxhost_admission_rejected", "Requests refused with 429, by model", labels=["model"]
        )
        for model, stats in state.admission.items():
            running.add_metric([model], stats.active)
            waiting.add_metric([model], stats.queued)
            rejected.add_metric([model], stats.rejected)
        restarts = CounterMetricFamily("mlxhost_worker_restarts", "Worker respawns", labels=["worker"])
        worker_state = GaugeMetricFamily(
            "mlxhost_worker_state", "1 for the state each worker is in", labels=["worker", "state"]
        )
        memory = GaugeMetricFamily(
            "mlxhost_worker_memory_bytes", "The worker's latest memory reading", labels=["worker", "kind"]
        )
        ranks = GaugeMetricFamily(
            "mlxhost_worker_rank_rss_bytes",
            "Resident memory of each rank of a worker group on this machine",
            labels=["worker", "rank", "host"],
        )
        for worker in state.workers:
            restarts.add_metric([worker.id], worker.restarts)
            for rank in worker.ranks:
                if rank.rss_bytes is not None:
                    ranks.add_metric([worker.id, str(rank.rank), rank.host], rank.rss_bytes)
            for name in WorkerState:
                worker_state.add_metric([worker.id, name.value], 1.0 if worker.state == name else 0.0)
            for kind, value in (worker.memory.__dict__ if worker.memory else {}).items():
                memory.add_metric([worker.id, kind.removesuffix("_bytes")], value)
        yield from (running, waiting, rejected, restarts, worker_state, memory, ranks)
        yield from _standby(state)
        yield from _execution(state)
        yield from _speculation(state)


def _standby(state: HostState) -> Iterator[Metric]:
    """The warm interpreters waiting to become workers, by state, and the memory they hold together."""
    count = GaugeMetricFamily(
        "mlxhost_standby_workers", "Warm standby interpreters, by state (warming, ready)", labels=["state"]
    )
    for name in ("warming", "ready"):
        count.add_metric([name], sum(s.state == name for s in state.standby))
    yield count
    yield GaugeMetricFamily(
        "mlxhost_standby_rss_bytes",
        "Resident memory of the warm standby interpreters, together",
        sum(s.rss_bytes for s in state.standby),
    )


def _execution(state: HostState) -> Iterator[Metric]:
    """Who holds the execution lease, who waits for it, and the jobs in line or running."""
    execution = state.execution
    yield GaugeMetricFamily(
        "mlxhost_execution_shared", "Sessions holding a shared execution lease", execution.shared
    )
    yield GaugeMetricFamily(
        "mlxhost_execution_exclusive",
        "1 while a job holds the exclusive execution lease",
        1.0 if execution.exclusive else 0.0,
    )
    yield GaugeMetricFamily(
        "mlxhost_execution_waiting",
        "Sessions and jobs waiting for an execution lease",
        len(execution.waiting),
    )
    yield GaugeMetricFamily("mlxhost_workers_paused", "Workers paused for a job", len(execution.paused))
    jobs = GaugeMetricFamily(
        "mlxhost_jobs", "Jobs queued or running, by kind and state", labels=["kind", "state"]
    )
    counts: dict[tuple[str, str], int] = {}
    for job in state.jobs:
        if job.state in ("queued", "running"):
            counts[(job.kind, job.state)] = counts.get((job.kind, job.state), 0) + 1
    for (kind, job_state), count in sorted(counts.items()):
        jobs.add_metric([kind, job_state], count)
    yield jobs


def _speculation(state: HostState) -> Iterator[Metric]:
    """Each model's worker's draft tokens verified and accepted, its verifications (a row's steps
    that verified drafts) and the tokens they produced; and the acceptance rate and tokens per
    verification they give, once there is something to divide by."""
    model = ["model"]
    drafted = CounterMetricFamily(
        "mlxhost_drafted_tokens", "Draft tokens verified (speculative decoding), by model", labels=model
    )
    accepted = CounterMetricFamily(
        "mlxhost_accepted_draft_tokens", "Draft tokens the model accepted, by model", labels=model
    )
    verifications = CounterMetricFamily(
        "mlxhost_verifications",
        "Decode steps of a sequence that verified draft tokens, by model",
        labels=model,
    )
    verified = CounterMetricFamily(
        "mlxhost_verified_tokens",
        "Tokens the verifications produced: accepted drafts and the model's own next token, by model",
        labels=model,
    )
    acceptance = GaugeMetricFamily(
        "mlxhost_draft_acceptance_ratio",
        "Accepted draft tokens over drafted ones, since the worker started, by model",
        labels=model,
    )
    per_verification = GaugeMetricFamily(
        "mlxhost_tokens_per_verification",
        "Tokens produced per verification, since the worker started, by model",
        labels=model,
    )
    for worker in state.workers:
        reading = worker.speculation
        if reading is None:
            continue
        drafted.add_metric([worker.model], reading.drafted_tokens)
        accepted.add_metric([worker.model], reading.accepted_tokens)
        verifications.add_metric([worker.model], reading.verifications)
        verified.add_metric([worker.model], reading.verified_tokens)
        if (rate := reading.acceptance) is not None:
            acceptance.add_metric([worker.model], rate)
        if (tokens := reading.tokens_per_verification) is not None:
            per_verification.add_metric([worker.model], tokens)
    yield from (drafted, accepted, verifications, verified, acceptance, per_verification)
