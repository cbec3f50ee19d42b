"""--join-gap: how long running streams wait for their next token while a long prompt joins them.

Two isolated mlxhost servers, started as the bench starts its isolated server (`bench.hosts`) and
one after the other, each loading on a quiet machine: one with `--kv-layout padded` (before: mlx-lm's
BatchGenerator, which prefills a joining prompt in pieces of prefill_step, 2048 tokens, between
decode steps) and one with the default `per_row` layout (after: `RowBatch`, which prefills it in
chunks of about --prefill-chunk-ms, 50 ms, between decode steps). Both run with
`--stream-interval 0`.

One run, at N running streams (N = 1, 4, 8 unless --concurrency says otherwise):
1. N streaming chat completions of RUNNING_PROMPT, greedy, max_tokens RUNNING_MAX_TOKENS, with
   logprobs (see below): on a random model the greedy reply to it does not stop at eos (the
   server's probe says how it ended), and the streams are closed once the run's window has
   passed, well before max_tokens.
2. Once every one of them has sent STEADY_FRAMES frames, and SETTLE_S later (the batch decodes
   steadily; its seconds per frame over those SETTLE_S are reported as its step), one request
   whose prompt is JOIN_PROMPT_TOKENS long (counted with the model's tokenizer, chat template
   included; the server's usage.prompt_tokens is kept), distinct from every other (its own tag
   first, its own words), so no prompt cache holds it; max_tokens JOIN_MAX_TOKENS, logprobs too.
3. The figure: the largest gap between two consecutive frames of any running stream whose interval
   overlaps the window from that request's send to its first token (see `bench.join_gap_figures`);
   also its TTFT, and when the gap began.
Then the running streams are closed and the worker's engine is waited on until idle. This process
collects no garbage while a run is timed (`collector_paused`).

Frames and tokens: with --stream-interval 0 the server writes a frame for each token it hands
over, but only if the frame has something in it: a token whose text the detokenizer holds back (a
piece of a multi-byte character) or the output parser holds (a possible stop string or tool-call
marker) makes no frame without logprobs. On the tiny model 12 of the probe's 200 tokens are such
tokens, and two in a row during a join, whose decode steps take ~55 ms each, made a 165 ms frame
gap out of three 55 ms token gaps. With logprobs every token makes a frame (its logprobs entry),
so the streams ask for them, and the figure is the time between tokens as the client receives
them. Tokens that reach the worker's writer together go in one frame (each
frame's tokens are counted: JSON tokens_in_window against frames_in_window). A stall of the batch
shows as a gap at least as long as the stall, plus the relay's jitter (the parent and this client
share the machine's cores with the worker).

At each N a fresh pair of servers is started, so that every N meets a server in the same state:
the prompt cache fills over a run with the closed streams' and the joined prompts' KV, and the
lookup of a new prompt in it, in the generation thread before the prompt's first chunk, costs more
the more long entries it holds (tens of ms on the tiny model after a few runs). Each server gets
one warm-up run first (N = 1, a joining prompt of its own; JSON warm_ups): the first prompt a
worker prefills beside running streams is cut by a prefill budget that has measured nothing yet.
Then the rounds
(max(--repeats, ROUNDS); 1 with --smoke) run the two servers in alternating order, so that a
machine that drifts favours neither. --smoke: N = 2 alone, a shorter joining prompt.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from bench import hosts
from bench.figures import progress
from bench.health import isolated_worker, worker_client
from bench.join_gap_figures import (
    LAYOUTS,
    JoinGapSummary,
    JoinProbe,
    JoinRun,
    JoinServer,
    JoinSetup,
    join_run,
    summarize,
)
from bench.plan import DEFAULT_CONCURRENCY, Plan
from bench.raw import RawMLX
from bench.settings import REQUEST_TIMEOUT_S, alternating
from bench.streams import chat_body, chat_stream, has_content

JOIN_CONCURRENCY = [1, 4, 8]  # the running streams, unless --concurrency names others
SMOKE_CONCURRENCY = [2]
ROUNDS = 3
RUNNING_PROMPT = "Go on forever"
RUNNING_MAX_TOKENS = 3000  # not reached: the streams are closed once the window has passed
JOIN_PROMPT_TOKENS = {"full": 4000, "smoke": 1000}
JOIN_MAX_TOKENS = 4
STEADY_FRAMES = 16  # content frames each running stream sends before the joining prompt goes
SETTLE_S = 0.25  # and then this long: the steady seconds per frame are measured over it
PROBE_TOKENS = 200  # the probe of RUNNING_PROMPT: how its tokens come in frames
RUN_TIMEOUT_S = 300.0
TAIL_TIMEOUT_S = 30.0  # after the first token, for a frame of every running stream
IDLE_TIMEOUT_S = 30.0
IDLE_POLL_S = 0.01
SERVER_OPTIONS = ["--stream-interval=0"]  # a frame per token (see the docstring)
# Words of the joining prompts: plain, so that the demo tokenizer spends a few tokens on each.
WORDS = (
    "river stone window garden lantern harbor meadow candle bridge forest silver morning valley "
    "engine paper orange thunder pocket mirror ladder copper velvet island marble shadow basket"
).split()


def join_prompt(index: int, tokens: int, encode: Callable[[str], list[int]]) -> str:
    """A prompt of at most `tokens` tokens (as `encode` counts them), as close as words go: its
    own tag first, so that a prompt cache matches none of it past the chat template's first
    tokens, then words drawn with `index` as the seed."""
    tag = hashlib.sha256(f"join-{index}".encode()).hexdigest()[:12]
    draw = random.Random(index)
    words = [draw.choice(WORDS) for _ in range(tokens)]  # more words than tokens: enough

    def text(count: int) -> str:
        return f"{tag}: {' '.join(words[:count])}"

    low, high = 0, len(words)  # the most words that fit lies in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if len(encode(text(middle))) <= tokens:
            low = middle
        else:
            high = middle - 1
    return text(low)


@dataclass
class Window:
    """The running streams' frames while one prompt joins: when each came, and its tokens."""

    streams: int
    arrivals: list[list[float]] = field(init=False)
    tokens: list[list[int]] = field(init=False)  # each frame's
    ended: list[float | None] = field(init=False)  # when a stream ended by itself
    first_token: float | None = None
    steady: anyio.Event = field(default_factory=anyio.Event)
    passed: anyio.Event = field(default_factory=anyio.Event)  # a frame after the first token each

    def __post_init__(self) -> None:
        self.arrivals = [[] for _ in range(self.streams)]
        self.tokens = [[] for _ in range(self.streams)]
        self.ended = [None] * self.streams

    def frame(self, index: int, now: float, tokens: int) -> None:
        self.arrivals[index].append(now)
        self.tokens[index].append(tokens)
        self.check()

    def end(self, index: int, now: float) -> None:
        self.ended[index] = now
        self.check()

    def check(self) -> None:
        live = [i for i in range(self.streams) if self.ended[i] is None]
        if all(len(self.arrivals[i]) >= STEADY_FRAMES for i in live):
            self.steady.set()
        if self.first_token is not None and all(self.arrivals[i][-1] > self.first_token for i in live):
            self.passed.set()

    def ended_early(self) -> int:
        end = self.first_token or float("inf")
        return sum(1 for at in self.ended if at is not None and at < end)


