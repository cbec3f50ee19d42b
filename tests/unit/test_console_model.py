"""The console's fold of the host's state snapshot and event stream into what it shows, and the
words it shows them in. No host and no Textual app: `ConsoleModel` is plain data.

The fixed state and events are written as the host sends them (JSON) and read with the records of
`mlxhost.wire.admin`, as the console reads them. They are also what the console's snapshot tests
draw (tests/e2e/test_tui_fixed_state.py imports them).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

import mlxhost_tui.parts
from mlxhost.wire.admin import AdminEvent, HostState, StreamReset, UnknownEvent, parse_event
from mlxhost_tui.model import ConsoleModel, Note, strip_controls
from mlxhost_tui.parts import FADE_S, LINGER_S
from mlxhost_tui.text import bar, describe, sparkline

NOW = 1_700_000_000.0
MIB = 2**20
EVIL = "\x1b]0;pwned\x07\x1b[2J"
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def worker_data(name: str, pid: int, restarts: int, uptime: float, memory: int) -> dict[str, Any]:
    last_exit = {"pid": pid - 1, "code": None, "signal": "SIGKILL", "uptime_s": 30.0, "ready": True, "reason": None}
    return {
        "id": name, "model": name, "state": "ready", "pid": pid, "socket": f"/tmp/{name}.sock",
        "restarts": restarts, "in_flight": 1, "uptime_s": uptime, "ready_s": 1.2,
        "last_exit": last_exit if restarts else None,
        "memory": {"active_bytes": memory, "cache_bytes": 0, "peak_bytes": memory, "rss_bytes": 3 * memory},
        "ranks": [],
    }  # fmt: skip


def session_data(sid: str, model: str, state: str, age: float, tokens: int, rate: float) -> dict[str, Any]:
    return {
        "id": sid, "model": model, "stream": True, "state": state, "opened_at": NOW - age, "age_s": age,
        "tokens": tokens, "tokens_per_s": rate, "outcome": None,
    }  # fmt: skip


STATE_JSON: dict[str, Any] = {
    "seq": 40,
    "host": {"pid": 4242, "started": NOW - 3725, "uptime_s": 3725.0, "accepting": True},
    "workers": [worker_data("qwen-0.5b", 5001, 0, 3700.0, 512 * MIB), worker_data("llama-3b", 5002, 1, 61.0, 2048 * MIB)],
    "models": [
        {"id": "qwen-0.5b", "aliases": [], "path": "/m/q", "resident": True, "default": True},
        {"id": "llama-3b", "aliases": [], "path": "/m/l", "resident": True, "default": False},
    ],
    "sessions": {
        "opened": 12,
        "closed": 10,
        "live": [
            session_data("s-0123456789ab", "qwen-0.5b", "running", 12.5, 310, 24.8),
            session_data("s-abcdef012345", "llama-3b", "queued", 0.4, 0, 0.0),
        ],
        "recent": [],
    },
    "admission": {
        "qwen-0.5b": {"max_active": 4, "max_queued": 16, "active": 1, "queued": 0, "admitted": 11, "rejected": 0},
        "llama-3b": {"max_active": 1, "max_queued": 2, "active": 1, "queued": 1, "admitted": 1, "rejected": 3},
    },
}


# The first worker speculates: 75% of its 40 drafts accepted, 3.5 tokens per verification.
STATE_JSON["workers"][0]["speculation"] = {
    "drafted_tokens": 40, "accepted_tokens": 30, "verifications": 12, "verified_tokens": 42,
}  # fmt: skip
STATE = HostState.from_json(STATE_JSON)


def state_with(change: Callable[[dict[str, Any]], object]) -> HostState:
    """The fixed state, with `change` made to its JSON."""
    data = STATE.to_json()
    change(data)
    return HostState.from_json(data)


def event(seq: int, type: str, ago: float, **fields: Any) -> AdminEvent:
    return parse_event({"seq": seq, "at": int((NOW - ago) * 1000), "type": type, **fields})


def memory(seq: int, ago: float, mib: int) -> AdminEvent:
    return event(seq, "worker.memory", ago, worker="qwen-0.5b", active_bytes=mib * MIB, cache_bytes=0, peak_bytes=0, rss_bytes=0)


EVENTS = [
    event(38, "session.opened", 9, session="s-0123456789ab", model="qwen-0.5b", stream=True),  # in the snapshot
    memory(41, 5, 520),
    event(42, "session.opened", 4, session="s-fedcba987654", model="qwen-0.5b", stream=False),
    memory(43, 4, 600),
    event(44, "session.progress", 3.5, session="s-0123456789ab", model="qwen-0.5b", tokens=330, tokens_per_s=25.1),
    memory(45, 3, 580),
    event(46, "session.closed", 2, session="s-fedcba987654", model="qwen-0.5b", tokens=16, age_ms=2000, kind="completed", finish_reason="length"),
    event(47, "admission.rejected", 1.6, model="llama-3b", active=1, queued=2),  # refused at the door: no session
    event(48, "admission.rejected", 1.5, model="llama-3b", active=1, queued=2),
    event(49, "worker.exited", 1.2, worker="llama-3b", planned=False, pid=5002, code=None, signal="SIGKILL", uptime_s=61.0, ready=True, reason=None),
    event(50, "worker.restarting", 1.1, worker="llama-3b", attempt=2, max=5, delay_ms=0),
    event(51, "worker.spawned", 1.0, worker="llama-3b", model="llama-3b", pid=5003),
    event(52, "session.closed", 0.5, session="s-abcdef012345", model="llama-3b", tokens=0, age_ms=900, kind="cancelled", reason="worker_exited"),
]  # fmt: skip



def with_controls(data: dict[str, Any]) -> None:
    """Control characters in the state where the console shows its text."""
    data["workers"][1]["last_exit"]["reason"] = f"exit {EVIL}"
    data["sessions"]["live"][1]["model"] = f"llama{EVIL}"
    data["sessions"]["live"][0]["id"] = f"s-{EVIL}"


EVENTS_WITH_CONTROLS = [
    event(53, "session.opened", 0.4, session=f"s-{EVIL}x", model=EVIL, stream=True),
    event(54, "session.closed", 0.3, session=f"s-{EVIL}x", model=EVIL, tokens=0, age_ms=100,
          kind="failed", code=f"bad{EVIL}", message=f"unknown field '{EVIL}'"),
    event(55, "worker.exited", 0.2, worker="qwen-0.5b", planned=False, pid=5001, code=1, signal=None,
          uptime_s=3.0, ready=True, reason=EVIL),
    event(56, f"custom{EVIL}", 0.1, detail=EVIL),
]  # fmt: skip


def folded() -> ConsoleModel:
    model = ConsoleModel()
    model.ingest(NOW, STATE, EVENTS)
    return model


def test_the_fixed_state_and_events_read_as_records() -> None:
    assert not [e for e in EVENTS if isinstance(e, UnknownEvent)]  # each has its type's fields
    assert [e.type for e in EVENTS_WITH_CONTROLS if isinstance(e, UnknownEvent)] == [f"custom{EVIL}"]
    idle = {"shared": 0, "exclusive": None, "waiting": [], "paused": []}
    assert STATE.to_json() == {**STATE_JSON, "execution": idle, "jobs": [], "standby": []}


def test_a_snapshot_shows_its_host_workers_sessions_and_gauges() -> None:
    model = ConsoleModel.from_snapshot(STATE, NOW)
    assert model.identity == (4242, NOW - 3725) and model.seq == 40
    assert model.host is not None and (model.host.pid, model.host.started, model.host.opened) == (4242, NOW - 3725, 12)
    qwen, llama = model.workers["qwen-0.5b"], model.workers["llama-3b"]
    assert (qwen.state, qwen.pid, qwen.restarts, qwen.uptime(NOW), qwen.memory) == ("ready", 5001, 0, 3700.0, 512 * MIB)
    assert list(qwen.readings) == [512 * MIB] and qwen.exit_text() == "-"
    assert llama.exit_text() == "SIGKILL"
    assert list(model.sessions) == ["s-0123456789ab", "s-abcdef012345"] and model.live == 2
    running = model.sessions["s-0123456789ab"]
    assert (running.shown_state(), running.tokens, running.age(NOW)) == ("running", 310, 12.5)
    assert model.gauges["llama-3b"].rejected == 3 and model.gauges["qwen-0.5b"].max_active == 4


def test_the_fixed_state_then_its_events_fold_in_order() -> None:
    model = ConsoleModel()
    log = model.ingest(NOW, STATE, EVENTS)
    llama = model.workers["llama-3b"]
    assert (llama.state, llama.pid, llama.restarts) == ("starting", 5003, 2)
    assert list(model.workers["qwen-0.5b"].readings) == [512 * MIB, 520 * MIB, 600 * MIB, 580 * MIB]
    assert model.sessions["s-0123456789ab"].tokens == 330
    assert model.sessions["s-abcdef012345"].outcome_text() == "worker_exited"
    assert model.seq == model.logged == 52 and model.live == 1
    assert model.host is not None and (model.host.opened, model.host.closed) == (13, 12)
    gauge = model.gauges["llama-3b"]
    assert (gauge.active, gauge.queued, gauge.rejected) == (1, 2, 5)
    # The log gets each event once, progress and memory readings never; 38 is logged though the
    # snapshot already holds it (a first connection asks for some history).
    assert [e.seq for e in log if isinstance(e, AdminEvent)] == [38, 42, 46, 47, 48, 49, 50, 51, 52]
    # Replays change nothing and are not logged again.
    assert model.ingest(NOW, events=EVENTS) == [] and llama.restarts == 2
    # An older snapshot (a poll that crossed events) does not bring back what events changed.
    assert model.ingest(NOW, state=STATE) == []
    assert llama.state == "starting" and model.sessions["s-abcdef012345"].shown_state() == "cancelled"
    assert model.seq == 52


def test_an_older_snapshot_refreshes_only_what_no_event_reports() -> None:
    model = folded()

    def change(data: dict[str, Any]) -> None:
        data["workers"][0]["in_flight"] = 3
        data["workers"][0]["state"] = "exited"  # an event would have said so
        data["sessions"]["live"][0]["state"] = "settling"
        data["host"]["accepting"] = False

    model.ingest(NOW, state=state_with(change))
    qwen = model.workers["qwen-0.5b"]
    assert (qwen.in_flight, qwen.state) == (3, "ready")
    assert model.sessions["s-0123456789ab"].state == "settling"
    assert model.host is not None and not model.host.accepting


def exited(seq: int, worker: str, pid: int | None, code: int | None, reason: str | None) -> AdminEvent:
    return event(seq, "worker.exited", 0, worker=worker, planned=False, pid=pid, code=code, signal=None,
                 uptime_s=3.0 if pid else 0.0, ready=pid is not None, reason=reason)  # fmt: skip


def test_a_worker_exit_restart_and_ready_show_in_turn() -> None:
    model = folded()
    llama = model.workers["llama-3b"]
    model.ingest(NOW, events=[event(53, "worker.ready", 0, worker="llama-3b", pid=5003, ready_ms=900)])
    assert (llama.state, llama.uptime(NOW + 2)) == ("ready", 2.0)
    model.ingest(NOW, events=[exited(54, "llama-3b", 5003, 1, "boom")])
    assert (llama.state, llama.uptime(NOW), llama.in_flight) == ("exited", None, 0)
    assert llama.exit_text() == "code 1: boom"
    model.ingest(NOW, events=[event(55, "worker.restarting", 0, worker="llama-3b", attempt=3, max=5, delay_ms=500)])
    assert (llama.state, llama.restarts) == ("restarting", 3)
    last_exit = {"pid": 5003, "code": 1, "signal": None, "uptime_s": 3.0, "ready": True, "reason": "boom"}
    model.ingest(NOW, events=[event(56, "worker.exhausted", 0, worker="llama-3b", reason="keeps exiting", last_exit=last_exit)])
    assert llama.state == "exhausted"
    model.ingest(NOW, events=[event(57, "model.evicted", 0, model="qwen-0.5b", reason="idle_ttl")])
    assert model.workers["qwen-0.5b"].state == "unloading"


def test_a_worker_s_drafts_show_as_its_acceptance_and_tokens_per_verification() -> None:
    model = folded()
    qwen, llama = model.workers["qwen-0.5b"], model.workers["llama-3b"]
    assert qwen.drafts_text() == "75% ×3.5" and llama.drafts_text() == "-"  # llama never drafted

    def drafted_more(data: dict[str, Any]) -> None:  # no event reports drafts: the next poll does
        data["seq"] = 60
        data["workers"][0]["speculation"] = {
            "drafted_tokens": 100, "accepted_tokens": 33, "verifications": 50, "verified_tokens": 83,
        }  # fmt: skip

    model.ingest(NOW, state=state_with(drafted_more))
    assert qwen.drafts_text() == "33% ×1.7"

    def restarted(data: dict[str, Any]) -> None:
        data["seq"] = 61
        del data["workers"][0]["speculation"]  # a new process, that has not drafted yet

    model.ingest(NOW, state=state_with(restarted))
    assert qwen.drafts_text() == "-"


def test_a_worker_that_could_not_be_started_says_only_why() -> None:
    model = folded()
    model.ingest(NOW, events=[exited(53, "llama-3b", None, None, "cannot start the worker: [Errno 2]")])
    assert model.workers["llama-3b"].exit_text() == "cannot start the worker: [Errno 2]"


def test_a_worker_first_heard_of_by_its_spawn_is_added() -> None:
    model = folded()
    model.ingest(NOW, events=[event(53, "worker.ready", 0, worker="phi", pid=7, ready_ms=5)])  # unknown: ignored
    assert "phi" not in model.workers
    model.ingest(NOW, events=[event(54, "worker.spawned", 0, worker="phi", model="phi-2", pid=8)])
    assert (model.workers["phi"].model, model.workers["phi"].state, model.workers["phi"].pid) == ("phi-2", "starting", 8)


def test_a_closed_session_lingers_fades_then_goes() -> None:
    model = folded()
    closed = model.sessions["s-fedcba987654"]  # closed 2 s before NOW, after 2 s
    assert closed.closed and closed.shown_state() == "completed" and closed.outcome_text() == "length"
    assert (closed.tokens, closed.age(NOW + 100)) == (16, 2.0)
    closed_at = NOW - 2
    assert not closed.fading(closed_at + LINGER_S - FADE_S - 0.1)
    assert closed.fading(closed_at + LINGER_S - FADE_S) and not closed.expired(closed_at + LINGER_S - 0.1)
    model.expire(closed_at + LINGER_S - 0.1)
    assert "s-fedcba987654" in model.sessions
    # A new snapshot that no longer lists it keeps it while it lingers.
    model.ingest(closed_at + 1, state=state_with(lambda data: data.update(seq=60)))
    assert "s-fedcba987654" in model.sessions
    model.expire(closed_at + LINGER_S)
    assert "s-fedcba987654" not in model.sessions


def test_a_failed_session_shows_its_code_and_message() -> None:
    model = folded()
    model.ingest(NOW, events=[
        event(53, "session.closed", 0, session="s-0123456789ab", model="qwen-0.5b", tokens=331, age_ms=13000,
              kind="failed", code="worker_failed", message="the worker exited"),
    ])  # fmt: skip
    session = model.sessions["s-0123456789ab"]
    assert (session.shown_state(), session.outcome_text(), session.age(NOW + 5)) == ("failed", "worker_failed: the worker exited", 13.0)
    model.ingest(NOW, events=[event(54, "session.progress", 0, session="s-0123456789ab", model="qwen-0.5b", tokens=400, tokens_per_s=1.0)])
    assert session.tokens == 331  # progress after the close is late news


def test_a_recently_closed_session_in_a_snapshot_lingers_as_long_as_the_host_says() -> None:
    recent = session_data("s-recent", "qwen-0.5b", "closed", 1.0, 8, 8.0)
    recent["opened_at"] = NOW - 4  # closed 3 s ago, host time
    recent["outcome"] = {"kind": "completed", "finish_reason": "stop"}
    gone = {**recent, "id": "s-gone", "opened_at": NOW - 20}
    model = ConsoleModel.from_snapshot(state_with(lambda data: data["sessions"].update(recent=[recent, gone])), NOW)
    session = model.sessions["s-recent"]
    assert session.closed_at == pytest.approx(NOW - 3) and session.outcome_text() == "stop"
    assert "s-gone" not in model.sessions


def test_a_new_host_starts_the_model_over_and_says_so() -> None:
    model = folded()

    def another_host(data: dict[str, Any]) -> None:
        data["host"]["pid"], data["seq"] = 9999, 3
        data["workers"] = [worker_data("qwen-0.5b", 6001, 0, 5.0, 100 * MIB)]

    log = model.ingest(NOW, state=state_with(another_host))
    assert log == [Note("a new host, pid 9999")]
    assert (model.seq, model.logged) == (3, 0)
    assert list(model.workers) == ["qwen-0.5b"] and list(model.workers["qwen-0.5b"].readings) == [100 * MIB]


def test_stream_notices_are_logged_and_move_no_seq() -> None:
    model = folded()
    reset = parse_event({"type": "stream.reset", "at": int(NOW * 1000)})
    assert isinstance(reset, StreamReset)
    assert model.ingest(NOW, events=[reset]) == [reset] and model.seq == 52


def test_unknown_event_types_are_logged_and_change_nothing() -> None:
    model = folded()
    before = (copy.deepcopy(model.workers), copy.deepcopy(model.sessions), copy.deepcopy(model.gauges))
    odd = event(53, "worker.dreamt", 0, worker="llama-3b", session="s-0123456789ab", model="llama-3b", detail="x")
    broken = event(54, "worker.spawned", 0, worker="llama-3b")  # a known type that does not parse
    assert isinstance(odd, UnknownEvent) and isinstance(broken, UnknownEvent)
    assert model.ingest(NOW, events=[odd, broken]) == [odd, broken]
    assert (model.workers, model.sessions, model.gauges) == before and model.seq == 54
    assert describe(odd) == "worker=llama-3b session=s-0123456789ab model=llama-3b detail=x"
    assert describe(broken) == "worker=llama-3b"


def test_control_characters_from_the_host_are_stripped() -> None:
    model = ConsoleModel()
    log = model.ingest(NOW, state_with(with_controls), [*EVENTS, *EVENTS_WITH_CONTROLS])
    shown = [
        *(f"{s.text()} {s.id}" for s in model.sessions.values()),
        *(w.exit_text() for w in model.workers.values()),
        *(f"{e.type} {describe(e)}" for e in log if isinstance(e, AdminEvent)),
    ]
    assert any("pwned" in text for text in shown)  # the text is there, its controls are not
    for text in shown:
        assert not CONTROL.search(text), repr(text)
    assert model.workers["qwen-0.5b"].exit_text() == "code 1: ]0;pwned[2J"
    assert strip_controls(STATE) is STATE and strip_controls(EVENTS[0]) is EVENTS[0]  # nothing to strip


def test_linger_is_read_when_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mlxhost_tui.parts, "LINGER_S", 1.0)  # as the live test shortens it
    model = folded()
    model.expire(NOW - 2 + 1.0)
    assert "s-fedcba987654" not in model.sessions


# -- the words --------------------------------------------------------------------------------


def test_events_read_as_one_line_each() -> None:
    lines = {e.seq: describe(e) for e in EVENTS}
    assert lines[42] == "s-fedcba987654 opened on qwen-0.5b"
    assert lines[38] == "s-0123456789ab opened on qwen-0.5b (stream)"
    assert lines[41] == "qwen-0.5b: memory 520.0 MiB"
    assert lines[44] == "s-0123456789ab: 330 tokens, 25.1 tok/s"
    assert lines[46] == "s-fedcba987654 completed (length), 16 tokens in 2.0s"
    assert lines[47] == "a request rejected by llama-3b: 1 running, 2 waiting"
    assert lines[49] == "llama-3b: pid 5002 exited, signal SIGKILL after 1m01s"
    assert lines[50] == "llama-3b: restarting (attempt 2 of 5)"
    assert lines[51] == "llama-3b: spawned pid 5003"
    assert lines[52] == "s-abcdef012345 cancelled (worker_exited), 0 tokens in 0.9s"
    failed = event(53, "session.closed", 0, session="s-1", model="m", tokens=0, age_ms=100, kind="failed",
                   code="bad_request", message="no")  # fmt: skip
    assert describe(failed) == "s-1 failed (bad_request: no), 0 tokens in 0.1s"
    skipped = event(55, "session.closed", 0, session="s-2", model="m", tokens=3, age_ms=100, kind="completed",
                    finish_reason="stop", ignored=["system.cache_control", "tools.web_search"])  # fmt: skip
    assert describe(skipped) == (
        "s-2 completed (stop), 3 tokens in 0.1s; skipped system.cache_control, tools.web_search"
    )
    assert describe(exited(54, "m", 7, 1, "boom")) == "m: pid 7 exited, exit code 1 after 3.0s: boom"
    others: dict[str, tuple[dict[str, Any], str]] = {
        "host.started": ({"pid": 1, "models": ["a", "b"]}, "host started, pid 1, models a, b"),
        "host.stopping": ({"reason": "SIGTERM", "grace_s": 30.0}, "host stopping (SIGTERM, grace 30.0s)"),
        "worker.ready": ({"worker": "m", "pid": 7, "ready_ms": 900}, "m: ready, pid 7, in 900 ms"),
        "model.evicted": ({"model": "m", "reason": "idle_ttl"}, "m: unloaded (idle_ttl)"),
        "stream.lagged": ({}, "dropped by the host for reading too slowly; reconnecting"),
    }
    for kind, (fields, line) in others.items():
        assert describe(event(60, kind, 0, **fields)) == line


def test_a_worker_that_could_not_be_started_reads_as_such() -> None:
    never = exited(1, "m", None, None, "cannot start the worker: [Errno 2]")
    assert describe(never) == "m: could not be started: cannot start the worker: [Errno 2]"
    last_exit = {"pid": None, "code": None, "signal": None, "uptime_s": 0.0, "ready": False, "reason": "bad launch"}
    exhausted = event(2, "worker.exhausted", 0, worker="m", reason="bad launch", last_exit=last_exit)
    assert describe(exhausted) == "m: not restarted again: bad launch (r restarts it)"


def test_sparklines_and_bars() -> None:
    assert sparkline([], 4) == "" and sparkline([5, 5], 4) == "▁▁"
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7, 8], 8) == "▁▂▃▄▅▆▇█"
    assert bar(0, None, 4) == "····" and bar(1, 100, 4) == "█░░░" and bar(9, 4, 4) == "████"
