"""The console's sessions of every kind: an embed or rerank session reads as such in the sessions
table (its prompt tokens and inputs where a generation shows its tokens and rate, its kind before
its outcome) and in the event log, folded from the snapshot and the events as the host sends them.
No Textual app."""

from __future__ import annotations

from typing import Any

import pytest

from mlxhost.client.admin import Target
from mlxhost.client.human import count
from mlxhost.client.status import render
from mlxhost.wire.admin import AdminEvent
from mlxhost_tui.model import ConsoleModel
from mlxhost_tui.text import describe
from tests.unit.test_console_model import EVENTS, NOW, STATE, event, folded, session_data, state_with

EMBED, RERANK = "s-e0e0e0e0e0e0", "s-r0r0r0r0r0r0"


def pooled_data(sid: str, kind: str, state: str, inputs: int, prompt_tokens: int) -> dict[str, Any]:
    """A session record as the host sends one of an embed or rerank session."""
    data = session_data(sid, "bge-small", state, 0.05, 0, 0.0)
    return data | {"stream": False, "kind": kind, "inputs": inputs, "prompt_tokens": prompt_tokens}


def embed_events(first: int, inputs: int = 64, prompt_tokens: int = 0) -> list[AdminEvent]:
    """An embed session from open to close, as its events say it."""
    return [
        event(first, "session.opened", 0.3, session=EMBED, model="bge-small", stream=False, kind="embed"),
        event(first + 1, "session.progress", 0.29, session=EMBED, model="bge-small", tokens=0,
              tokens_per_s=0.0, inputs=inputs, prompt_tokens=prompt_tokens),
        event(first + 2, "session.closed", 0.29, session=EMBED, model="bge-small", tokens=0, age_ms=12,
              kind="completed", finish_reason="stop"),
    ]  # fmt: skip


def test_a_generation_reads_as_before() -> None:
    model = folded()
    running = model.sessions["s-0123456789ab"]
    assert not running.pooled and running.work_text() == ("330", "25.1") and running.outcome_cell() == ""
    done = model.sessions["s-fedcba987654"]
    assert (done.work_text(), done.outcome_cell()) == (("16", "0.0"), "length")


def test_an_embed_session_from_its_events_shows_its_kind_and_inputs() -> None:
    model = folded()
    opened, progressed, closed = embed_events(53, prompt_tokens=12_345)
    model.ingest(NOW, events=[opened])
    session = model.sessions[EMBED]
    assert session.pooled and session.outcome_cell() == "embed"
    assert session.work_text() == ("-", "-")  # its worker reports when done
    log = model.ingest(NOW, events=[progressed, closed])
    assert log == [closed]  # progress stays out of the log, as a generation's
    shown = (session.shown_state(), session.inputs, session.work_text())
    assert shown == ("completed", 64, ("12.3k", "64 in"))
    # Its finish reason is always "stop": the cell leaves it out.
    assert session.outcome_cell() == "embed" and "embed" in session.text()  # the filter finds it by its kind


def test_a_snapshot_brings_the_prompt_tokens_events_leave_out() -> None:
    model = folded()
    model.ingest(NOW, events=embed_events(53))
    recent = pooled_data(EMBED, "embed", "closed", 64, 12_345)
    recent["outcome"] = {"kind": "completed", "finish_reason": "stop"}

    def later(data: dict[str, Any]) -> None:
        data["seq"] = 55
        data["sessions"]["recent"] = [recent]

    model.ingest(NOW + 0.5, state=state_with(later))
    session = model.sessions[EMBED]
    assert session.closed and session.work_text() == ("12.3k", "64 in")
    # What the events said is kept: a snapshot never takes a count back.
    recent["inputs"] = 0
    model.ingest(NOW + 1, state=state_with(lambda data: later(data) or data.update(seq=56)))
    assert session.work_text() == ("12.3k", "64 in")


def test_an_older_snapshot_brings_them_too() -> None:
    """A poll that crossed events on the way still has the prompt tokens no event reports."""
    model = folded()
    model.ingest(NOW, events=embed_events(53))
    recent = pooled_data(EMBED, "embed", "closed", 64, 900) | {
        "outcome": {"kind": "completed", "finish_reason": "stop"}
    }
    model.ingest(NOW, state=state_with(lambda data: data["sessions"].update(recent=[recent])))
    assert model.seq == 55 and model.sessions[EMBED].work_text() == ("900", "64 in")


def test_a_rerank_session_in_a_snapshot_reads_as_one() -> None:
    live = pooled_data(RERANK, "rerank", "settling", 100, 840)
    model = ConsoleModel.from_snapshot(state_with(lambda data: data["sessions"]["live"].append(live)), NOW)
    session = model.sessions[RERANK]
    assert (session.outcome_cell(), session.shown_state(), session.work_text()) == (
        "rerank",
        "settling",
        ("840", "100 in"),
    )
    # The generations beside it are as the snapshot says.
    assert model.sessions["s-0123456789ab"].work_text() == ("310", "24.8")