def tokens_in(chunk: dict[str, Any]) -> int:
    """The tokens a chunk carries: its logprobs' entries (one per token, text or none)."""
    return sum(
        len((choice.get("logprobs") or {}).get("content") or []) for choice in chunk.get("choices", [])
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection in this process while frames are stamped: a full pass here (the raw
    model's objects are in this process) took 30 to 270 ms, and stamped the frames that late."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def read_running(client: httpx.AsyncClient, index: int, window: Window) -> None:
    body = {**chat_body(RUNNING_PROMPT, RUNNING_MAX_TOKENS, stream=True), "logprobs": True}
    async with chat_stream(client, body) as chunks:
        async for now, chunk in chunks:
            if chunk is None:
                window.end(index, now)
            elif tokens := tokens_in(chunk):
                window.frame(index, now, tokens)


@dataclass
class Joined:
    first_token: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)


async def read_joining(client: httpx.AsyncClient, prompt: str) -> Joined:
    """The joining request, read to its end: when its first token came, and its usage."""
    body = {
        **chat_body(prompt, JOIN_MAX_TOKENS, stream=True),
        "stream_options": {"include_usage": True},
        "logprobs": True,
    }
    joined = Joined()
    async with chat_stream(client, body) as chunks:
        async for now, chunk in chunks:
            if chunk is None:
                continue
            if chunk.get("usage"):
                joined.usage = chunk["usage"]
            if (has_content(chunk) or tokens_in(chunk)) and joined.first_token is None:
                joined.first_token = now
    if joined.first_token is None:
        raise RuntimeError(f"the joining request sent no token: usage {joined.usage}")
    return joined


async def wait_idle(socket: str) -> None:
    """Until the worker's engine holds no sequence (the closed streams have left the batch)."""
    deadline = time.perf_counter() + IDLE_TIMEOUT_S
    async with worker_client(socket) as worker:
        while True:
            engine = (await worker.get("/health")).json()["engine"]
            if engine["active"] == 0 and engine["waiting"] == 0:
                return
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the worker's engine is not idle {IDLE_TIMEOUT_S:g} s on: {engine}")
            await anyio.sleep(IDLE_POLL_S)


async def join_once(
    client: httpx.AsyncClient, socket: str, layout: str, streams: int, number: int, prompt: str
) -> JoinRun:
    """N running streams, the prompt joining them once they are steady; the run's record."""
    window = Window(streams)
    with collector_paused(), anyio.fail_after(RUN_TIMEOUT_S):
        async with anyio.create_task_group() as tasks:
            began = time.perf_counter()
            for index in range(streams):
                tasks.start_soon(read_running, client, index, window)
            await window.steady.wait()
            steady = time.perf_counter()
            await anyio.sleep(SETTLE_S)
            send = time.perf_counter()
            joined = await read_joining(client, prompt)
            window.first_token = joined.first_token
            window.check()
            with anyio.move_on_after(TAIL_TIMEOUT_S):
                await window.passed.wait()
            tasks.cancel_scope.cancel()  # closes the running streams' connections
    await wait_idle(socket)
    assert joined.first_token is not None
    details = joined.usage.get("prompt_tokens_details") or {}
    return join_run(
        layout, number, began, steady, send, joined.first_token, window.arrivals, window.tokens,
        joined.usage.get("prompt_tokens"), details.get("cached_tokens"), window.ended_early(),
    )  # fmt: skip


async def probe(client: httpx.AsyncClient) -> JoinProbe:
    """RUNNING_PROMPT read to its end at PROBE_TOKENS, as the running streams read it."""
    body = {
        **chat_body(RUNNING_PROMPT, PROBE_TOKENS, stream=True),
        "stream_options": {"include_usage": True},
        "logprobs": True,
    }
    frames, textless, tokens, finish = 0, 0, 0, None
    async with chat_stream(client, body) as chunks:
        async for _, chunk in chunks:
            if chunk is None:
                continue
            if tokens_in(chunk):
                frames += 1
                textless += not has_content(chunk)
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
            for choice in chunk.get("choices", []):
                finish = choice.get("finish_reason") or finish
    return JoinProbe(tokens, frames, textless, finish)


@dataclass
class Server:
    url: str
    socket: str
    record: JoinServer


async def start_server(plan: Plan, layout: str, stack: contextlib.ExitStack) -> Server:
    options = [*hosts.server_options("isolated", plan), *SERVER_OPTIONS, f"--kv-layout={layout}"]
    progress(f"join gap: starting mlxhost with {' '.join(options)}")
    began = time.perf_counter()
    host = await anyio.to_thread.run_sync(
        hosts.start, f"join-{layout}", plan.model_path, plan.max_batch, options
    )
    stack.enter_context(hosts.running(host))
    ready = time.perf_counter() - began
    async with httpx.AsyncClient(base_url=host.url, timeout=REQUEST_TIMEOUT_S) as client:
        socket = str((await isolated_worker(client))["socket"])
        probed = await probe(client)
    return Server(host.url, socket, JoinServer(options, ready, probed))


def levels_of(plan: Plan) -> list[int]:
    if plan.smoke:
        return list(SMOKE_CONCURRENCY)
    return list(JOIN_CONCURRENCY) if plan.concurrency == DEFAULT_CONCURRENCY else list(plan.concurrency)


async def measure_level(
    plan: Plan, level: int, rounds: int, prompts: Iterator[str]
) -> tuple[list[JoinRun], list[JoinRun], dict[str, JoinServer]]:
    """Both layouts' servers, fresh, each warmed up by one run at N = 1, then the rounds at N =
    `level` in alternating order; the runs, the warm-ups and the servers' records."""
    runs: list[JoinRun] = []
    warm_ups: list[JoinRun] = []
    with contextlib.ExitStack() as stack:
        servers = {layout: await start_server(plan, layout, stack) for layout in LAYOUTS}
        limits = httpx.Limits(max_connections=level + 4, max_keepalive_connections=level + 4)
        async with contextlib.AsyncExitStack() as opened:
            clients = {}
            for layout, server in servers.items():
                client = httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT_S, limits=limits)
                clients[layout] = await opened.enter_async_context(client)
                # The first prompt a worker prefills beside running streams is cut by a budget that
                # has measured nothing yet: its own figure, kept apart.
                warm = await join_once(clients[layout], server.socket, layout, 1, -1, next(prompts))
                warm_ups.append(warm)
                progress(f"join gap: {layout} warmed up (gap {warm.largest_gap_s * 1e3:.0f} ms)")
            for number, after in alternating(rounds):
                layout = LAYOUTS[after]
                run = await join_once(
                    clients[layout], servers[layout].socket, layout, level, number, next(prompts)
                )
                runs.append(run)
                progress(
                    f"join gap N={level} round {number + 1}/{rounds} {layout}: gap "
                    f"{run.largest_gap_s * 1e3:.0f} ms at +{run.largest_gap_at_s * 1e3:.0f} ms, join TTFT "
                    f"{run.ttft_s * 1e3:.0f} ms, step {run.steady_period_s * 1e3:.1f} ms, prompt "
                    f"{run.prompt_tokens} tokens"
                )
    return runs, warm_ups, {layout: server.record for layout, server in servers.items()}


async def measure_join_gap(plan: Plan, raw: RawMLX) -> JoinGapSummary:
    """At each N, on a fresh pair of servers (`measure_level`); the summary."""
    levels = levels_of(plan)
    rounds = plan.rounds(ROUNDS)
    length = JOIN_PROMPT_TOKENS["smoke" if plan.smoke else "full"]
    count = len(levels) * len(LAYOUTS) * (1 + rounds)
    progress(f"join gap: {count} distinct joining prompts of {length} tokens")
    prompts = iter([join_prompt(index, length, raw.encode) for index in range(count)])
    runs: list[JoinRun] = []
    warm_ups: list[JoinRun] = []
    servers: dict[str, list[JoinServer]] = {layout: [] for layout in LAYOUTS}
    for level in levels:
        level_runs, level_warm_ups, records = await measure_level(plan, level, rounds, prompts)
        runs += level_runs
        warm_ups += level_warm_ups
        for layout, record in records.items():
            servers[layout].append(record)
    setup = JoinSetup(RUNNING_PROMPT, RUNNING_MAX_TOKENS, length, JOIN_MAX_TOKENS)
    return summarize(runs, warm_ups, servers, setup, rounds, levels)
