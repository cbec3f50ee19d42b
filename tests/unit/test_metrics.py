"""GET /metrics as `HostMetrics` renders it, fed as the host feeds it: sessions closed through a
`SessionRegistry` whose `on_close` is `HostMetrics.session_closed` (as app.py hooks it), and the
host's state as a scrape reads it (its workers' draft totals). No host."""

from __future__ import annotations

import anyio
from prometheus_client.parser import text_string_to_metric_families

from mlxhost.host.routes.metrics import HostMetrics
from mlxhost.host.serving.sessions import CancelReason, Outcome, SessionRegistry
from mlxhost.wire.admin import HostState
from mlxhost.wire.launch import SessionProgress

IDLE = HostState.from_json({
    "seq": 0, "host": {"pid": 1, "started": 0.0, "uptime_s": 1.0, "accepting": True}, "workers": [],
    "models": [], "sessions": {"opened": 0, "closed": 0, "live": [], "recent": []}, "admission": {},
})  # fmt: skip


class Scrape:
    """A rendering of /metrics, read back with prometheus-client's own parser."""

    def __init__(self, text: bytes) -> None:
        self.samples = [s for family in text_string_to_metric_families(text.decode()) for s in family.samples]

    def of(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        """The samples of one series, by their labels."""
        return {frozenset(s.labels.items()): s.value for s in self.samples if s.name == name}


def labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


def closed_sessions() -> Scrape:
    """Two embed sessions and a rerank session completed, an embed session cancelled, a generation."""

    async def main() -> bytes:
        metrics = HostMetrics(lambda: IDLE)
        registry = SessionRegistry(on_close=metrics.session_closed)  # as app.py hooks it

        def pooled(model: str, kind: str, inputs: int, tokens: int, outcome: Outcome) -> None:
            session = registry.open(model, stream=False, kind=kind)
            report = SessionProgress(session.id, 0, 0.0, prompt_tokens=tokens, done=True, inputs=inputs)
            registry.progress(report)  # as its worker reports it, once done
            registry.close(session, outcome)

        pooled("bge", "embed", 64, 12_345, Outcome.completed(None))
        pooled("bge", "embed", 3, 40, Outcome.completed(None))
        pooled("bge", "embed", 8, 100, Outcome.cancelled(CancelReason.CLIENT_DISCONNECTED))
        pooled("ranker", "rerank", 10, 900, Outcome.completed(None))
        generation = registry.open("qwen", stream=True)
        registry.progress(SessionProgress(generation.id, 16, 20.0, prompt_tokens=7, done=True))
        registry.close(generation, Outcome.completed("length"))
        return metrics.render()

    return Scrape(anyio.run(main))


def test_completed_embed_and_rerank_sessions_count_their_inputs_and_tokens() -> None:
    scrape = closed_sessions()
    embed, rerank = labels(model="bge", kind="embed"), labels(model="ranker", kind="rerank")
    # The cancelled embed session counts in neither; the generation has no series here.
    assert scrape.of("mlxhost_pooled_inputs_total") == {embed: 67.0, rerank: 10.0}
    assert scrape.of("mlxhost_pooled_tokens_total") == {embed: 12_385.0, rerank: 900.0}


def test_sessions_closed_are_counted_by_kind() -> None:
    def closed(model: str, kind: str, outcome: str, reason: str) -> frozenset[tuple[str, str]]:
        return labels(model=model, kind=kind, outcome=outcome, reason=reason)

    assert closed_sessions().of("mlxhost_sessions_closed_total") == {
        closed("bge", "embed", "completed", ""): 2.0,
        closed("bge", "embed", "cancelled", "client_disconnected"): 1.0,
        closed("ranker", "rerank", "completed", ""): 1.0,
        closed("qwen", "generate", "completed", "length"): 1.0,
    }


def test_a_generations_tokens_read_as_before() -> None:
    tokens = closed_sessions().of("mlxhost_tokens_total")
    assert tokens[labels(model="qwen", kind="completion")] == 16.0
    assert tokens[labels(model="qwen", kind="prompt")] == 7.0
    # A pooled session's tokens are prompt tokens too, whatever its outcome.
    assert tokens[labels(model="bge", kind="prompt")] == 12_485.0
    assert labels(model="bge", kind="completion") not in tokens


def drafting_host() -> Scrape:
    """Two models' workers: one that drafted (40 drafts, 30 accepted, in 12 verifications that made
    42 tokens), one that never did (speculate off, or nothing to draft yet)."""
    worker = {
        "state": "ready", "pid": 42, "socket": "/run/w.sock", "restarts": 0, "in_flight": 0, "uptime_s": 1.0,
        "ready_s": 0.5, "last_exit": None, "memory": None,
    }  # fmt: skip
    speculation = {"drafted_tokens": 40, "accepted_tokens": 30, "verifications": 12, "verified_tokens": 42}
    state = HostState.from_json({
        **IDLE.to_json(),
        "workers": [
            {**worker, "id": "qwen", "model": "qwen", "speculation": speculation},
            {**worker, "id": "llama", "model": "llama"},
        ],
    })  # fmt: skip
    return Scrape(HostMetrics(lambda: state).render())


def test_a_worker_s_drafts_are_counted_by_model() -> None:
    scrape = drafting_host()
    qwen = labels(model="qwen")
    assert scrape.of("mlxhost_drafted_tokens_total") == {qwen: 40.0}
    assert scrape.of("mlxhost_accepted_draft_tokens_total") == {qwen: 30.0}
    assert scrape.of("mlxhost_verifications_total") == {qwen: 12.0}
    assert scrape.of("mlxhost_verified_tokens_total") == {qwen: 42.0}


def test_the_acceptance_rate_and_tokens_per_verification_are_gauges() -> None:
    scrape = drafting_host()
    assert scrape.of("mlxhost_draft_acceptance_ratio") == {labels(model="qwen"): 0.75}
    assert scrape.of("mlxhost_tokens_per_verification") == {labels(model="qwen"): 3.5}


def test_a_host_whose_workers_never_drafted_has_no_draft_series() -> None:
    scrape = Scrape(HostMetrics(lambda: IDLE).render())
    assert scrape.of("mlxhost_drafted_tokens_total") == {}
    assert scrape.of("mlxhost_draft_acceptance_ratio") == {}