def test_a_pooled_session_that_did_not_complete_says_its_kind_and_why() -> None:
    model = folded()
    opened = event(53, "session.opened", 0, session=RERANK, model="m", stream=False, kind="rerank")
    cancelled = event(54, "session.closed", 0, session=RERANK, model="m", tokens=0, age_ms=40,
                      kind="cancelled", reason="client_disconnected")  # fmt: skip
    model.ingest(NOW, events=[opened, cancelled])
    session = model.sessions[RERANK]
    assert session.outcome_cell() == "rerank · client_disconnected" and session.work_text() == ("-", "-")


def test_a_pooled_sessions_skipped_fields_are_counted_in_its_cell() -> None:
    model = folded()
    opened = event(53, "session.opened", 0, session=EMBED, model="m", stream=False, kind="embed")
    closed = event(54, "session.closed", 0, session=EMBED, model="m", tokens=0, age_ms=40, kind="completed",
                   finish_reason="stop", ignored=["user"])  # fmt: skip
    model.ingest(NOW, events=[opened, closed])
    assert model.sessions[EMBED].outcome_cell() == "embed · (1 skipped)"
    generation = model.sessions["s-fedcba987654"]
    assert generation.outcome_text() == generation.outcome_cell() == "length"


def test_an_old_hosts_snapshot_has_generations_only() -> None:
    model = ConsoleModel.from_snapshot(STATE, NOW)
    assert {s.kind for s in model.sessions.values()} == {"generate"}


def test_the_log_says_what_a_pooled_session_did() -> None:
    model = folded()
    opened, progressed, closed = embed_events(53)
    model.ingest(NOW, events=[opened, progressed, closed])
    row = model.session_of(closed)
    assert row is model.sessions[EMBED]
    assert describe(opened) == f"{EMBED} opened on bge-small (embed)"
    assert describe(progressed) == f"{EMBED}: 64 inputs"
    assert describe(closed, row) == f"{EMBED} completed (stop), 64 inputs in 0.0s"
    assert (
        describe(closed) == f"{EMBED} completed (stop), 0 tokens in 0.0s"
    )  # a row long gone: what the event says
    failed = event(57, "session.closed", 0, session=RERANK, model="m", tokens=0, age_ms=100, kind="failed",
                   code="bad_request", message="no")  # fmt: skip
    model.ingest(
        NOW,
        events=[
            event(56, "session.opened", 0, session=RERANK, model="m", stream=False, kind="rerank"),
            failed,
        ],
    )
    assert (
        describe(failed, model.session_of(failed)) == f"{RERANK} failed (bad_request: no), 0 inputs in 0.1s"
    )
    # A generation's lines are as they were.
    generation = EVENTS[6]
    assert (
        describe(generation, model.session_of(generation))
        == "s-fedcba987654 completed (length), 16 tokens in 2.0s"
    )
    assert model.session_of(EVENTS[1]) is None  # a memory reading is about no session


def test_a_generation_that_drafted_says_how_many_drafts_were_accepted() -> None:
    model = folded()
    closed = event(53, "session.closed", 0, session="s-0123456789ab", model="qwen-0.5b", tokens=340,
                   age_ms=13000, kind="completed", finish_reason="stop", drafted_tokens=18,
                   accepted_tokens=11)  # fmt: skip
    model.ingest(NOW, events=[closed])
    session = model.sessions["s-0123456789ab"]
    assert session.outcome_cell() == "stop 11/18 drafts"
    assert describe(closed, session) == (
        "s-0123456789ab completed (stop), 340 tokens in 13s, 11 of 18 drafts accepted"
    )
    cancelled = event(54, "session.closed", 0, session="s-abcdef012345", model="llama-3b", tokens=3,
                      age_ms=900, kind="cancelled", reason="client_disconnected", drafted_tokens=4,
                      accepted_tokens=0)  # fmt: skip
    model.ingest(NOW, events=[cancelled])
    assert model.sessions["s-abcdef012345"].outcome_cell() == "client_disconnected 0/4 drafts"


def test_mlxhost_status_shows_each_worker_s_drafts() -> None:
    text = render(Target(url="http://127.0.0.1:8080"), {"status": "ok"}, STATE)
    header, qwen, llama = text.splitlines()[2:5]
    assert header.split()[-3:] == ["DRAFTS", "LAST", "EXIT"]
    assert "75% ×3.5" in qwen and qwen.index("75% ×3.5") == header.index("DRAFTS")
    assert llama[header.index("DRAFTS")] == "-"  # it never drafted


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (9_999, "9999"), (12_345, "12.3k"), (99_949, "99.9k"), (123_456, "123k"), (999_499, "999k"),
     (999_500, "1.0M"), (4_100_000, "4.1M")],
)  # fmt: skip
def test_counts_fit_five_characters(value: int, text: str) -> None:
    assert count(value) == text


def test_mlxhost_status_says_what_a_pooled_session_does() -> None:
    live = pooled_data(RERANK, "rerank", "running", 100, 840)
    state = state_with(lambda data: data["sessions"]["live"].append(live))
    text = render(Target(url="http://127.0.0.1:8080"), {"status": "ok"}, state)
    assert f"{RERANK}  bge-small  running  rerank  100 inputs  840 tokens" in text
    assert "  qwen-0.5b  running  310 tokens  24.8 tok/s" in text  # a generation reads as before
