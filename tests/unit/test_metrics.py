"""GET /metrics as `HostMetrics` renders it, fed as the host feeds it: sessions closed through a
`SessionRegistry` whose `on_close` is `HostMetrics.session_closed` (as app.py hooks it). No host."""

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
