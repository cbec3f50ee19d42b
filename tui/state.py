"""What the console knows of a host: its workers, sessions and admission gauges, as plain data.

The admin API's state snapshot and its events fold into these objects; the widgets own them and
draw them. Times are wall-clock seconds: a snapshot's ages count back from `now`, an event's
times come from its `at` (so events replayed after a reconnect keep their own times).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mlxhost.client.human import duration, size
from mlxhost.wire.inert import CONTROLS  # the same characters the host escapes: none reach the terminal

__all__ = [
    "LINGER_S",
    "QUIET_EVENTS",
    "Gauge",
    "HostInfo",
    "Session",
    "Worker",
    "bar",
    "clock_time",
    "describe",
    "duration",
    "event_time",
    "host_identity",
    "size",
    "sparkline",
    "strip_controls",
]

LINGER_S = 5.0  # how long a closed session stays in the table with its outcome
FADE_S = 2.0  # its last seconds there, it is drawn dim
MEMORY_READINGS = 24
# Frequent events that only update the tables; the log would be nothing else.
QUIET_EVENTS = frozenset({"session.progress", "worker.memory"})

Event = dict[str, Any]



def strip_controls(value: Any) -> Any:
    """`value`, as the host sent it, with control characters removed from every string in it.

    The host escapes them already; the console does not rely on that, since what it draws goes
    straight to the operator's terminal (an ESC sequence could retitle it or clear it).
    """
    if isinstance(value, str):
        # `isprintable` is false for every character the pattern matches: most strings pass as is.
        return value if value.isprintable() else CONTROLS.sub("", value)
    if isinstance(value, dict):
        return {strip_controls(k): strip_controls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_controls(v) for v in value]
    return value


def event_time(event: Event) -> float:
    return float(event["at"]) / 1000


def host_identity(state: dict[str, Any]) -> tuple[int, float]:
    """Tells one host run from the next: a new host on the same address starts its `seq` again."""
    return state["host"]["pid"], state["host"]["started"]


@dataclass
class HostInfo:
    pid: int
    started: float  # wall clock, as this side counts it
    accepting: bool = True
    opened: int = 0
    closed: int = 0

    @classmethod
    def from_state(cls, state: dict[str, Any], now: float) -> HostInfo:
        host, sessions = state["host"], state["sessions"]
        return cls(host["pid"], now - host["uptime_s"], host["accepting"], sessions["opened"], sessions["closed"])

    def on_event(self, event: Event) -> None:
        kind = event["type"]
        if kind == "session.opened":
            self.opened += 1
        elif kind == "session.closed":
            self.closed += 1
        elif kind == "host.stopping":
            self.accepting = False


@dataclass
class Worker:
    id: str
    model: str
    state: str = "starting"
    pid: int | None = None
    restarts: int = 0
    in_flight: int = 0
    ready_at: float | None = None
    memory: int | None = None  # MLX active + cache bytes
    rss: int | None = None
    readings: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=MEMORY_READINGS))
    last_exit: dict[str, Any] | None = None

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], now: float) -> Worker:
        worker = cls(data["id"], data["model"])
        worker.update(data, now)
        return worker

    def update(self, data: dict[str, Any], now: float) -> None:
        self.model = data["model"]
        self.state = data["state"]
        self.pid = data["pid"]
        self.restarts = data["restarts"]
        self.in_flight = data["in_flight"]
        self.ready_at = now - data["uptime_s"] if data["uptime_s"] is not None else None
        self.last_exit = data["last_exit"]
        memory = data["memory"]
        if memory is not None and not self.readings:
            # Later readings come as events; a snapshot only starts the series.
            self.read_memory(memory)

    def read_memory(self, reading: dict[str, Any]) -> None:
        self.memory = int(reading["active_bytes"]) + int(reading["cache_bytes"])
        self.rss = reading.get("rss_bytes")
        self.readings.append(self.memory)

    def on_event(self, event: Event) -> None:
        kind = event["type"]
        if kind == "worker.spawned":
            self.state, self.pid, self.ready_at = "starting", event["pid"], None
        elif kind == "worker.ready":
            self.state, self.pid, self.ready_at = "ready", event["pid"], event_time(event)
        elif kind == "worker.exited":
            self.state, self.ready_at, self.in_flight = "exited", None, 0
            self.last_exit = {k: event.get(k) for k in ("pid", "code", "signal", "uptime_s", "ready", "reason")}
        elif kind == "worker.restarting":
            self.state = "restarting"
            self.restarts += 1
        elif kind == "worker.exhausted":
            self.state = "exhausted"
        elif kind == "worker.memory":
            self.read_memory(event)
        elif kind == "model.evicted":
            self.state = "unloading"

    def uptime(self, now: float) -> float | None:
        return max(0.0, now - self.ready_at) if self.ready_at is not None else None

    def exit_text(self) -> str:
        if not self.last_exit:
            return "-"
        how = self.last_exit.get("signal") or _code(self.last_exit.get("code"))
        reason = self.last_exit.get("reason")
        if how is None:  # it never ran: a failed spawn says only why
            return str(reason or "-")
        return f"{how}: {reason}" if reason else str(how)


@dataclass
class Session:
    id: str
    model: str
    stream: bool = True
    state: str = "queued"
    opened_at: float = 0.0
    tokens: int = 0
    tokens_per_s: float = 0.0
    outcome: dict[str, Any] | None = None
    closed_at: float | None = None

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], now: float) -> Session:
        session = cls(data["id"], data["model"], data["stream"], data["state"], now - data["age_s"])
        session.tokens, session.tokens_per_s = data["tokens"], data["tokens_per_s"]
        if data["outcome"] is not None:
            session.outcome, session.closed_at = data["outcome"], now
        return session

    @classmethod
    def recent(cls, data: dict[str, Any], host_now: float, now: float) -> Session:
        """A session the snapshot lists as recently closed, closed as long ago as the host says."""
        session = cls.from_snapshot(data, now)
        closed_ago = host_now - (data["opened_at"] + data["age_s"])
        session.closed_at = now - max(0.0, closed_ago)
        session.opened_at = session.closed_at - data["age_s"]
        return session

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def on_event(self, event: Event) -> None:
        kind = event["type"]
        if kind == "session.progress" and not self.closed:
            self.state = "running"
            self.tokens, self.tokens_per_s = event["tokens"], event["tokens_per_s"]
        elif kind == "session.closed":
            self.state = "closed"
            self.tokens = event["tokens"]
            self.closed_at = event_time(event)
            self.opened_at = self.closed_at - event["age_ms"] / 1000
            fields = ("kind", "finish_reason", "reason", "code", "message")
            self.outcome = {k: event[k] for k in fields if event.get(k) is not None}

    def age(self, now: float) -> float:
        return max(0.0, (self.closed_at if self.closed_at is not None else now) - self.opened_at)

    def expired(self, now: float) -> bool:
        return self.closed_at is not None and now - self.closed_at >= LINGER_S

    def fading(self, now: float) -> bool:
        return self.closed_at is not None and now - self.closed_at >= LINGER_S - FADE_S

    def shown_state(self) -> str:
        return self.outcome["kind"] if self.outcome else self.state

    def outcome_text(self) -> str:
        outcome = self.outcome
        if not outcome:
            return ""
        if outcome["kind"] == "completed":
            return outcome.get("finish_reason") or ""
        if outcome["kind"] == "cancelled":
            return outcome.get("reason") or ""
        code, message = outcome.get("code") or "", outcome.get("message") or ""
        return f"{code}: {message}" if message else code

    def text(self) -> str:
        """Everything a filter may match."""
        return f"{self.id} {self.model} {self.shown_state()} {self.outcome_text()}"


@dataclass
class Gauge:
    model: str
    max_active: int | None = None
    max_queued: int | None = None
    active: int = 0
    queued: int = 0
    admitted: int = 0
    rejected: int = 0

    def update(self, data: dict[str, Any]) -> None:
        for name in ("max_active", "max_queued", "active", "queued", "admitted", "rejected"):
            setattr(self, name, data[name])

    def on_event(self, event: Event) -> None:
        if event["type"] == "admission.rejected":
            self.active, self.queued = event["active"], event["queued"]
            self.rejected += 1


def describe(event: Event) -> str:
    """One line of the event log."""
    e = event
    match e["type"]:
        case "host.started":
            return f"host started, pid {e.get('pid')}, models {', '.join(e.get('models', []))}"
        case "host.stopping":
            return f"host stopping ({e.get('reason')}, grace {e.get('grace_s')}s)"
        case "worker.spawned":
            return f"{e['worker']}: spawned pid {e['pid']}"
        case "worker.ready":
            return f"{e['worker']}: ready, pid {e['pid']}, in {e['ready_ms']} ms"
        case "worker.exited":
            if e.get("pid") is None:  # it was never started
                return f"{e['worker']}: could not be started: {e.get('reason') or 'unknown'}"
            how = f"signal {e['signal']}" if e.get("signal") else f"exit code {e.get('code')}"
            why = f": {e['reason']}" if e.get("reason") else ""
            return f"{e['worker']}: pid {e['pid']} exited, {how} after {duration(e.get('uptime_s') or 0)}{why}"
        case "worker.restarting":
            delay = f", in {e['delay_ms']} ms" if e.get("delay_ms") else ""
            return f"{e['worker']}: restarting (attempt {e['attempt']} of {e['max']}{delay})"
        case "worker.exhausted":
            why = f": {e['reason']}" if e.get("reason") else "; keeps exiting"
            return f"{e['worker']}: not restarted again{why} (r restarts it)"
        case "worker.memory":
            return f"{e['worker']}: memory {size(e['active_bytes'] + e['cache_bytes'])}"
        case "model.evicted":
            return f"{e['model']}: unloaded ({e['reason']})"
        case "session.opened":
            return f"{e['session']} opened on {e['model']}{' (stream)' if e.get('stream') else ''}"
        case "session.progress":
            return f"{e['session']}: {e['tokens']} tokens, {e['tokens_per_s']} tok/s"
        case "session.closed":
            detail = e.get("finish_reason") or e.get("reason") or e.get("code") or ""
            if e.get("message"):
                detail = f"{detail}: {e['message']}"
            return f"{e['session']} {e['kind']} ({detail}), {e['tokens']} tokens in {duration(e['age_ms'] / 1000)}"
        case "admission.rejected":
            who = e.get("session") or "a request"
            return f"{who} rejected by {e['model']}: {e['active']} running, {e['queued']} waiting"
        case "stream.reset":
            return "missed too many events; re-reading the state"
        case "stream.lagged":
            return "dropped by the host for reading too slowly; reconnecting"
    rest = {k: v for k, v in e.items() if k not in ("seq", "at", "type")}
    return " ".join(f"{k}={v}" for k, v in rest.items())


def clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Iterable[float], width: int) -> str:
    """The last `width` values as block characters, scaled between their least and greatest."""
    recent = list(values)[-width:]
    if not recent:
        return ""
    low, high = min(recent), max(recent)
    if high == low:
        return BLOCKS[0] * len(recent)
    top = len(BLOCKS) - 1
    return "".join(BLOCKS[round((v - low) / (high - low) * top)] for v in recent)


def bar(value: int, limit: int | None, width: int) -> str:
    """A gauge: `value` of `limit` as filled and empty cells."""
    if not limit:
        return "·" * width
    filled = min(width, round(width * value / limit))
    if value and not filled:
        filled = 1
    return "█" * filled + "░" * (width - filled)


def _code(code: object) -> str | None:
    return None if code is None else f"code {code}"
