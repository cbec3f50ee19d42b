"""One session, run end to end: admit it, take its shared execution lease, find its worker,
relay the answer, record the outcome.

`SessionResponse` is the ASGI response the generation routes return. Everything a session does
happens inside its own cancel scope, in the request's task: waiting in the admission queue,
starting the model, waiting for the worker's answer and relaying it chunk by chunk. A client that
leaves, a consumer that stops reading, the deadline, an operator and shutdown all cancel that
scope; leaving it closes the connection to the worker, and the worker stops the generation.

A session whose request reached a worker closes only once that worker has dropped its sequence
(the worker's last progress report for it says `done`), so `session.closed` means its memory is
free. That report is normally there before the answer's last byte; after a cancellation it comes
within a step or so. The wait is bounded, and skipped when the worker died or never generated.

A session speaks its request's dialect (wire.dialect, from the path): the errors the parent
writes itself, whole or as a stream's last frame, are worded as that dialect's clients read them.
What goes to the client, and the idle timeout on each send, is `serving.downstream`.

`forward` is the light path for a request that needs the model's worker but generates nothing
(counting a prompt's tokens): no admission slot, no session, one whole answer relayed.
"""

from __future__ import annotations

import logging
import time

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mlxhost.host.events import EventHub
from mlxhost.host.serving.admission import Admission, QueueFull
from mlxhost.host.serving.coordinator import CoordinatorClosed, ExecutionCoordinator
from mlxhost.host.serving.downstream import HOP_BY_HOP, Downstream, closing_sse_error
from mlxhost.host.serving.sessions import CancelReason, Outcome, Session, SessionRegistry, SessionState
from mlxhost.host.workers.pool import ModelPool
from mlxhost.host.workers.status import WorkerUnavailable
from mlxhost.host.workers.supervisor import Supervisor
from mlxhost.host.workers.upstream import UpstreamBroken, UpstreamConnectError, UpstreamResponse
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.admin import AdmissionRejected
from mlxhost.wire.dialect import Dialect
from mlxhost.wire.errors import (
    AdmissionRefused,
    APIError,
    Cancelled,
    ServiceUnavailable,
    TimedOut,
    WorkerFailed,
)
from mlxhost.wire.fields import IGNORED_HEADER
from mlxhost.wire.headers import SESSION_HEADER
from mlxhost.wire.reading import ErrorReport, StreamReader, read_whole

__all__ = ["SessionResponse", "forward", "refusal"]

logger = logging.getLogger("mlxhost.relay")

EXIT_WAIT = 2.0  # how long to wait for the supervisor to learn how a broken worker ended
DROP_WAIT = 5.0  # how long a session waits for its worker to say it dropped the sequence (a loaded
# machine can take seconds to schedule a worker back; the health check catches a frozen one)


