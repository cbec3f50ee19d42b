"""A lagging subscriber: does an admin subscriber that stops reading slow generation down?

Isolated server, after the event latency runs: max(--repeats, 4) rounds of two runs, in
alternating order, each 4 greedy streams of 4 x max_tokens, total tok/s. One run with no admin
subscriber; the other with a raw TCP subscriber (SO_RCVBUF 4096, set before connect) that reads
the response head and then nothing, and an AdminClient that reads everything, both connected
before the streams start. Every run waits 0.5 s before its streams start (after the subscribers'
setup, where there are subscribers), so that neither kind runs into what the host and the worker
still do after the run before. After each run with subscribers the raw socket is read: a drop
would end its stream with stream.lagged (the host drops a subscriber with 512 events waiting,
which only happens once the kernel's socket buffers are full, far more than the events of one
run). CPU seconds of the parent, the worker and this process (which runs the reading subscriber
too) are recorded. Target: median with / median without >= 0.98.

The JSON's `events` holds these figures and the hub's alone (`bench.hub`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass

import anyio
import httpx

from bench.figures import median, progress, ratio, verdict
from bench.health import isolated_worker
from bench.hosts import ADMIN_HEADERS, ADMIN_TOKEN
from bench.hub import hub_ok, print_hub
from bench.processes import CPUClock, cores_used, describe_cores
from bench.results.measurements import BySubscribers, EventsSettings, EventsSummary, HubFigures, LaggingRead
from bench.runs import BatchRun, describe_batch
from bench.settings import alternating
from bench.streams import HTTPBench
from bench.watcher import EVENT_WAIT_S, EventWatcher, watching
from mlxhost.host.events import SUBSCRIBER_BUFFER

LAGGING_STREAMS = 4
LAGGING_TOKENS_FACTOR = 4  # the streams' max_tokens: this many times --max-tokens
LAGGING_MIN_ROUNDS = 4  # rounds (one run without and one with subscribers), even with --quick
LAGGING_RCVBUF = 4096  # the lagging subscriber's SO_RCVBUF (the kernel doubles it)
LAGGING_READ_S = 3.0  # at most this long reading what it was sent, after a run
LAGGING_SETTLE_S = 0.5  # the pause before each run, with or without subscribers
LAGGING_RATIO_TARGET = 0.98


class LaggingSubscriber:
    """A raw TCP client of /admin/events with a small receive buffer that reads the response's
    head (so the subscription exists) and then nothing, until `finish` reads what came.

    A plain socket, not httpx: its receive buffer must be small before it connects (so that the
    window it announces is small from the start; httpx sets socket options after connecting),
    and nothing past the response head may be read (httpx reads ahead into its own buffer, which
    would drain the socket this is meant to leave full)."""

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect, so that the window it announces is small from the start.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, LAGGING_RCVBUF)
        self.sock.settimeout(5.0)
        self.sock.connect((parsed.host, parsed.port or 80))
        self.sock.sendall(
            (
                f"GET /admin/events HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\n"
                f"Authorization: Bearer {ADMIN_TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:  # a byte at a time: nothing past the head is read
            byte = self.sock.recv(1)
            if not byte:
                raise RuntimeError(f"/admin/events closed the connection: {head!r}")
            head += byte
        status = head.split(b"\r\n", 1)[0]
        if b" 200 " not in status + b" ":
            raise RuntimeError(f"/admin/events answered {status!r}")

    def finish(self) -> LaggingRead:
        """Read what the server had queued for it (at most LAGGING_READ_S, until a pause), close."""
        self.sock.settimeout(0.3)
        data = bytearray()
        began = time.perf_counter()
        ended = False
        try:
            while time.perf_counter() - began < LAGGING_READ_S:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    ended = True
                    break
                data += chunk
        except (TimeoutError, OSError):
            pass
        finally:
            self.sock.close()
        types = [
            json.loads(line[len(b"data:") :]).get("type")
            for line in bytes(data).split(b"\n")
            if line.startswith(b"data:") and line.rstrip().endswith(b"}")
        ]
        return LaggingRead(
            bytes=len(data),
            events=len(types),
            last_type=types[-1] if types else None,
            dropped=bool(types) and types[-1] == "stream.lagged",
            stream_ended=ended,
        )


@dataclass(frozen=True)
class HubRun:
    """LAGGING_STREAMS greedy streams, with or without the two admin subscribers."""

    subscribers: bool
    batch: BatchRun
    cpu_s: dict[str, float]  # parent, worker, client (this process, the reading subscriber too)
    events_published: int | None  # seq after the run minus seq before (with subscribers)
    events_seen: int | None  # by the reading subscriber, during the run
    lagging: LaggingRead | None  # LaggingSubscriber.finish()

    @property
    def total_tok_s(self) -> float:
        return self.batch.total_tok_s


async def hub_once(
    bench: HTTPBench, url: str, subscribers: bool, max_tokens: int, pids: dict[str, int]
) -> HubRun:
    lagging: LaggingSubscriber | None = None
    watcher: EventWatcher | None = None
    published = seen = None
    finished = None
    async with contextlib.AsyncExitStack() as stack:
        if subscribers:
            lagging = await anyio.to_thread.run_sync(LaggingSubscriber, url)
            stack.callback(lagging.sock.close)  # closed already if it was read
            watcher = await stack.enter_async_context(watching(url))
        # Both kinds start alike, after a pause: the host's and the worker's work after the last
        # run (memory readings, session bookkeeping) done, and the subscribers' setup too.
        await anyio.sleep(LAGGING_SETTLE_S)
        clock = CPUClock(pids)
        batch = await bench.batch(LAGGING_STREAMS, max_tokens)
        cpu_s = clock.elapsed()
        if watcher is not None and lagging is not None:
            # Everything published up to the run's end, and what of it the reader got.
            start, end = watcher.seq_at_start, int((await watcher.client.state())["seq"])
            await watcher.wait_for(lambda e: e["seq"] >= end, EVENT_WAIT_S, watcher.live_from)
            published = end - start
            seen = len({e["seq"] for _, _, e in watcher.arrivals if start < e["seq"] <= end})
            finished = await anyio.to_thread.run_sync(lagging.finish)
    return HubRun(subscribers, batch, cpu_s, published, seen, finished)


def describe_hub(run: HubRun) -> str:
    cores = describe_cores({n: s / run.batch.wall_s for n, s in run.cpu_s.items()})
    text = f"{describe_batch(run.batch)}; CPU cores used: {cores}"
    if run.subscribers and run.lagging is not None:
        text += (
            f"; {run.events_published} events published, {run.events_seen} seen by the reading "
            f"subscriber; the lagging one got {run.lagging.events} "
            f"({run.lagging.bytes} bytes) when read afterwards, last "
            f"{run.lagging.last_type}"
        )
    return text


async def measure_hub_ratio(
    client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int, rounds: int
) -> list[HubRun]:
    """Rounds of two runs in alternating order: no admin subscriber, then a lagging (never reading)
    raw subscriber and a reading AdminClient."""
    bench = HTTPBench(client, prompt, max_tokens)
    worker = await isolated_worker(client)
    parent = (await client.get("/admin/state", headers=ADMIN_HEADERS)).json()["host"]["pid"]
    pids = {"parent": int(parent), "worker": int(worker["pid"]), "client": os.getpid()}
    runs: list[HubRun] = []
    for number, subscribers in alternating(rounds):
        run = await hub_once(bench, url, subscribers, max_tokens, pids)
        runs.append(run)
        kind = "with subscribers" if subscribers else "no subscriber"
        progress(f"  event hub {number + 1}/{rounds} {kind}: {describe_hub(run)}")
    return runs


def events_summary(runs: list[HubRun], hub: HubFigures, max_tokens: int) -> EventsSummary:
    plain = [r for r in runs if not r.subscribers]
    subscribed = [r for r in runs if r.subscribers]
    plain_tok_s = [r.batch.total_tok_s for r in plain]
    subscribed_tok_s = [r.batch.total_tok_s for r in subscribed]
    lagging_ratio = ratio(median(subscribed_tok_s), median(plain_tok_s))

    def cores(kind: list[HubRun]) -> dict[str, float]:
        return cores_used([(r.cpu_s, r.batch.wall_s) for r in kind])

    lagging = [r.lagging for r in subscribed if r.lagging is not None]
    return EventsSummary(
        hub_events_per_s=hub.events_per_s,
        lagging_subscriber_ratio=lagging_ratio,
        lagging_subscriber_ratio_by_round=[
            ratio(s, p) for p, s in zip(plain_tok_s, subscribed_tok_s, strict=False)
        ],
        tok_s=BySubscribers(no_subscriber=median(plain_tok_s), with_subscribers=median(subscribed_tok_s)),
        cpu_cores=BySubscribers(no_subscriber=cores(plain), with_subscribers=cores(subscribed)),
        events_published_per_run=[r.events_published for r in subscribed],
        events_seen_by_reader_per_run=[r.events_seen for r in subscribed],
        lagging_dropped=[entry.dropped for entry in lagging],
        lagging_received=lagging,
        hub_micro=hub,
        hub_ok=hub_ok(hub),
        lagging_ok=lagging_ratio >= LAGGING_RATIO_TARGET,
        settings=EventsSettings(
            streams=LAGGING_STREAMS,
            max_tokens=max_tokens,
            rounds=min(len(plain), len(subscribed)),
            lagging_rcvbuf=LAGGING_RCVBUF,
            hub_events=hub.events,
            subscriber_buffer=SUBSCRIBER_BUFFER,
        ),
        runs=runs,
    )


def print_lagging(events: EventsSummary) -> None:
    """The lagging subscriber's runs, then the hub alone."""
    settings = events.settings
    tok_s = events.tok_s
    by_round = ", ".join(f"{r:.3f}" for r in events.lagging_subscriber_ratio_by_round)
    print(
        f"  {settings.streams} greedy streams of max_tokens {settings.max_tokens}, "
        f"{settings.rounds} round(s), alternating: total tok/s with no admin subscriber "
        f"{tok_s.no_subscriber:.1f}, with a lagging one (raw socket, SO_RCVBUF "
        f"{settings.lagging_rcvbuf}, never reads) and a reading AdminClient "
        f"{tok_s.with_subscribers:.1f}"
    )
    print(
        f"    ratio {events.lagging_subscriber_ratio:.3f} (by round {by_round}): target >= "
        f"{LAGGING_RATIO_TARGET:g}: {verdict(events.lagging_ok)}"
    )
    cpu = events.cpu_cores
    print(
        f"    CPU cores used: no subscriber {describe_cores(cpu.no_subscriber)}; with "
        f"subscribers {describe_cores(cpu.with_subscribers)}"
    )
    received = events.lagging_received
    dropped = sum(events.lagging_dropped)
    print(
        f"    events per run: published {events.events_published_per_run}, seen by the reading "
        f"subscriber {events.events_seen_by_reader_per_run}; the lagging one, read after each "
        f"run, had {[r.events for r in received]} events queued for it, dropped (ended with "
        f"stream.lagged) in {dropped} of {len(received)} run(s)"
    )
    if dropped < len(received):
        print(
            f"    (a subscriber is dropped once {settings.subscriber_buffer} events wait in its "
            "buffer, and they only start to wait there when the kernel's socket buffers between "
            "the parent and it are full: on loopback that is hundreds of KB to MBs)"
        )
    print_hub(events.hub_micro, settings.subscriber_buffer)
