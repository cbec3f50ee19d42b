"""Sessions: every request the host takes in, from arrival to its one outcome.

A request that admission turns away with 429 never becomes one: it is counted and announced
(`admission.rejected`) and answered at the door.

    queued → preparing → running → settling → closed

A session closes exactly once, with `completed(finish_reason)`, `cancelled(reason)` or
`failed(code, message)`. It owns one cancel scope: client disconnect, deadline, an operator's
cancel and shutdown all cancel it, each with its reason. The registry keeps the live sessions and
a bounded list of recently closed ones for the admin API and the dashboard. An outcome's text
can come from a client or a worker: it is kept as a short excerpt, so that list is bounded in
bytes, not only in count.
"""

from __future__ import annotations

import collections
import enum
import itertools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from mlxhost.host.events import EventHub
from mlxhost.wire.admin import Outcome, SessionClosed, SessionOpened, SessionProgressed, SessionRecord
from mlxhost.wire.launch import SessionProgress

__all__ = ["CancelReason", "Outcome", "Session", "SessionRegistry", "SessionState"]

logger = logging.getLogger("mlxhost.sessions")

RECENT_KEPT = 256


class SessionState(enum.StrEnum):
    QUEUED = "queued"
    PREPARING = "preparing"
    RUNNING = "running"
    SETTLING = "settling"
    CLOSED = "closed"


class CancelReason(enum.StrEnum):
    CLIENT_DISCONNECTED = "client_disconnected"
    CONSUMER_IDLE = "consumer_idle"
    DEADLINE = "deadline"
    REQUESTED = "requested"
    SHUTDOWN = "shutdown"
    WORKER_EXITED = "worker_exited"


_numbers = itertools.count(1)


@dataclass(eq=False)
class Session:
    model: str
    stream: bool
    id: str = field(default_factory=lambda: f"s-{uuid.uuid4().hex[:12]}")
    number: int = field(default_factory=lambda: next(_numbers))
    opened_at: float = field(default_factory=time.time)
    opened_clock: float = field(default_factory=time.monotonic)
    state: SessionState = SessionState.QUEUED
    outcome: Outcome | None = None
    cancel_reason: CancelReason | None = None
    closed_at: float | None = None
    closed_clock: float | None = None
    tokens: int = 0  # generated so far, as the worker reports
    tokens_per_s: float = 0.0
    prompt_tokens: int = 0
    status: int | None = None  # the HTTP status the client got
    first_token_at: float | None = None  # monotonic, streams only
    client: dict[str, str] | None = None  # what its client said of itself (state.client_entries)
    ignored: tuple[str, ...] = ()  # the request's fields the worker skipped, as it named them
    kind: str = "generate"  # or embed, rerank
    inputs: int = 0  # an embed or rerank session's inputs, as its worker reports them
    drafted_tokens: int = 0  # draft tokens its worker verified, as its last report says
    accepted_tokens: int = 0  # those of them the model kept
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    worker_done: anyio.Event = field(default_factory=anyio.Event)  # its worker dropped the sequence

    def cancel(self, reason: CancelReason) -> bool:
        """Cancel the session's work; the first reason given is the one it closes with."""
        if self.state is SessionState.CLOSED:
            return False
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.scope.cancel()
        return True

    def advance(self, state: SessionState) -> None:
        if self.state is not SessionState.CLOSED:
            self.state = state

    def snapshot(self) -> SessionRecord:
        return SessionRecord(
            id=self.id,
            model=self.model,
            stream=self.stream,
            state=self.state.value,
            opened_at=self.opened_at,
            age_s=round((self.closed_at or time.time()) - self.opened_at, 3),
            tokens=self.tokens,
            tokens_per_s=self.tokens_per_s,
            outcome=self.outcome,
            client=self.client,
            kind=self.kind,
            inputs=self.inputs,
            prompt_tokens=self.prompt_tokens,
        )


class SessionRegistry:
    def __init__(
        self, events: EventHub | None = None, on_close: Callable[[Session], None] | None = None
    ) -> None:
        self.events = events or EventHub()
        self.on_close = on_close
        self._live: dict[str, Session] = {}
        self._recent: collections.deque[Session] = collections.deque(maxlen=RECENT_KEPT)
        self.opened = 0
        self.closed = 0
        self._empty = anyio.Event()
        self._empty.set()

    def open(
        self, model: str, stream: bool, client: dict[str, str] | None = None, kind: str = "generate"
    ) -> Session:
        session = Session(model, stream, client=client, kind=kind)
        self._live[session.id] = session
        self.opened += 1
        if self._empty.is_set():
            self._empty = anyio.Event()
        self.events.publish(
            SessionOpened(session=session.id, model=model, stream=stream, client=client, kind=kind)
        )
        return session

    def progress(self, report: SessionProgress) -> None:
        session = self._live.get(report.session)
        if session is not None:
            if report.done:
                session.worker_done.set()
                session.drafted_tokens = report.drafted_tokens
                session.accepted_tokens = report.accepted_tokens
            session.tokens = report.tokens
            session.tokens_per_s = report.tokens_per_s
            session.prompt_tokens = report.prompt_tokens
            session.inputs = report.inputs
            self.events.publish(
                SessionProgressed(
                    session=session.id,
                    model=session.model,
                    tokens=report.tokens,
                    tokens_per_s=report.tokens_per_s,
                    inputs=report.inputs,
                    prompt_tokens=report.prompt_tokens if report.inputs else 0,
                )
            )

    def advance(self, session: Session, state: SessionState) -> None:
        session.advance(state)

    def close(self, session: Session, outcome: Outcome) -> None:
        if session.state is SessionState.CLOSED:
            # Exactly once: a second close is a bug in the host, not something to hide.
            logger.error("session %s closed twice (%s, then %s)", session.id, session.outcome, outcome)
            return
        session.state = SessionState.CLOSED
        outcome = outcome.with_ignored(session.ignored)
        outcome = outcome.with_drafts(session.drafted_tokens, session.accepted_tokens)
        session.outcome = outcome
        session.closed_at = time.time()
        session.closed_clock = time.monotonic()
        self._live.pop(session.id, None)
        self._recent.append(session)
        self.closed += 1
        if not self._live:
            self._empty.set()
        if self.on_close is not None:
            self.on_close(session)
        self.events.publish(
            SessionClosed(
                session=session.id,
                model=session.model,
                tokens=session.tokens,
                age_ms=int((session.closed_at - session.opened_at) * 1000),
                outcome=outcome,
            )
        )

    def get(self, session_id: str) -> Session | None:
        return self._live.get(session_id)

    def live(self) -> list[Session]:
        return list(self._live.values())

    def recent(self) -> list[Session]:
        return list(self._recent)

    def cancel_all(self, reason: CancelReason) -> None:
        for session in list(self._live.values()):
            session.cancel(reason)

    async def wait_empty(self) -> None:
        await self._empty.wait()