class SessionResponse:
    def __init__(
        self,
        *,
        pool: ModelPool,
        admission: Admission,
        coordinator: ExecutionCoordinator,
        sessions: SessionRegistry,
        spec: ModelSpec,
        body: bytes,
        stream: bool,
        path: str,
        headers: dict[str, str],
        request_timeout: float,
        idle_timeout: float,
        client_metadata: dict[str, str] | None = None,
        kind: str = "generate",
    ) -> None:
        self.pool = pool
        self.kind = kind  # generate, embed or rerank
        self.client_metadata = client_metadata
        self.admission = admission
        self.coordinator = coordinator
        self.sessions = sessions
        self.spec = spec
        self.body = body
        self.stream = stream
        self.path = path
        self.dialect = Dialect.of_path(path)
        self.headers = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        # The worker (and its pid) that may still hold this session's sequence.
        self._holder: tuple[Supervisor, int] | None = None
        # The finish reason of a stream whose end (`[DONE]`, `response.completed`, `message_stop`)
        # the client was sent: a client that hangs up after it (Codex does) got its whole answer.
        self._finished: str | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = self.sessions.open(self.spec.id, self.stream, self.client_metadata, self.kind)
        client = Downstream(send, session, self.idle_timeout, self.dialect)
        outcome: Outcome | None = None
        try:
            with session.scope:
                if self.request_timeout:
                    session.scope.deadline = anyio.current_time() + self.request_timeout
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_watch_disconnect, receive, session)
                    outcome = await self._run(session, client)
                    tg.cancel_scope.cancel()
            if outcome is None and self._finished is not None:
                outcome = Outcome.completed(self._finished)
            elif outcome is None:
                reason = session.cancel_reason or CancelReason.DEADLINE
                outcome = Outcome.cancelled(reason)
                await client.goodbye(_cancelled_error(reason, self.request_timeout))
        except Exception:
            logger.exception("session %s failed", session.id)
            outcome = Outcome.failed("internal_error", "the host failed while relaying this request")
            raise
        finally:
            if self._holder is not None:
                await _wait_dropped(session, *self._holder)
            self.sessions.close(session, outcome or Outcome.failed("internal_error", "no outcome"))

    async def _run(self, session: Session, client: Downstream) -> Outcome:
        try:
            async with self.admission.slot(session), self.coordinator.shared(session.id):
                session.advance(SessionState.PREPARING)
                try:
                    supervisor = await _acquire(self.pool, self.spec)
                except ServiceUnavailable as error:
                    return await client.error(error)
                # No await between acquire and lease: the pool never retires a worker with
                # requests in flight, so this one stays routable.
                with supervisor.lease() as pid:
                    return await self._relay(session, client, supervisor, pid)
        except CoordinatorClosed:
            return await client.error(ServiceUnavailable("the server is shutting down", code="shutting_down"))
        except QueueFull:
            return await client.error(refusal(self.spec.id, self.admission, self.sessions.events, session.id))

    async def _relay(self, session: Session, client: Downstream, supervisor: Supervisor, pid: int) -> Outcome:
        http = supervisor.client
        if http is None:
            return await client.error(_restarting(self.spec))
        headers = {**self.headers, SESSION_HEADER: session.id}
        self._holder = (supervisor, pid)
        try:
            upstream = await http.post(self.path, headers, self.body)
        except UpstreamConnectError:
            self._holder = None  # it never got the request
            return await client.error(_not_accepting(self.spec))
        except UpstreamBroken:
            self._holder = None
            return await client.error(await _worker_failed(supervisor, pid))
        if not upstream.is_success:
            self._holder = None  # refused before generating: it holds no sequence
        ignored = next((v for k, v in upstream.headers if k.lower() == IGNORED_HEADER), "")
        session.ignored = tuple(name for name in ignored.split(", ") if name)
        try:
            session.advance(SessionState.RUNNING)
            if not self.stream or not upstream.is_success:
                return await self._relay_whole(session, client, upstream, supervisor, pid)
            return await self._relay_stream(session, client, upstream, supervisor, pid)
        finally:
            await upstream.aclose()

    async def _relay_whole(
        self,
        session: Session,
        client: Downstream,
        upstream: UpstreamResponse,
        supervisor: Supervisor,
        pid: int,
    ) -> Outcome:
        try:
            content = await upstream.aread()
        except UpstreamBroken:
            self._holder = None
            await client.error(await _worker_failed(supervisor, pid))
            return Outcome.cancelled(CancelReason.WORKER_EXITED)
        session.advance(SessionState.SETTLING)
        await client.start(upstream.status_code, upstream.headers, len(content))
        await client.body(content, more=False)
        if self.kind != "generate" and upstream.is_success:
            # Its counts came in the worker's report; megabytes of vectors are not parsed for them.
            return Outcome.completed("stop")
        return _outcome_of_whole(upstream.status_code, content, session)

    async def _relay_stream(
        self,
        session: Session,
        client: Downstream,
        upstream: UpstreamResponse,
        supervisor: Supervisor,
        pid: int,
    ) -> Outcome:
        await client.start(upstream.status_code, upstream.headers)
        # The reader beside the chunks' writer reads the frames as they go past: the first
        # text (time to first token), and at the end the finish reason or the error.
        reader = StreamReader()
        try:
            async for chunk in upstream.aiter_raw():
                reader.feed(chunk)
                if session.first_token_at is None and reader.text_seen:
                    session.first_token_at = time.monotonic()
                await client.body(chunk)
                if reader.done and reader.finish_reason is not None:
                    self._finished = reader.finish_reason
        except UpstreamBroken:
            self._holder = None
            error = await _worker_failed(supervisor, pid)
            await client.body(closing_sse_error(error, self.dialect), more=False)
            return Outcome.cancelled(CancelReason.WORKER_EXITED)
        session.advance(SessionState.SETTLING)
        await client.body(b"", more=False)
        return _outcome_of_stream(reader)


def refusal(
    model: str, admission: Admission, events: EventHub, session: str | None = None
) -> AdmissionRefused:
    """The 429 for a request the model's admission turned away, announced to the operator."""
    stats = admission.statistics()
    # No session when refused before one opened.
    rejected = AdmissionRejected(
        session=session or None, model=model, active=stats.active, queued=stats.queued
    )
    events.publish(rejected)
    return AdmissionRefused(
        f"the model '{model}' is at capacity ({stats.active} running, {stats.queued} waiting); "
        "try again shortly",
        headers={"retry-after": "1"},
    )


