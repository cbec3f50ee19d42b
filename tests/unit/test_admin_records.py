"""The admin API's records: each turns into its JSON and back unchanged, the JSON keeps the shape
clients read, and what the host's producers publish parses back into the right records."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from mlxhost.config import Settings
from mlxhost.host.events import EventHub
from mlxhost.host.routes.admin import host_state
from mlxhost.host.serving.admission import Admission
from mlxhost.host.serving.coordinator import ExecutionCoordinator
from mlxhost.host.serving.relay import refusal
from mlxhost.host.serving.sessions import CancelReason, SessionRegistry
from mlxhost.host.workers.pool import ModelPool
from mlxhost.host.workers.status import WorkerState
from mlxhost.host.workers.supervisor import Supervisor
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin import (
    EVENT_TYPES,
    AdminEvent,
    AdmissionRecord,
    AdmissionRejected,
    BadRecord,
    ExecutionChanged,
    ExecutionRecord,
    ExitRecord,
    HostRecord,
    HostStarted,
    HostState,
    HostStopping,
    JobFinished,
    JobProgressed,
    JobQueued,
    JobStarted,
    MemoryReading,
    ModelDownload,
    ModelEvicted,
    ModelRecord,
    Outcome,
    RankRecord,
    SessionClosed,
    SessionOpened,
    SessionProgressed,
    SessionRecord,
    SessionsRecord,
    SpeculationReading,
    StandbyRecord,
    StreamLagged,
    StreamReset,
    UnknownEvent,
    WorkerExhausted,
    WorkerExited,
    WorkerMemory,
    WorkerReady,
    WorkerRecord,
    WorkerRestarting,
    WorkerSpawned,
    parse_event,
)
from mlxhost.wire.admin.jobs import JobProgress, JobRecord, JobResult
from mlxhost.wire.launch import SessionProgress

EXIT = ExitRecord(pid=41, code=None, signal="SIGKILL", uptime_s=2.5, ready=True, reason="hung: no answer")
NEVER_STARTED = ExitRecord(pid=None, code=None, signal=None, uptime_s=0.0, ready=False, reason="cannot start")
MEMORY = MemoryReading(active_bytes=1, cache_bytes=2, peak_bytes=3, rss_bytes=4)
SESSION = SessionRecord(
    id="s-1", model="m", stream=True, state="running", opened_at=1.5, age_s=0.25, tokens=3,
    tokens_per_s=12.5, outcome=None,
)  # fmt: skip
CLOSED = SessionRecord(
    id="s-0", model="m", stream=False, state="closed", opened_at=1.0, age_s=0.5, tokens=7,
    tokens_per_s=14.0, outcome=Outcome.failed("queue_full", "the model is at capacity"),
)  # fmt: skip
WORKER = WorkerRecord(
    id="m", model="m", state="ready", pid=42, socket="/run/w1.sock", restarts=1, in_flight=2,
    uptime_s=3.0, ready_s=0.75, last_exit=EXIT, memory=MEMORY,
)  # fmt: skip
SPECULATION = SpeculationReading(drafted_tokens=40, accepted_tokens=30, verifications=12, verified_tokens=42)
DRAFTING = WorkerRecord(**{**WORKER.__dict__, "speculation": SPECULATION})
STATE = HostState(
    seq=9,
    host=HostRecord(pid=7, started=100.0, uptime_s=5.0, accepting=True),
    workers=(WORKER, WorkerRecord(**{**WORKER.__dict__, "id": "n", "pid": None, "last_exit": None, "memory": None})),
    models=(
        ModelRecord(id="m", aliases=("small", "fast"), path="/models/m", resident=True, default=True),
        ModelRecord(id="n", aliases=(), path="/models/n", resident=False, default=False),
    ),
    sessions=SessionsRecord(opened=2, closed=1, live=(SESSION,), recent=(CLOSED,)),
    admission={"m": AdmissionRecord(max_active=4, max_queued=8, active=1, queued=0, admitted=2, rejected=1)},
    execution=ExecutionRecord(shared=0, exclusive="j-2", waiting=("s-9",), paused=("m",)),
    jobs=(
        JobRecord(
            id="j-2", kind="finetune", model="m", state="running", options={"data": "/d", "iters": 20},
            progress=JobProgress(iteration=5, total=20, train_loss=2.5, iterations_per_s=3.0), result=None,
            error=None, pid=77, created_at=1000, started_at=1001, ended_at=None,
        ),
        JobRecord(
            id="j-1", kind="quantize", model="m", state="succeeded", options={"bits": 4, "group_size": 64},
            progress=None, result=JobResult(model="m-q4-j-1", path="/state/jobs/j-1/output"), error=None,
            pid=None, created_at=900, started_at=901, ended_at=950,
        ),
    ),
)  # fmt: skip

EVENTS: list[AdminEvent] = [
    HostStarted(pid=7, models=("m", "n"), seq=1, at=1000),
    HostStopping(reason="SIGTERM", grace_s=30.0, seq=2, at=1001),
    WorkerSpawned(worker="m", model="m", pid=42),
    WorkerReady(worker="m", pid=42, ready_ms=750),
    WorkerExited(worker="m", planned=False, exit=EXIT),
    WorkerExited(worker="m", planned=True, exit=NEVER_STARTED),
    WorkerRestarting(worker="m", attempt=2, max=3, delay_ms=5000),
    WorkerExhausted(worker="m", reason="its worker keeps exiting", last_exit=EXIT),
    WorkerMemory(worker="m", memory=MEMORY),
    ModelEvicted(model="m", reason="idle_ttl"),
    ModelDownload(model="org/m", repo="org/m", state="downloading", done_bytes=10, total_bytes=100, bytes_per_s=5.0,
                  file="model.safetensors", job="j1"),  # fmt: skip
    ModelDownload(model="org/m", repo="org/m", state="failed", done_bytes=0, total_bytes=0, error="gated"),
    SessionOpened(session="s-1", model="m", stream=True),
    SessionProgressed(session="s-1", model="m", tokens=3, tokens_per_s=12.5),
    SessionClosed(session="s-1", model="m", tokens=3, age_ms=250, outcome=Outcome.completed("stop")),
    SessionClosed(session="s-2", model="m", tokens=0, age_ms=5, outcome=Outcome.cancelled(CancelReason.DEADLINE)),
    SessionClosed(session="s-3", model="m", tokens=0, age_ms=5, outcome=Outcome.failed("bad", "no good")),
    SessionClosed(
        session="s-5", model="m", tokens=9, age_ms=5, outcome=Outcome.completed("stop").with_drafts(8, 6)
    ),
    AdmissionRejected(session="s-4", model="m", active=4, queued=8),
    AdmissionRejected(model="m", active=4, queued=8),
    JobQueued(job="j-1", kind="finetune", model="m"),
    JobStarted(job="j-1", pid=77),
    JobProgressed(job="j-1", iteration=5, total=20, train_loss=2.5),
    JobProgressed(job="j-1", iteration=20, total=20, train_loss=1.5, val_loss=1.75),
    JobFinished(job="j-1", state="succeeded", model="m-lora-j-1"),
    JobFinished(job="j-2", state="failed", error="the job process exited with status 1"),
    ExecutionChanged(owner="j-1", change="waiting"),
    ExecutionChanged(owner="j-1", change="held", paused=("m", "n")),
    StreamReset(seq=5, at=2000),
    StreamLagged(seq=6, at=2001),
]

RECORDS: list[Any] = [
    EXIT, NEVER_STARTED, SESSION, CLOSED, WORKER, DRAFTING, STATE, *STATE.models, STATE.sessions, STATE.host,
    STATE.execution, *STATE.jobs,
]  # fmt: skip


def over_the_wire(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data))  # type: ignore[no-any-return]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_snapshot_record_comes_back_from_its_json(record: Any) -> None:
    assert type(record).from_json(record.to_json()) == record
    assert type(record).from_json(over_the_wire(record.to_json())) == record


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_every_event_comes_back_from_its_json(event: AdminEvent) -> None:
    assert parse_event(event.to_json()) == event
    assert parse_event(over_the_wire(event.to_json())) == event
    assert type(event).from_json(event.to_json()) == event


def test_every_event_type_has_a_record_tested_here() -> None:
    assert {e.type for e in EVENTS} == set(EVENT_TYPES)


def test_events_keep_their_wire_shape() -> None:
    """Key for key, in order, as clients (and the console) read them."""
    keys = {e.type: list(e.to_json()) for e in reversed(EVENTS)}  # the first of a type wins
    head = ["seq", "at", "type"]
    assert keys["worker.exited"] == [*head, "worker", "planned", "pid", "code", "signal", "uptime_s", "ready", "reason"]
    assert keys["worker.memory"] == [*head, "worker", "active_bytes", "cache_bytes", "peak_bytes", "rss_bytes"]
    assert keys["session.closed"] == [*head, "session", "model", "tokens", "age_ms", "kind", "finish_reason"]
    assert keys["admission.rejected"] == [*head, "session", "model", "active", "queued"]
    assert keys["worker.restarting"] == [*head, "worker", "attempt", "max", "delay_ms"]
    assert keys["stream.reset"] == head
    anonymous = AdmissionRejected(model="m", active=1, queued=2).to_json()
    assert "session" not in anonymous  # refused before a session opened: no key, not null
    failed = SessionClosed(session="s", model="m", tokens=0, age_ms=1, outcome=Outcome.failed("c", "m")).to_json()
    assert [k for k in failed if k in ("kind", "finish_reason", "reason", "code", "message")] == [
        "kind", "code", "message",
    ]  # fmt: skip
    assert HostStarted(pid=1, models=("a",)).to_json()["models"] == ["a"]
    assert WorkerExhausted(worker="m", reason="r", last_exit=EXIT).to_json()["last_exit"] == {
        "pid": 41, "code": None, "signal": "SIGKILL", "uptime_s": 2.5, "ready": True, "reason": "hung: no answer",
    }  # fmt: skip


def test_the_state_keeps_its_wire_shape() -> None:
    data = STATE.to_json()
    assert list(data) == [
        "seq", "host", "workers", "models", "sessions", "admission", "execution", "jobs", "standby",
    ]  # fmt: skip
    assert data["standby"] == []  # a host with none; one from before standby workers sends no key
    old = {k: v for k, v in data.items() if k != "standby"}
    assert HostState.from_json(old).standby == ()
    standby = StandbyRecord(pid=9, state="warming", rss_bytes=100)
    assert StandbyRecord.from_json(standby.to_json()) == standby
    assert standby.to_json() == {"pid": 9, "state": "warming", "rss_bytes": 100}
    assert list(data["workers"][0]) == [
        "id", "model", "state", "pid", "socket", "restarts", "in_flight", "uptime_s", "ready_s", "last_exit", "memory",
        "ranks",
    ]  # fmt: skip
    assert data["workers"][0]["ranks"] == []  # one process; a group lists its ranks
    rank = RankRecord(rank=1, host="mac-2", pid=42, rss_bytes=None)
    assert RankRecord.from_json(rank.to_json()) == rank
    assert data["workers"][0]["memory"] == {"active_bytes": 1, "cache_bytes": 2, "peak_bytes": 3, "rss_bytes": 4}
    assert data["workers"][1]["memory"] is None and data["workers"][1]["last_exit"] is None
    assert data["models"][0]["aliases"] == ["small", "fast"]
    assert list(data["sessions"]) == ["opened", "closed", "live", "recent"]
    assert data["sessions"]["live"][0]["outcome"] is None
    assert data["sessions"]["recent"][0]["outcome"] == {
        "kind": "failed", "code": "queue_full", "message": "the model is at capacity",
    }  # fmt: skip
    assert data["admission"]["m"]["rejected"] == 1
    assert data["execution"] == {"shared": 0, "exclusive": "j-2", "waiting": ["s-9"], "paused": ["m"]}
    assert list(data["jobs"][0]) == [
        "id", "kind", "model", "state", "options", "progress", "result", "error", "pid", "created_at", "started_at",
        "ended_at",
    ]  # fmt: skip
    assert data["jobs"][1]["result"] == {"model": "m-q4-j-1", "path": "/state/jobs/j-1/output"}


def test_a_session_s_drafts_are_sent_with_its_outcome_only_when_it_drafted() -> None:
    drafted = SessionClosed(
        session="s", model="m", tokens=9, age_ms=1, outcome=Outcome.completed("stop").with_drafts(8, 6)
    ).to_json()
    assert list(drafted)[-4:] == ["kind", "finish_reason", "drafted_tokens", "accepted_tokens"]
    assert (drafted["drafted_tokens"], drafted["accepted_tokens"]) == (8, 6)
    cancelled = Outcome.cancelled(CancelReason.CLIENT_DISCONNECTED).with_drafts(3, 0)
    assert cancelled.to_json() == {
        "kind": "cancelled", "reason": "client_disconnected", "drafted_tokens": 3, "accepted_tokens": 0,
    }  # fmt: skip
    assert Outcome.completed("stop").with_drafts(0, 0) == Outcome.completed("stop")  # none drafted: no keys


def test_a_worker_s_draft_totals_are_sent_once_it_drafted() -> None:
    assert "speculation" not in WORKER.to_json()  # as before speculation
    assert DRAFTING.to_json()["speculation"] == {
        "drafted_tokens": 40, "accepted_tokens": 30, "verifications": 12, "verified_tokens": 42,
    }  # fmt: skip
    assert WorkerRecord.from_json(WORKER.to_json()).speculation is None
    assert SPECULATION.acceptance == 0.75 and SPECULATION.tokens_per_verification == 3.5
    none_yet = SpeculationReading(0, 0, 0, 0)
    assert none_yet.acceptance is None and none_yet.tokens_per_verification is None


def test_a_state_from_a_host_before_jobs_reads_as_idle() -> None:
    data = STATE.to_json()
    del data["execution"], data["jobs"]
    state = HostState.from_json(data)
    assert state.jobs == () and state.execution.exclusive is None and state.execution.waiting == ()


def test_an_event_a_client_cannot_read_is_kept_not_raised() -> None:
    newer = {"seq": 3, "at": 9, "type": "worker.paused", "worker": "m", "why": {"nested": [1]}}
    event = parse_event(newer)
    assert isinstance(event, UnknownEvent) and event.type == "worker.paused"
    assert (event.seq, event.at) == (3, 9) and event.data == newer and event.to_json() == newer
    assert event.payload() == {"worker": "m", "why": {"nested": [1]}}
    broken = parse_event({"seq": 4, "at": 9, "type": "worker.spawned", "worker": "m"})  # no pid, no model
    assert isinstance(broken, UnknownEvent) and broken.type == "worker.spawned" and broken.seq == 4
    assert isinstance(parse_event({"type": "worker.memory", "worker": "m", "active_bytes": 1}), UnknownEvent)
    assert isinstance(parse_event({}), UnknownEvent) and parse_event({}).type == ""
    assert isinstance(parse_event({"type": None, "seq": "x"}), UnknownEvent)
    # Extra keys a newer host adds to a known event are ignored.
    assert parse_event({**WorkerReady(worker="m", pid=1, ready_ms=2).to_json(), "new": 1}) == WorkerReady(
        worker="m", pid=1, ready_ms=2
    )


def test_a_malformed_snapshot_is_a_bad_record() -> None:
    data = STATE.to_json()
    del data["workers"][0]["socket"]
    with pytest.raises(BadRecord, match="WorkerRecord"):
        HostState.from_json(data)
    with pytest.raises(ValueError):  # what a client already catches for bad JSON
        HostState.from_json({"seq": 1})
    with pytest.raises(BadRecord):
        SessionsRecord.from_json({"opened": 1, "closed": 0, "live": [None], "recent": []})


def test_the_hub_publishes_a_record_as_its_json_bounded() -> None:
    hub = EventHub()
    published = hub.publish(SessionOpened(session="s-1", model="\x1b[2J" + "m" * 10_000, stream=False))
    assert published["seq"] == 1 and published["type"] == "session.opened"
    assert list(published) == ["seq", "at", "type", "session", "model", "stream"]
    assert len(published["model"]) < 700 and "\x1b" not in published["model"]
    event = parse_event(published)
    assert isinstance(event, SessionOpened) and event.seq == 1 and event.at == published["at"]
    assert event.model.startswith("\\x1b[2J")


# -- what the producers publish, in process -------------------------------------------------


async def _events_of(hub: EventHub, after: int = 0) -> list[AdminEvent]:
    subscription = hub.subscribe(after=after)
    events: list[AdminEvent] = []
    while len(events) < hub.last_seq - after:
        events.append(parse_event(await anext(subscription)))
    await subscription.aclose()
    return events


def test_a_session_publishes_records() -> None:
    async def main() -> list[AdminEvent]:
        hub = EventHub()
        registry = SessionRegistry(hub)
        session = registry.open("m", stream=True)
        registry.progress(SessionProgress(session=session.id, tokens=4, tokens_per_s=8.0))
        registry.close(session, Outcome.cancelled(CancelReason.CLIENT_DISCONNECTED))
        refusal("m", Admission(max_active=1, max_queued=0), hub, session="s-refused")
        refusal("m", Admission(max_active=1, max_queued=0), hub)
        return await _events_of(hub)

    opened, progressed, closed, rejected, anonymous = anyio.run(main)
    assert isinstance(opened, SessionOpened) and opened.stream and opened.model == "m"
    assert progressed == SessionProgressed(
        session=opened.session, model="m", tokens=4, tokens_per_s=8.0, seq=2, at=progressed.at
    )
    assert isinstance(closed, SessionClosed) and closed.outcome == Outcome("cancelled", reason="client_disconnected")
    assert closed.tokens == 4 and closed.session == opened.session
    assert rejected == AdmissionRejected(session="s-refused", model="m", active=0, queued=0, seq=4, at=rejected.at)
    assert isinstance(anonymous, AdmissionRejected) and anonymous.session is None


def test_a_session_s_drafts_reach_its_outcome_from_its_worker_s_last_report() -> None:
    async def main() -> tuple[SessionClosed, SessionRecord]:
        hub = EventHub()
        registry = SessionRegistry(hub)
        session = registry.open("m", stream=False)
        report = SessionProgress(session.id, 20, 8.0, 5, done=True, drafted_tokens=18, accepted_tokens=11)
        registry.progress(report)
        registry.close(session, Outcome.completed("stop"))
        closed = (await _events_of(hub))[-1]
        assert isinstance(closed, SessionClosed)
        return closed, registry.recent()[0].snapshot()

    closed, record = anyio.run(main)
    assert closed.outcome == Outcome("completed", finish_reason="stop", drafted_tokens=18, accepted_tokens=11)
    assert record.outcome == closed.outcome and closed.tokens == 20


def test_a_worker_that_cannot_be_spawned_publishes_records_until_it_is_exhausted(tmp_path: Path) -> None:
    """No process runs: the worker command does not exist, so each spawn fails at once."""
    settings = Settings(
        worker_command=str(tmp_path / "no-such-worker"), restart_limit=1, crash_backoff=0.01, early_exit=0.0
    )
    spec = ModelSpec("m", str(tmp_path))

    async def main() -> tuple[list[AdminEvent], WorkerRecord]:
        hub = EventHub()
        supervisor = Supervisor(spec, tmp_path, settings, tmp_path / "w.sock", hub)
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            with anyio.fail_after(10):
                while supervisor.state is not WorkerState.EXHAUSTED:
                    await anyio.sleep(0.01)
            snapshot = supervisor.snapshot()
            await supervisor.stop()
        return await _events_of(hub), snapshot

    events, snapshot = anyio.run(main)
    assert [e.type for e in events] == ["worker.exited", "worker.restarting", "worker.exited", "worker.exhausted"]
    exited = events[0]
    assert isinstance(exited, WorkerExited) and exited.exit.pid is None and not exited.planned
    assert exited.exit.reason is not None and "cannot start the worker" in exited.exit.reason
    assert events[1] == WorkerRestarting(worker="m", attempt=1, max=1, delay_ms=0, seq=2, at=events[1].at)
    exhausted = events[-1]
    assert isinstance(exhausted, WorkerExhausted) and exhausted.last_exit == events[-2].exit  # type: ignore[attr-defined]
    assert snapshot.state == "exhausted" and snapshot.pid is None and snapshot.last_exit == exhausted.last_exit
    assert WorkerRecord.from_json(over_the_wire(snapshot.to_json())) == snapshot


def test_the_host_state_is_a_record_that_survives_the_wire(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    specs = (ModelSpec("m", str(tmp_path / "m"), aliases=("small",)), ModelSpec("n", str(tmp_path / "m")))
    settings = Settings(model=specs)

    async def main() -> HostState:
        hub = EventHub()
        sessions = SessionRegistry(hub)
        done = sessions.open("m", stream=False)
        sessions.close(done, Outcome.completed("length"))
        sessions.open("n", stream=True)
        paths = {s.id: Path(s.path) for s in specs}
        async with ModelPool.open(settings, specs, paths, tmp_path, hub) as pool:
            host = SimpleNamespace(
                events=hub, started=1.0, accepting=True, pool=pool, sessions=sessions,
                admissions={"m": Admission(max_active=2, max_queued=3)}, coordinator=ExecutionCoordinator(),
                jobs=None,
            )  # fmt: skip
            return host_state(host)

    state = anyio.run(main)
    assert state.seq == 3 and state.workers == ()
    assert [m.id for m in state.models] == ["m", "n"] and state.models[0].aliases == ("small",)
    assert state.models[0].default and not state.models[1].default and not state.models[0].resident
    assert [s.model for s in state.sessions.live] == ["n"] and state.sessions.live[0].outcome is None
    assert state.sessions.recent[0].outcome == Outcome("completed", finish_reason="length")
    assert state.admission["m"] == AdmissionRecord(max_active=2, max_queued=3, active=0, queued=0, admitted=0, rejected=0)
    assert HostState.from_json(over_the_wire(state.to_json())) == state