async def forward(
    pool: ModelPool, spec: ModelSpec, path: str, headers: dict[str, str], body: bytes
) -> Response:
    """Relay a request that generates nothing to `spec`'s worker, and its whole answer back.

    It waits for no admission slot: it takes none of the model's batch, and answers in about
    the time a prompt takes to tokenize. Its failures are raised as the session's are answered.
    """
    supervisor = await _acquire(pool, spec)
    with supervisor.lease() as pid:  # no await since acquire: see SessionResponse._run
        http = supervisor.client
        if http is None:
            raise _restarting(spec)
        sent = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            upstream = await http.post(path, sent, body)
            try:
                content = await upstream.aread()
            finally:
                await upstream.aclose()
        except UpstreamConnectError:
            raise _not_accepting(spec) from None
        except UpstreamBroken:
            raise await _worker_failed(supervisor, pid) from None
    kept = {k: v for k, v in upstream.headers if k.lower() not in HOP_BY_HOP}
    return Response(content, status_code=upstream.status_code, headers=kept)


async def _acquire(pool: ModelPool, spec: ModelSpec) -> Supervisor:
    """A ready worker for `spec`, loading it if need be; ServiceUnavailable when there is none."""
    try:
        with anyio.fail_after(pool.settings.load_timeout):
            return await pool.acquire(spec)
    except WorkerUnavailable as exc:
        headers = {"retry-after": f"{exc.retry_after:.0f}"} if exc.retry_after else None
        raise ServiceUnavailable(exc.message, code=exc.code, headers=headers) from None
    except TimeoutError:
        raise ServiceUnavailable(
            f"the model '{spec.id}' did not load within {pool.settings.load_timeout:g}s",
            code="model_load_timeout",
            headers={"retry-after": "5"},
        ) from None


def _restarting(spec: ModelSpec) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"the model '{spec.id}' is restarting", code="model_restarting", headers={"retry-after": "1"}
    )


def _not_accepting(spec: ModelSpec) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"the model '{spec.id}' worker is not accepting connections; try again",
        code="model_restarting",
        headers={"retry-after": "1"},
    )


async def _watch_disconnect(receive: Receive, session: Session) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    session.cancel(CancelReason.CLIENT_DISCONNECTED)


async def _wait_dropped(session: Session, supervisor: Supervisor, pid: int) -> None:
    """Wait (bounded) for the worker's word that it dropped the session's sequence, or its end."""
    if session.worker_done.is_set():
        return  # the usual case: its report came before the answer's last byte
    session.advance(SessionState.SETTLING)
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:

            async def until_gone() -> None:
                await supervisor.exit_of(pid, DROP_WAIT)  # returns at its exit, or at the bound
                tg.cancel_scope.cancel()

            tg.start_soon(until_gone)
            await session.worker_done.wait()
            tg.cancel_scope.cancel()


async def _worker_failed(supervisor: Supervisor, pid: int) -> WorkerFailed:
    with anyio.CancelScope(shield=True):
        exit = await supervisor.exit_of(pid, EXIT_WAIT)
    if exit is None:
        return WorkerFailed(f"the connection to the model '{supervisor.id}' worker broke")
    return WorkerFailed(
        f"the model '{supervisor.id}' worker exited ({exit.describe()}) while handling this "
        "request; it is being restarted"
    )


def _cancelled_error(reason: CancelReason, request_timeout: float) -> APIError | None:
    if reason in (CancelReason.CLIENT_DISCONNECTED, CancelReason.CONSUMER_IDLE):
        return None  # nobody is reading
    if reason is CancelReason.DEADLINE:
        return TimedOut(f"the request ran past its deadline of {request_timeout:g}s and was stopped")
    if reason is CancelReason.SHUTDOWN:
        return Cancelled("the server is shutting down; the generation was stopped", code="shutting_down")
    return Cancelled("an operator cancelled this request", code="cancelled")


def _outcome_of_whole(status: int, content: bytes, session: Session) -> Outcome:
    reading = read_whole(content)
    if reading is None:
        return Outcome.failed(str(status), "the worker answered with an error")
    if 200 <= status < 300:
        if reading.usage is not None:
            session.tokens = reading.usage.completion_tokens
            session.prompt_tokens = reading.usage.prompt_tokens
        return Outcome.completed(reading.finish_reason)
    if reading.error is not None:
        return _outcome_of_error(reading.error, reading.error.code or str(status))
    return Outcome.failed(str(status), "the worker answered with an error")


def _outcome_of_stream(reader: StreamReader) -> Outcome:
    if reader.finish_reason is not None:
        return Outcome.completed(reader.finish_reason)
    if reader.error is not None:
        return _outcome_of_error(reader.error, str(reader.error.code))
    return Outcome.failed("incomplete", "the worker's stream ended without a finish reason")


def _outcome_of_error(error: ErrorReport, code: str) -> Outcome:
    if error.code == "shutting_down":
        return Outcome.cancelled(CancelReason.SHUTDOWN)
    return Outcome.failed(code, error.message)
