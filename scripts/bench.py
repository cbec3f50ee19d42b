"""Benchmark mlxhost against raw mlx-lm and mlx-lm's own server: same model, same prompt, greedy,
same max_tokens.

    python scripts/bench.py [--model DIR | --size tiny|bench] [--max-tokens N] [--repeats N]
                            [--concurrency 1,4,8,16] [--ttft-requests N] [--quick]
                            [--json PATH] [--chart PATH] [--mlx-lm-server-backlog N]

Four paths are measured in one run. Their repeats are interleaved, the order rotating from one
repeat to the next, so that a noisy machine slows all of them alike:

raw            mlx-lm in this process. Concurrency 1 is `stream_generate` with eos ignored;
               concurrency N inserts N copies of the prompt into a `BatchGenerator` at once (no
               stop tokens, so every row runs to max_tokens; batch sizes as the server's) and
               steps it until all finished, each row's tokens going through its own streaming
               detokenizer, as `stream_generate` does at concurrency 1 and as any server must to
               return text. The same batches without detokenizing are measured too and reported
               beside the targets (JSON: results.raw.cN.tokens_only_total_tok_s and
               targets.isolated_vs_raw_tokens_only): a floor no server reaches, not a target.
mlx_lm.server  the peer: `python -m mlx_lm server` (or `mlx_lm.server`) from the installed mlx-lm,
               on a free port, with --decode-concurrency and --prompt-concurrency set to the batch
               sizes the others use (its own defaults, 32 and 8, unless a concurrency above 32 is
               asked for) and --max-tokens to max_tokens; HF_HUB_OFFLINE=1 (it loads the local
               directory and needs no network). Its listening socket gets mlxhost's backlog, 100
               (--mlx-lm-server-backlog; 0 runs it as shipped): it is started as `python -c`,
               setting ThreadingHTTPServer.request_queue_size and calling mlx_lm.server's main().
               As shipped the backlog is socketserver's 5, and a burst of 8 or more connections
               overflows it: the extra ones wait for the kernel's SYN retransmit (1 s) or are reset
               (a stream whose connection fails before the response head is tried again, up to 3
               tries, the time counting from the first, for every path). It batches: requests that
               arrive together go into one BatchGenerator. It reports usage in a stream when asked
               (stream_options include_usage), so it is read exactly as mlxhost is. Its prompt
               cache stays on (its default): a repeated prompt is served from cached KV, which the
               usage chunk shows as prompt_tokens_details.cached_tokens (recorded in the JSON).
in-process     `python -m mlxhost serve --in-process`: the serving core and the model in one
               process. Its prompt cache is on (its default), as mlx_lm.server's is.
isolated       `python -m mlxhost serve` (the default): a parent process that never imports MLX,
               proxying each request over a private Unix socket to a worker process that holds
               the model.
The three servers run side by side in subprocesses, driven over HTTP with streaming chat
completions (httpx, SSE parsed by hand). Concurrency N is N streams at once. The mlxhost servers
run with the same serving options, and with --max-active at least the highest concurrency (16
by default; the parent admits 8 sessions per model unless told otherwise, and would queue the
rest), so that no stream of a cN run waits in the parent's queue.

Each path is warmed up first: one full single-stream generation, then one short batch at the
highest concurrency. The prompt is picked by a greedy probe (see PROMPTS).

Figures, each the median over the repeats:
  decode tok/s    (tokens - 1) / (time of the last token - time of the first token), one stream.
                  The first token is not counted because its time is the TTFT. Over HTTP the
                  "token times" are those of the first and last SSE frames with non-empty content
                  (mlxhost coalesces tokens that come within --stream-interval, 50 ms by default,
                  into one frame; mlx_lm.server sends a frame per token).
  TTFT p50, p95   call (or request start) to the first token (first frame with content), one
                  stream at a time: over every single-stream request of the path, the c1 runs and,
                  after them, --ttft-requests more (20; 10 with --quick) of max_tokens
                  min(32, max_tokens), the paths taking turns. Also, per concurrency N, over the N
                  streams of every cN run (raw: the insert to each row's first token).
  end-to-end      tokens / (call to the last token (raw) or to the end of the stream (HTTP)).
  total tok/s cN  tokens of all N streams / (first insert or request start to the last finish).
Rates come from the tokens actually generated (HTTP: the usage chunks), which are recorded.

Targets printed after the table (and in the JSON's targets): isolated >= 0.95 x raw at every
concurrency (c1: decode tok/s; cN: total tok/s); isolated >= 1.15 x mlx_lm.server at c8 (total
tok/s); TTFT p50 isolated <= raw + 5 ms.

Chart (--chart, default beside --json with .png, else bench.png): total tok/s against concurrency
for the four paths (c1: the single stream's end-to-end tok/s, which is its total), a PNG drawn by
matplotlib (Agg). Without matplotlib the chart is skipped, with a hint: pip install -e '.[bench]'.

Then, with the servers idle (mlx_lm.server is stopped after the memory readings):
  memory     RSS (psutil) of the isolated server's parent and of its worker, of the in-process
             server and of mlx_lm.server. Target: parent <= 80 MB.
  recovery   isolated server only, --repeats times: read the worker's pid and `ready_s` (its
             spawn-to-ready seconds) from /health, kill -9 the worker, and at once send a small
             non-streaming chat request (max_tokens 4, 5 s client timeout, or 3 times the
             request's warm time if longer) every 20 ms, retrying 502, 503, timeouts and
             connection errors, until one answers 200. recovery_s is the time from the kill to
             that 200. Target: recovery_s <= worker_ready_s + 1 s. The parent's log splits it:
             kill to the parent seeing the exit, to the respawn, to the new worker being ready,
             to the 200; the same request, timed on the warm worker just before the kill, shows
             how much of the last step is the request itself. Also checked, the stricter
             reading: recovery_s <= the model load alone (the in-process server's "loaded in")
             + 1 s; and timed, a fresh interpreter importing the worker's modules, which is most
             of a ready_s.
             The isolated server runs with --early-exit 0 and a --restart-limit above the
             repeats: back-to-back kills would otherwise trip the crash-loop guards (two exits
             within 10 s of their spawn wait --crash-backoff, 5 s; at most 3 respawns per 60 s),
             which are there for a model that cannot load, not what is measured here. Neither
             option changes how requests are served.
  cancel     isolated server, --repeats times, before the kills: a greedy stream of max_tokens
             3000 (tiny; 1000 for bench) read until 20 content frames came, then its connection
             closed (t0); the worker's /health (over its Unix socket) is polled every 2 ms until
             engine.cancelled went up and engine.active is 0 (t1). cancel_ms = t1 - t0, an upper
             bound (it includes the polling); cancel_steps = the engine's last_cancel_lag_steps
             (decode steps from the cancel reaching the engine to the sequence leaving the
             batch). Also shown: the per-step time at c1 (1000 / the isolated single-stream
             decode tok/s), cancel_ms in steps, the engine steps from just before the close to
             t1, and the parent's outcome for the session (x-mlxhost-session). Target:
             cancel_steps <= 1.
  overload   a separate isolated server with --max-active 4 --max-queued 4, max(--repeats, 3)
             rounds of two runs, in alternating order. Each run: 4 streams of 4 x max_tokens,
             all admitted (the parent's /health polled until admission.active is 4), total tok/s
             from their start to the last end. Unloaded: nothing else. Overloaded: from then
             until the first admitted stream ends, 8 more clients (each on its own keep-alive
             connection, speaking raw HTTP/1.1: an httpx request costs the client as much CPU as
             the server's answer), each sending a non-streaming request with max_tokens 1 and,
             after a 429, the next one 20 ms (+-50%) later: 4 of them wait in the queue, the
             other 4 keep drawing 429s (about 150-200 a second). Then the unanswered ones (the
             queued) close their connections, which takes them out of the queue; with
             max_tokens 1, one admitted in between costs the streams one short prefill. reject_ms
             is request sent to the whole 429 read, client side; each 429 is checked for
             Retry-After, x-mlxhost-session and error type/code. CPU seconds of the parent, the
             worker and this process are recorded per run. Targets: reject_ms p99 < 5 ms;
             admitted_vs_unloaded (median overloaded tok/s / median unloaded) >= 0.95.
  events     the admin event stream (GET /admin/events, SSE), isolated server, after the cancel
             runs and before the kills. Latency: a subscriber through
             mlxhost.client.admin.AdminClient (what `mlxhost tui` reads), live before the first
             request (it resumes, Last-Event-ID, just before the last published event, and waits
             for it); then 20 non-streaming requests of max_tokens 8, one after the other (one
             more first, not counted). For each session (x-mlxhost-session): session.opened from
             the request's start, session.closed from the response read, to the event's arrival
             at the subscriber, all on this process's perf_counter. Also shown: the event's `at`
             (the parent's wall clock, ms) to the arrival; and, during the recovery runs, each
             kill -9 to its worker.exited event's arrival. Target: p95 <= 250 ms (over the
             session events; worker.exited checked alike, by its max).
             Lagging subscriber: max(--repeats, 4) rounds of two runs, in alternating order, each
             4 greedy streams of 4 x max_tokens, total tok/s. One run with no admin subscriber;
             the other with a raw TCP subscriber (SO_RCVBUF 4096, set before connect) that reads
             the response head and then nothing, and an AdminClient that reads everything, both
             connected before the streams start. Every run waits 0.5 s before its streams start
             (after the subscribers' setup, where there are subscribers), so that neither kind
             runs into what the host and the worker still do after the run before. After each
             run with subscribers the raw socket is read: a drop would end its stream with
             stream.lagged (the host drops a subscriber with 512 events waiting, which only
             happens once the kernel's socket buffers are full, far more than the events of one
             run). CPU seconds of the parent, the worker and this
             process (which runs the reading subscriber too) are recorded. Target: median with /
             median without >= 0.98.
             The hub alone (after the servers stopped): mlxhost.host.events.EventHub in this
             process, under anyio: 100,000 events published, a checkpoint after each (as the
             host's publishers, each in a task step of its own), one subscriber that never reads
             and one reading in a task. Target: >= 1,000 events/s, the reader gets every event
             and the other is dropped with stream.lagged.

JSON (--json): ratios.isolated_vs_raw, ratios.in_process_vs_raw, ratios.mlx_lm_server_vs_raw,
ratios.isolated_vs_mlx_lm_server and ratios.in_process_vs_mlx_lm_server (each with c1 = decode,
c1_e2e, ttft_p50, and cN = total tok/s), ratios.isolated_vs_in_process,
ttft_ms.{p50,p95}.{raw,mlx_lm_server,in_process,isolated} (with ttft_ms.count and
ttft_ms.by_concurrency.<path>.cN.{p50,p95}), results.{raw,mlx_lm_server,in_process,isolated},
mlx_lm_server (command, cached prompt tokens), rss_mb.{parent,worker,in_process,mlx_lm_server},
chart (the PNG's path, or null), recovery_s and worker_ready_s (medians), recovery.runs (each kill,
split), cancel_ms.{p50,max}, cancel_steps.{p50,max} and cancel (runs, per-step time, outcomes),
overload (reject_ms.{p50,p99,max,count}, admitted_vs_unloaded, admitted_tok_s, CPU, runs),
event_latency_ms.{p50,p95,max} (with by_type, publish_to_arrival_ms, worker_exited, samples),
events.hub_events_per_s and events.lagging_subscriber_ratio (with tok/s, CPU, events per run, what
the lagging subscriber got, hub_micro, runs), targets. For older readers ratios.mlxhost_vs_raw and
ttft_ms.p50.mlxhost remain, as aliases of the isolated figures; results.mlxhost is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import platform
import random
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import anyio.lowlevel
import httpx
import mlx.core as mx
import mlx_lm
import psutil
from mlx.utils import tree_flatten
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_sampler

REPO_ROOT = Path(__file__).resolve().parent.parent
try:
    from mlxhost import demo
except ImportError:
    # Run straight from a checkout, without the package installed.
    sys.path.insert(0, str(REPO_ROOT))
    from mlxhost import demo
from mlxhost.client.admin import AdminClient, Target
from mlxhost.host.events import SUBSCRIBER_BUFFER, EventHub

READY = re.compile(r"mlxhost ready: .* on (http://[\d.]+:\d+)")
LOADED = re.compile(r"\(loaded in ([\d.]+)s\)")  # the in-process ready line
SPAWNED = re.compile(r"spawned pid (\d+)")  # the isolated parent's log
SERVER_START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 900.0
# The server's defaults (EngineOptions), which the raw BatchGenerator copies.
MAX_BATCH = 32
PREFILL_BATCH = 8

PATHS = ("raw", "mlx_lm_server", "in_process", "isolated")
SERVED = ("in_process", "isolated")  # the mlxhost servers
HTTP_PATHS = ("mlx_lm_server", *SERVED)
LABELS = {
    "raw": "raw",
    "mlx_lm_server": "mlx_lm.server",
    "in_process": "in-process",
    "isolated": "isolated",
}
DEFAULT_CONCURRENCY = [1, 4, 8, 16]
# The mlxhost servers admit at least this many sessions at once (the parent's default is 8), and
# always at least the highest concurrency, so that no stream of a cN run is queued.
MIN_MAX_ACTIVE = 16
# TTFT: single-stream requests after the throughput runs, the paths taking turns.
TTFT_REQUESTS = {"full": 20, "quick": 10}
TTFT_MAX_TOKENS = 32  # or max_tokens, if lower
# Targets on the table's figures.
ISOLATED_VS_RAW_MIN = 0.95  # at every concurrency
ISOLATED_VS_MLX_LM_SERVER_MIN = 1.15
ISOLATED_VS_MLX_LM_SERVER_AT = 8  # concurrency
TTFT_SLACK_MS = 5.0  # TTFT p50: isolated <= raw + this
MLX_LM_SERVER_ANSWER_TIMEOUT_S = 60.0  # the first request, which waits for the model to load
# mlx_lm.server listens with socketserver's backlog of 5: 8 or more connections at once overflow
# it, and the extra ones wait for the kernel's SYN retransmit (1 s), or are reset. It is given
# mlxhost's backlog (hypercorn's default, 100) unless --mlx-lm-server-backlog says otherwise.
MLX_LM_SERVER_BACKLOG = 100
MLX_LM_SERVER_LAUNCHER = (
    "import sys, http.server; http.server.ThreadingHTTPServer.request_queue_size = {backlog}; "
    "sys.argv[0] = 'mlx_lm.server'; from mlx_lm.server import main; main()"
)
# A stream whose connection fails before the response head (mlx_lm.server, backlog overflow) is
# tried again, at most this many times in all; its time counts from the first try.
STREAM_ATTEMPTS = 3

RECOVERY_MAX_TOKENS = 4
RECOVERY_ATTEMPT_TIMEOUT_S = 5.0
RECOVERY_POLL_S = 0.02
RECOVERY_DEADLINE_S = 150.0  # the server's load_timeout (120 s) and some
RECOVERY_SLACK_S = 1.0  # target: recovery_s <= worker_ready_s + this
PARENT_RSS_TARGET_MB = 80.0
MB = 1 << 20

SESSION_HEADER = "x-mlxhost-session"


def new_admin_token() -> str:
    """Hex, so that it never starts with '-' (an argv word that did would read as an option)."""
    return secrets.token_hex(24)


# The admin API (/admin/sessions) needs a token on TCP; the isolated server is given this one.
ADMIN_TOKEN = new_admin_token()
ADMIN_HEADERS = {"authorization": f"Bearer {ADMIN_TOKEN}"}
# Cancellation: a long greedy stream, closed once this many content frames came.
CANCEL_MAX_TOKENS = {"tiny": 3000, "bench": 1000}  # "custom" (--model): the tiny figure
CANCEL_AFTER_FRAMES = 20
CANCEL_POLL_S = 0.002  # the worker's /health, from the close until the engine is idle
CANCEL_DEADLINE_S = 10.0
CANCEL_STEPS_TARGET = 1  # the sequence leaves the batch within one decode step of the cancel
# Overload: a server admitting 4 sessions and queueing 4; 4 long admitted streams, and meanwhile
# 8 more requests kept in flight, refilled every OVERLOAD_REFILL_S.
OVERLOAD_MAX_ACTIVE = 4
OVERLOAD_MAX_QUEUED = 4
OVERLOAD_EXTRA = 8
OVERLOAD_REFILL_S = 0.02
OVERLOAD_TOKENS_FACTOR = 4  # the admitted streams' max_tokens: this many times --max-tokens
OVERLOAD_MIN_ROUNDS = 3  # rounds (one unloaded and one overloaded run each), even with --quick
REJECT_P99_TARGET_MS = 5.0
ADMITTED_RATIO_TARGET = 0.95
# The admin event stream: event latency over short sequential requests; generation with a lagging
# subscriber against none; the hub alone.
EVENT_REQUESTS = 20
EVENT_MAX_TOKENS = 8
EVENT_WAIT_S = 5.0  # for an event to arrive before it counts as missing
EVENT_LATENCY_P95_TARGET_MS = 250.0
LAGGING_STREAMS = 4
LAGGING_TOKENS_FACTOR = 4  # the streams' max_tokens: this many times --max-tokens
LAGGING_MIN_ROUNDS = 4  # rounds (one run without and one with subscribers), even with --quick
LAGGING_RCVBUF = 4096  # the lagging subscriber's SO_RCVBUF (the kernel doubles it)
LAGGING_READ_S = 3.0  # at most this long reading what it was sent, after a run
LAGGING_SETTLE_S = 0.5  # the pause before each run, with or without subscribers
LAGGING_RATIO_TARGET = 0.98
HUB_EVENTS = 100_000
HUB_EVENTS_PER_S_TARGET = 1000.0

DEFAULT_MAX_TOKENS = {"tiny": 256, "bench": 64}
QUICK_MAX_TOKENS = {"tiny": 128, "bench": 32}
# The first prompt whose greedy reply suits every path is used: it must run to max_tokens without
# eos, so that all generate the same number of tokens (a random-weight model may emit eos at any
# point), and its text must stream, token by token, from the first token on. A random model often
# emits byte fragments that are not yet valid UTF-8, and a detokenizer holds those back: a reply
# made of them reaches an HTTP client in one frame at the end, and TTFT and decode rate over HTTP
# would then measure nothing.
PROMPTS = (
    "Tell me about the sea.",
    "Write a poem about rain.",
    "Explain, in detail, how a bicycle works.",
    "What is the capital of France?",
    "hello",
)
MIN_VISIBLE_FRACTION = 0.5  # of the tokens, those whose text can be sent at once


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamRun:
    """One stream, timed from the call (request start)."""

    tokens: int
    ttft_s: float  # call to the first token
    first_to_last_s: float  # first token to last token
    total_s: float  # call to the end (raw: the last token; HTTP: the stream's end)
    text_frames: int  # responses (raw) or SSE frames (HTTP) that carried text

    @property
    def decode_tok_s(self) -> float:
        if self.tokens < 2 or self.first_to_last_s <= 0:
            return float("nan")
        return (self.tokens - 1) / self.first_to_last_s

    @property
    def e2e_tok_s(self) -> float:
        return self.tokens / self.total_s


@dataclass(frozen=True)
class BatchRun:
    """N streams started together, timed from the first start to the last finish."""

    tokens: list[int]  # per stream
    wall_s: float
    ttft_s: list[float] = field(default_factory=list)  # per stream: its start to its first token

    @property
    def total_tok_s(self) -> float:
        return sum(self.tokens) / self.wall_s


@dataclass
class Measurements:
    single: list[StreamRun] = field(default_factory=list)
    batches: dict[int, list[BatchRun]] = field(default_factory=dict)
    # raw only: the same batches with no detokenizing, tokens alone (a floor no server can reach)
    tokens_only: dict[int, list[BatchRun]] = field(default_factory=dict)
    ttft_probes: list[StreamRun] = field(default_factory=list)  # the TTFT requests


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    if denominator == 0 or denominator != denominator:  # zero or nan
        return float("nan")
    return numerator / denominator


def json_safe(value: Any) -> Any:
    """NaN and infinities become null: JSON has no such numbers."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- raw mlx-lm ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptProbe:
    reaches_max_tokens: bool
    first_token_visible: bool
    visible_fraction: float

    @property
    def suitable(self) -> bool:
        return (
            self.reaches_max_tokens
            and self.first_token_visible
            and self.visible_fraction >= MIN_VISIBLE_FRACTION
        )


class RawMLX:
    """mlx-lm in this process. Every MLX call happens in the thread that made this object."""

    def __init__(self, model_path: Path) -> None:
        began = time.perf_counter()
        self.model, self.tokenizer = mlx_lm.load(str(model_path))
        self.load_s = time.perf_counter() - began
        self.parameters = sum(v.size for _, v in tree_flatten(self.model.parameters()))
        self.sampler = make_sampler(temp=0.0)

    def encode(self, prompt: str) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True
        )
        return list(ids)

    def stream(self, prompt: list[int], max_tokens: int, ignore_eos: bool = True) -> StreamRun:
        """One `stream_generate` call; with ignore_eos it runs to max_tokens whatever it emits."""
        eos = set(self.tokenizer.eos_token_ids)
        if ignore_eos:
            self.tokenizer.eos_token_ids = set()
        try:
            start = time.perf_counter()
            first = last = start
            tokens = frames = 0
            for response in mlx_lm.stream_generate(
                self.model, self.tokenizer, prompt, max_tokens=max_tokens, sampler=self.sampler
            ):
                last = time.perf_counter()
                if tokens == 0:
                    first = last
                tokens = response.generation_tokens
                frames += bool(response.text)
        finally:
            self.tokenizer.eos_token_ids = eos
        return StreamRun(tokens, first - start, last - first, last - start, frames)

    def probe(self, prompt: list[int], max_tokens: int) -> PromptProbe:
        """How a greedy reply to the prompt streams, eos included."""
        segments: list[str] = []
        finish = None
        for response in mlx_lm.stream_generate(
            self.model, self.tokenizer, prompt, max_tokens=max_tokens, sampler=self.sampler
        ):
            segments.append(response.text)
            finish = response.finish_reason
        visible = sum(1 for text in segments if text) / len(segments)
        return PromptProbe(finish == "length", bool(segments[0]), visible)

    def batch(
        self,
        prompt: list[int],
        concurrency: int,
        max_tokens: int,
        max_batch: int = MAX_BATCH,
        detokenize: bool = True,
    ) -> BatchRun:
        """Insert `concurrency` copies of the prompt at once; step until every row finished.

        With `detokenize` every row's tokens go through its own streaming detokenizer, as
        `stream_generate` does for one stream and as any server must do to return text."""
        generator = BatchGenerator(
            self.model,
            stop_tokens=None,  # no eos: every row generates exactly max_tokens
            sampler=self.sampler,
            completion_batch_size=max_batch,
            prefill_batch_size=PREFILL_BATCH,
        )
        try:
            start = time.perf_counter()
            uids = generator.insert([prompt] * concurrency, max_tokens=[max_tokens] * concurrency)
            detokenizers = {uid: self.tokenizer.detokenizer for uid in uids} if detokenize else {}
            for detokenizer in detokenizers.values():
                detokenizer.reset()
            counts = dict.fromkeys(uids, 0)
            firsts: dict[int, float] = {}
            running = set(uids)
            while running:
                _, responses = generator.next()
                now = time.perf_counter()
                for response in responses:
                    counts[response.uid] += 1
                    if detokenize:
                        detokenizers[response.uid].add_token(response.token)
                        detokenizers[response.uid].last_segment  # noqa: B018  # the text, as a server takes it
                    firsts.setdefault(response.uid, now)
                    if response.finish_reason is not None:
                        running.discard(response.uid)
            wall = time.perf_counter() - start
        finally:
            generator.close()
        return BatchRun(
            [counts[uid] for uid in uids], wall, [firsts[uid] - start for uid in uids]
        )


# -- mlxhost over HTTP ---------------------------------------------------------------------------


class Server:
    """`python -m mlxhost serve` on a free port; its log is kept, each line with when it came."""

    def __init__(
        self, name: str, model_path: Path, max_batch: int, options: Sequence[str] = ()
    ) -> None:
        self.name = name
        env = dict(os.environ)
        # Serve the code of the checkout this script belongs to, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        # Every option as one `--opt=value` word: a value can never be read as an option.
        command = [
            sys.executable, "-m", "mlxhost", "serve", *options,
            f"--model={model_path}", "--host=127.0.0.1", "--port=0", f"--max-batch={max_batch}",
        ]  # fmt: skip
        self.log: collections.deque[tuple[float, str]] = collections.deque(maxlen=5000)
        self.url: str | None = None
        self.load_s: float | None = None  # from the in-process ready line
        self.worker_pids: set[int] = set()  # every worker the parent said it spawned
        self._ready = threading.Event()
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        self.pid = self.process.pid
        # Drain stderr for the server's whole life, so that it never blocks on a full pipe.
        threading.Thread(target=self._read_log, name=f"mlxhost-log-{name}", daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append((time.perf_counter(), line.rstrip("\n")))
            if match := SPAWNED.search(line):
                self.worker_pids.add(int(match.group(1)))
            if self.url is None and (match := READY.search(line)):
                if loaded := LOADED.search(line):
                    self.load_s = float(loaded.group(1))
                self.url = match.group(1)
                self._ready.set()
        self._ready.set()  # the server exited: stop waiting

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT_S) -> str:
        self._ready.wait(timeout)
        if self.url is None:
            code = self.process.poll()
            raise RuntimeError(
                f"mlxhost ({self.name}) did not become ready (exit code {code}):\n{self.log_tail()}"
            )
        return self.url

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(line for _, line in list(self.log)[-lines:])

    def log_since(self, since: float) -> list[tuple[float, str]]:
        return [(t, line) for t, line in list(self.log) if t >= since]

    def stop(self) -> None:
        """SIGTERM (the parent stops its workers), SIGKILL if need be; no worker outlives it."""
        workers = set(self.worker_pids)
        with contextlib.suppress(psutil.Error):
            workers |= {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # A worker whose parent was killed stops when it sees its stdin close; give it a moment,
        # then kill it: a benchmark must leave nothing behind.
        deadline = time.monotonic() + 10
        for pid in sorted(workers):
            try:
                worker = psutil.Process(pid)
                if "mlxhost" not in " ".join(worker.cmdline()):
                    continue  # gone, and the pid reused
                worker.wait(timeout=max(0.0, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                progress(f"warning: {self.name} worker pid {pid} outlived its parent; killing it")
                with contextlib.suppress(psutil.Error):
                    worker.kill()
                    worker.wait(timeout=5)
            except psutil.Error:
                pass  # already gone


@contextmanager
def running_server(
    name: str, model_path: Path, max_batch: int, options: Sequence[str] = ()
) -> Iterator[Server]:
    server = Server(name, model_path, max_batch, options)
    try:
        yield server
    except BaseException:
        progress(f"mlxhost ({name}) log, the last lines:\n{server.log_tail(40)}")
        raise
    finally:
        server.stop()


def free_port() -> int:
    """A TCP port free now (mlx_lm.server takes no port 0); a start that lost it is retried."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MlxLmServer:
    """mlx-lm's own server, `python -m mlx_lm server`, on a free port; its log is kept."""

    def __init__(self, model_path: Path, max_batch: int, max_tokens: int, backlog: int) -> None:
        self.name = "mlx_lm_server"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backlog = backlog or 5  # 0: as shipped, socketserver's 5
        env = dict(os.environ)
        # The model is a local directory: nothing to fetch, and nothing should be tried.
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        if backlog:
            # mlx_lm.server's own main(), its listening socket's backlog set first.
            launch = ["-c", MLX_LM_SERVER_LAUNCHER.format(backlog=int(backlog))]
        else:
            launch = ["-m", "mlx_lm", "server"]
        self.command = [
            sys.executable, *launch,
            "--model", str(model_path), "--host", "127.0.0.1", "--port", str(self.port),
            "--decode-concurrency", str(max_batch), "--prompt-concurrency", str(PREFILL_BATCH),
            "--max-tokens", str(max_tokens),
        ]  # fmt: skip
        self.log: collections.deque[tuple[float, str]] = collections.deque(maxlen=5000)
        self.started = time.perf_counter()
        self.ready_s: float | None = None  # start to the first answer (the model loaded)
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        self.pid = self.process.pid
        threading.Thread(target=self._read_log, name="mlx-lm-server-log", daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append((time.perf_counter(), line.rstrip("\n")))

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(line for _, line in list(self.log)[-lines:])

    def wait_ready(self, prompt: str, timeout: float = SERVER_START_TIMEOUT_S) -> str:
        """Poll /health until it answers 200, then send one short chat request: the model loads
        in the server's generation thread after /health is already up."""
        deadline = time.perf_counter() + timeout
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"mlx_lm.server exited with code {self.process.returncode}:\n"
                        f"{self.log_tail()}"
                    )
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"mlx_lm.server did not answer in time:\n{self.log_tail()}")
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
            response = client.post(
                "/v1/chat/completions",
                json=chat_body(prompt, 1, stream=False),
                timeout=MLX_LM_SERVER_ANSWER_TIMEOUT_S,
            )
            if response.status_code != 200:
                raise RuntimeError(
                    f"mlx_lm.server answered {response.status_code}: {response.text}\n"
                    f"{self.log_tail()}"
                )
        self.ready_s = time.perf_counter() - self.started
        return self.url

    def stop(self) -> None:
        """SIGTERM (it has no handler: the process ends), SIGKILL if need be."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_mlx_lm_server(
    model_path: Path, max_batch: int, max_tokens: int, backlog: int, prompt: str, attempts: int = 3
) -> MlxLmServer:
    """A ready mlx_lm.server; a start that lost its port to someone else is retried."""
    for attempt in range(attempts):
        server = MlxLmServer(model_path, max_batch, max_tokens, backlog)
        try:
            server.wait_ready(prompt)
            return server
        except BaseException as exc:
            server.stop()
            lost_port = "Address already in use" in server.log_tail(50)
            if not lost_port or attempt + 1 == attempts or not isinstance(exc, RuntimeError):
                raise
            progress(f"mlx_lm.server: port {server.port} was taken; retrying")
    raise AssertionError("unreachable")


def rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / MB
    except psutil.Error:
        return None


class HTTPBench:
    def __init__(self, client: httpx.AsyncClient, prompt: str, max_tokens: int) -> None:
        self.client = client
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.prompt_tokens: int | None = None  # as the server counted them
        # usage.prompt_tokens_details.cached_tokens (mlx_lm.server's prompt cache) to how often
        self.cached_tokens: collections.Counter[int] = collections.Counter()
        # Streams tried again after their connection failed before the response head, by error.
        self.retries: collections.Counter[str] = collections.Counter()

    def _body(self, max_tokens: int) -> dict[str, Any]:
        return {
            "messages": [{"role": "user", "content": self.prompt}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    async def stream(self, max_tokens: int | None = None) -> StreamRun:
        """One streamed chat completion, read to the end of the response."""
        body = self._body(max_tokens or self.max_tokens)
        tokens: int | None = None
        first: float | None = None
        last: float | None = None
        frames = 0
        done = False
        start = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            for attempt in range(1, STREAM_ATTEMPTS + 1):
                try:
                    response = await stack.enter_async_context(
                        self.client.stream("POST", "/v1/chat/completions", json=body)
                    )
                    break
                except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as exc:
                    if attempt == STREAM_ATTEMPTS:
                        raise
                    self.retries[type(exc).__name__] += 1
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators and keep-alive comments
                now = time.perf_counter()
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"the stream failed: {chunk['error']}")
                if usage := chunk.get("usage"):
                    tokens = usage["completion_tokens"]
                    self.prompt_tokens = usage["prompt_tokens"]
                    details = usage.get("prompt_tokens_details") or {}
                    if details.get("cached_tokens") is not None:
                        self.cached_tokens[int(details["cached_tokens"])] += 1
                if any(choice["delta"].get("content") for choice in chunk["choices"]):
                    first = now if first is None else first
                    last = now
                    frames += 1
        end = time.perf_counter()
        if not done or tokens is None:
            raise RuntimeError("the stream ended without a usage chunk and [DONE]")
        if first is None or last is None:
            first = last = end  # no visible text at all: no decode rate to speak of
        return StreamRun(tokens, first - start, last - first, end - start, frames)

    async def batch(self, concurrency: int, max_tokens: int | None = None) -> BatchRun:
        start = time.perf_counter()
        runs = await asyncio.gather(*(self.stream(max_tokens) for _ in range(concurrency)))
        wall = time.perf_counter() - start
        return BatchRun([run.tokens for run in runs], wall, [run.ttft_s for run in runs])


# -- recovery of the isolated server -------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """One kill -9 of the worker, timed from the kill."""

    killed_pid: int
    new_pid: int | None
    worker_ready_s: float  # the killed worker's spawn-to-ready, from /health before the kill
    respawn_ready_s: float | None  # the new worker's, from /health after the 200
    recovery_s: float  # kill to the first 200
    warm_request_s: float  # the same request on the worker before the kill, for comparison
    attempts: dict[str, int]  # outcome ("200", "503", "ConnectError", ...) to count
    retry_after: list[str]  # the Retry-After values the refusals carried
    # Seconds from the kill, as the parent's log lines arrived: it saw the exit, spawned the new
    # worker, found it ready.
    exit_seen_at_s: float | None
    respawned_at_s: float | None
    ready_at_s: float | None

    @property
    def meets_target(self) -> bool:
        return self.recovery_s <= self.worker_ready_s + RECOVERY_SLACK_S


async def isolated_worker(client: httpx.AsyncClient) -> dict[str, Any]:
    """The isolated server's (only) worker, as its parent's /health shows it."""
    health = (await client.get("/health", timeout=RECOVERY_ATTEMPT_TIMEOUT_S)).json()
    workers = health.get("workers") or []
    if len(workers) != 1:
        raise RuntimeError(f"expected one worker in /health, got: {health}")
    return dict(workers[0])


async def recover_once(
    server: Server,
    client: httpx.AsyncClient,
    prompt: str,
    kills: list[tuple[int, float]] | None = None,
) -> Recovery:
    before = await isolated_worker(client)
    if before.get("state") != "ready" or not before.get("pid") or before.get("ready_s") is None:
        raise RuntimeError(f"the worker is not ready before the kill: {before}")
    pid = int(before["pid"])
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": RECOVERY_MAX_TOKENS,
        "temperature": 0.0,
        "stream": False,
    }
    # What the request costs on a warm worker: the part of recovery_s that is not recovery.
    began = time.perf_counter()
    response = await client.post("/v1/chat/completions", json=body)
    warm_request_s = time.perf_counter() - began
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code} before the kill: {response.text}")

    # Short, so that a request lost in the kill is retried soon; but one that a big model
    # answers slowly is not cut.
    attempt_timeout = max(RECOVERY_ATTEMPT_TIMEOUT_S, 3 * warm_request_s)
    attempts: collections.Counter[str] = collections.Counter()
    retry_after: set[str] = set()
    killed = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    if kills is not None:
        kills.append((pid, killed))  # for the worker.exited event's latency
    while True:
        if time.perf_counter() - killed > RECOVERY_DEADLINE_S:
            raise RuntimeError(
                f"no 200 within {RECOVERY_DEADLINE_S:g}s of killing worker {pid} "
                f"(attempts: {dict(attempts)}):\n{server.log_tail()}"
            )
        try:
            response = await client.post(
                "/v1/chat/completions", json=body, timeout=attempt_timeout
            )
        except httpx.TimeoutException:
            attempts["timeout"] += 1
        except httpx.TransportError as exc:
            attempts[type(exc).__name__] += 1
        else:
            attempts[str(response.status_code)] += 1
            if response.status_code == 200:
                answered = time.perf_counter()
                if not response.json().get("choices"):
                    raise RuntimeError(f"a 200 without choices: {response.text}")
                break
            if response.status_code not in (502, 503):
                raise RuntimeError(f"HTTP {response.status_code} while recovering: {response.text}")
            if value := response.headers.get("retry-after"):
                retry_after.add(value)
        await asyncio.sleep(RECOVERY_POLL_S)

    after = await isolated_worker(client)
    new_pid = after.get("pid")
    if new_pid == pid:
        raise RuntimeError(f"a 200 came, but /health still shows the killed worker: {after}")

    def when(pattern: str) -> float | None:
        for arrived, line in server.log_since(killed):
            if re.search(pattern, line):
                return arrived - killed
        return None

    return Recovery(
        killed_pid=pid,
        new_pid=new_pid,
        worker_ready_s=float(before["ready_s"]),
        respawn_ready_s=after.get("ready_s"),
        recovery_s=answered - killed,
        warm_request_s=warm_request_s,
        attempts=dict(attempts),
        retry_after=sorted(retry_after),
        exit_seen_at_s=when(rf"pid {pid} exited"),
        respawned_at_s=when(rf"spawned pid {new_pid}\b") if new_pid else None,
        ready_at_s=when(rf"ready \(pid {new_pid}\)") if new_pid else None,
    )


def describe_recovery(run: Recovery) -> str:
    def at(value: float | None) -> str:
        return "?" if value is None else f"{value:.3f}s"

    return (
        f"recovery {run.recovery_s:.3f}s (worker ready_s {run.worker_ready_s:.3f}s); "
        f"exit seen {at(run.exit_seen_at_s)}, respawned {at(run.respawned_at_s)}, "
        f"ready {at(run.ready_at_s)}, 200 {at(run.recovery_s)} (the request on a warm worker: "
        f"{at(run.warm_request_s)}); attempts {run.attempts}"
    )


def worker_import_s(runs: int = 3) -> float:
    """A fresh interpreter importing what a worker imports before it loads a model: wall seconds,
    the median of `runs`."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    code = (
        "import mlxhost.worker.__main__, mlxhost.worker.engine, mlxhost.worker.serve, "
        "mlxhost.worker.app"
    )
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
        times.append(time.perf_counter() - start)
    return median(times)


async def engine_statistics(url: str | None = None, uds: str | None = None) -> Any:
    """`engine` from a serving core's /health: the in-process server, or a worker's socket."""
    transport = httpx.AsyncHTTPTransport(uds=uds) if uds else None
    try:
        async with httpx.AsyncClient(
            base_url=url or "http://worker", transport=transport, timeout=10.0
        ) as client:
            return (await client.get("/health")).json().get("engine")
    except (httpx.HTTPError, ValueError) as exc:
        progress(f"warning: no engine statistics from {url or uds}: {exc}")
        return None


# -- cancellation and overload (isolated server) ---------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks; nan when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def chat_body(prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": stream,
    }
    return body


@dataclass(frozen=True)
class CancelRun:
    """One streaming request closed mid-stream, timed from the close."""

    session: str | None  # the x-mlxhost-session header
    frames: int  # content frames read before the close
    cancel_ms: float  # close to the first worker /health showing the engine cancelled and idle
    polls: int  # worker /health reads in cancel_ms
    lag_steps: int | None  # the engine's last_cancel_lag_steps: cancel reaching it to removal
    steps_after_close: int | None  # engine steps from just before the close to that reading
    generated_tokens: int  # by the engine for this request, to the removal
    outcome: dict[str, Any] | None  # the parent's record of the session


async def cancel_once(
    client: httpx.AsyncClient, worker_socket: str, prompt: str, max_tokens: int
) -> CancelRun:
    """Read a long greedy stream until CANCEL_AFTER_FRAMES content frames came, close the
    connection (t0), and poll the worker's /health until the engine counted the cancel and holds
    no sequence (t1)."""
    transport = httpx.AsyncHTTPTransport(uds=worker_socket)
    async with httpx.AsyncClient(
        base_url="http://worker", transport=transport, timeout=5.0
    ) as worker:

        async def engine() -> dict[str, Any]:
            return dict((await worker.get("/health")).json()["engine"])

        before = await engine()
        if before["active"] or before["waiting"]:
            raise RuntimeError(f"the worker is not idle before the cancel run: {before}")
        body = chat_body(prompt, max_tokens, stream=True)
        frames = 0
        # A client of its own: leaving the response unread closes its connection, not a pooled
        # one that another request would reuse.
        async with (
            httpx.AsyncClient(base_url=client.base_url, timeout=30.0) as own,
            own.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
            session = response.headers.get(SESSION_HEADER)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise RuntimeError(f"the stream failed: {chunk['error']}")
                if any(c["delta"].get("content") for c in chunk.get("choices", [])):
                    frames += 1
                    if frames >= CANCEL_AFTER_FRAMES:
                        break
            if frames < CANCEL_AFTER_FRAMES:
                raise RuntimeError(
                    f"the stream ended after {frames} content frames, before the close"
                )
            steps_before = (await engine())["steps"]
            closed = time.perf_counter()
        # Leaving the block closed the response, and with it the connection, mid-stream.
        polls = 0
        while True:
            stats = await engine()
            polls += 1
            now = time.perf_counter()
            if stats["cancelled"] > before["cancelled"] and stats["active"] == 0:
                break
            if stats["completed"] > before["completed"]:
                raise RuntimeError(f"the request completed instead of being cancelled: {stats}")
            if now - closed > CANCEL_DEADLINE_S:
                raise RuntimeError(f"no cancel within {CANCEL_DEADLINE_S:g}s of the close: {stats}")
            await asyncio.sleep(CANCEL_POLL_S)

    # The parent's record: the session closes once the relay has unwound.
    outcome = None
    deadline = time.perf_counter() + 2.0
    while session is not None and outcome is None and time.perf_counter() < deadline:
        answer = await client.get("/admin/sessions", headers=ADMIN_HEADERS)
        if answer.status_code != 200:
            progress(f"warning: GET /admin/sessions answered {answer.status_code}: {answer.text}")
            break
        recent = answer.json()["recent"]
        outcome = next((s["outcome"] for s in recent if s["id"] == session), None)
        if outcome is None:
            await asyncio.sleep(0.02)
    return CancelRun(
        session=session,
        frames=frames,
        cancel_ms=(now - closed) * 1e3,
        polls=polls,
        lag_steps=stats.get("last_cancel_lag_steps"),
        steps_after_close=stats["steps"] - steps_before,
        generated_tokens=stats["generated_tokens"] - before["generated_tokens"],
        outcome=outcome,
    )


def describe_cancel(run: CancelRun) -> str:
    outcome = run.outcome or {}
    return (
        f"cancel {run.cancel_ms:.1f} ms ({run.polls} polls), engine lag {run.lag_steps} step(s), "
        f"{run.steps_after_close} engine steps after the close, {run.generated_tokens} tokens "
        f"generated; parent outcome {outcome.get('kind')} ({outcome.get('reason')})"
    )


@dataclass(frozen=True)
class OverloadRun:
    """OVERLOAD_MAX_ACTIVE admitted streams, with or without extra requests alongside."""

    overloaded: bool
    admitted: BatchRun
    reject_ms: list[float]  # each 429: request sent to the whole response read
    extra: dict[str, int]  # the extra requests by how they ended
    extra_s: float  # how long extra requests were fired
    rejected_by_parent: int  # the parent's admission.rejected, the change over the run
    cpu_s: dict[str, float]  # CPU seconds over the run: parent, worker, client (this process)
    problems: dict[str, int]  # what 429s lacked of what the server promises, and how many

    @property
    def rejects_per_s(self) -> float:
        return len(self.reject_ms) / self.extra_s if self.extra_s > 0 else float("nan")


class RawHTTP:
    """One keep-alive HTTP/1.1 connection that sends a prepared request and reads the answer.

    The extra requests go through this rather than httpx: on two cores an httpx request costs
    the client about a millisecond of CPU, as much as the server's answer, and that would be
    measured as the server's latency."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def request(self, payload: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send `payload`; the status, the headers (lower-case names) and the body."""
        await self.connect()
        assert self._reader is not None and self._writer is not None
        try:
            self._writer.write(payload)
            head = await self._reader.readuntil(b"\r\n\r\n")
            status_line, *lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split()[1])
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                if name:
                    headers[name.strip().lower()] = value.strip()
            if "content-length" in headers:
                body = await self._reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding", "").lower() == "chunked":
                body = await self._chunked()
            else:
                body = await self._reader.read()  # to the end of the connection
            if headers.get("connection", "").lower() == "close" or self._reader.at_eof():
                self.close()
        except BaseException:
            self.close()  # also when cancelled: the server sees the client leave
            raise
        return status, headers, body


    async def _chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while await self._reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)


def raw_request(url: str, body: dict[str, Any]) -> tuple[str, int, bytes]:
    parsed = httpx.URL(url)
    content = json.dumps(body).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(content)}\r\n\r\n"
    )
    return parsed.host, parsed.port or 80, head.encode() + content


def check_refusal(headers: dict[str, str], content: bytes) -> list[str]:
    """What a 429 lacks of what the server promises."""
    try:
        error = json.loads(content).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    return [
        what
        for what, ok in (
            ("Retry-After", "retry-after" in headers),
            (SESSION_HEADER, SESSION_HEADER in headers),
            ("type resource_admission", error.get("type") == "resource_admission"),
            ("code queue_full", error.get("code") == "queue_full"),
        )
        if not ok
    ]


async def admission_of(client: httpx.AsyncClient) -> dict[str, Any]:
    """The parent's admission statistics of its (only) model."""
    admission = (await client.get("/health")).json().get("admission") or {}
    if len(admission) > 1:
        raise RuntimeError(f"expected one model in /health admission, got: {admission}")
    return dict(next(iter(admission.values()), {"active": 0, "queued": 0, "rejected": 0}))


async def wait_admission(
    client: httpx.AsyncClient, done: Any, timeout: float = 30.0, poll_s: float = 0.005
) -> dict[str, Any]:
    deadline = time.perf_counter() + timeout
    while True:
        stats = await admission_of(client)
        if done(stats):
            return stats
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the admission statistics never got there: {stats}")
        await asyncio.sleep(poll_s)


class CPUClock:
    """CPU seconds (user + system) of some processes, from one reading to the next."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.start = self._read()

    def _read(self) -> dict[str, float]:
        readings = {}
        for name, process in self.processes.items():
            try:
                times = process.cpu_times()
                readings[name] = times.user + times.system
            except psutil.Error:
                readings[name] = float("nan")
        return readings

    def elapsed(self) -> dict[str, float]:
        now = self._read()
        return {name: now[name] - self.start[name] for name in now}


async def overload_once(
    client: httpx.AsyncClient,
    prompt: str,
    max_tokens: int,
    overloaded: bool,
    pids: dict[str, int],
    rng: random.Random,
) -> OverloadRun:
    """OVERLOAD_MAX_ACTIVE streams of `max_tokens`, all admitted at once; with `overloaded`, from
    the moment they all run until the first of them ends, OVERLOAD_EXTRA more clients, each
    sending a request (max_tokens 1) and, after a 429, sending the next one OVERLOAD_REFILL_S
    later (jittered +-50%): OVERLOAD_MAX_QUEUED of them wait in the queue, the others get 429 in
    turn. When the first admitted stream ends the clients still waiting for an answer (the
    queued ones) close their connections, which takes their sessions out of the queue; one
    admitted in between costs the remaining streams one short prefill."""
    idle = await wait_admission(client, lambda s: s["active"] == 0 and s["queued"] == 0)
    bench = HTTPBench(client, prompt, max_tokens)
    first_done = asyncio.Event()
    reject_ms: list[float] = []
    extra: collections.Counter[str] = collections.Counter()
    problems: collections.Counter[str] = collections.Counter()
    host, port, payload = raw_request(str(client.base_url), chat_body(prompt, 1, stream=False))
    connections = [RawHTTP(host, port) for _ in range(OVERLOAD_EXTRA)] if overloaded else []
    for connection in connections:
        await connection.connect()  # before the clock starts

    async def admitted() -> StreamRun:
        try:
            return await bench.stream()
        finally:
            first_done.set()

    async def extra_client(connection: RawHTTP) -> None:
        while not first_done.is_set():
            began = time.perf_counter()
            try:
                status, headers, content = await connection.request(payload)
            except asyncio.CancelledError:
                extra["closed unanswered (queued)"] += 1
                raise
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                extra[type(exc).__name__] += 1
            else:
                extra[str(status)] += 1
                if status == 429:
                    reject_ms.append((time.perf_counter() - began) * 1e3)
                    missing = check_refusal(headers, content)
                    if missing:
                        problems[f"429s without {', '.join(missing)}"] += 1
            pause = OVERLOAD_REFILL_S * rng.uniform(0.5, 1.5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(first_done.wait(), pause)

    clock = CPUClock(pids)
    start = time.perf_counter()
    streams = [asyncio.create_task(admitted()) for _ in range(OVERLOAD_MAX_ACTIVE)]
    extra_s = 0.0
    try:
        # Both kinds of run poll the parent alike, until all the streams are running.
        await wait_admission(
            client, lambda s: s["active"] >= OVERLOAD_MAX_ACTIVE or first_done.is_set()
        )
        if overloaded:
            fired = time.perf_counter()
            clients = [asyncio.create_task(extra_client(c)) for c in connections]
            await first_done.wait()
            extra_s = time.perf_counter() - fired
            for client_task in clients:
                client_task.cancel()  # those waiting for an answer close their connections
            await asyncio.gather(*clients, return_exceptions=True)
        runs = await asyncio.gather(*streams)
    finally:
        for task in streams:
            task.cancel()
        for connection in connections:
            connection.close()
    wall = time.perf_counter() - start
    cpu_s = clock.elapsed()
    after = await wait_admission(client, lambda s: s["active"] == 0 and s["queued"] == 0)
    return OverloadRun(
        overloaded=overloaded,
        admitted=BatchRun([run.tokens for run in runs], wall),
        reject_ms=reject_ms,
        extra=dict(extra),
        extra_s=extra_s,
        rejected_by_parent=after["rejected"] - idle["rejected"],
        cpu_s=cpu_s,
        problems=dict(problems),
    )


def describe_overload(run: OverloadRun) -> str:
    wall = run.admitted.wall_s
    cores = ", ".join(f"{name} {seconds / wall:.2f}" for name, seconds in run.cpu_s.items())
    text = f"admitted {describe_batch(run.admitted)}; CPU cores used: {cores}"
    if run.overloaded:
        text += (
            f"; {len(run.reject_ms)} 429s in {run.extra_s:.2f} s "
            f"(p50 {percentile(run.reject_ms, 50):.2f} ms, p99 {percentile(run.reject_ms, 99):.2f} "
            f"ms), extra requests {run.extra}, parent counted {run.rejected_by_parent} rejected"
        )
    return text


async def measure_overload(plan: Plan, prompt: str) -> list[OverloadRun]:
    """A separate isolated server with --max-active 4 --max-queued 4 (see OVERLOAD_*)."""
    max_tokens = plan.max_tokens * OVERLOAD_TOKENS_FACTOR
    rounds = max(plan.repeats, OVERLOAD_MIN_ROUNDS)
    options = overload_options()
    progress("overload: starting an isolated server with " + " ".join(options))
    with running_server("overload", plan.model_path, plan.max_batch, options) as server:
        url = await asyncio.to_thread(server.wait_ready)
        connections = OVERLOAD_MAX_ACTIVE + 4
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx.AsyncClient(
            base_url=url, timeout=httpx.Timeout(REQUEST_TIMEOUT_S), limits=limits
        ) as client:
            worker = await isolated_worker(client)
            pids = {"parent": server.pid, "worker": int(worker["pid"]), "client": os.getpid()}
            # Warm-up: a stream, then one burst past capacity (4 run, 4 wait, the rest get 429),
            # which also opens the pooled connections.
            bench = HTTPBench(client, prompt, plan.max_tokens)
            await bench.stream()
            burst = chat_body(prompt, 1, stream=False)
            await asyncio.gather(
                *(
                    client.post("/v1/chat/completions", json=burst)
                    for _ in range(OVERLOAD_MAX_ACTIVE + OVERLOAD_EXTRA)
                )
            )
            rng = random.Random(0)
            runs: list[OverloadRun] = []
            for number in range(rounds):
                # Alternate which kind goes first, so a drifting machine favours neither.
                kinds = (False, True) if number % 2 == 0 else (True, False)
                for overloaded in kinds:
                    run = await overload_once(client, prompt, max_tokens, overloaded, pids, rng)
                    runs.append(run)
                    kind = "overloaded" if overloaded else "unloaded"
                    progress(f"  overload {number + 1}/{rounds} {kind}: {describe_overload(run)}")
    return runs


def overload_options() -> list[str]:
    return [f"--max-active={OVERLOAD_MAX_ACTIVE}", f"--max-queued={OVERLOAD_MAX_QUEUED}"]


# -- the admin event stream (isolated server) ------------------------------------------------------


class EventWatcher:
    """A subscriber of the parent's /admin/events through `AdminClient`, what `mlxhost tui` reads:
    each event with when it arrived here (perf_counter, and wall time for the event's `at`)."""

    def __init__(self, url: str) -> None:
        self.client = AdminClient(Target(url=url, token=ADMIN_TOKEN))
        self.arrivals: list[tuple[float, float, dict[str, Any]]] = []  # (perf, unix s, event)
        self.live_from = 0  # arrivals from this index on came live, not from the ring
        self.seq_at_start = 0  # the host's last seq when the subscription began
        self.error: BaseException | None = None
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> EventWatcher:
        """Subscribe and return once the subscription is live: it resumes just before the last
        published event (Last-Event-ID), which the ring sends back at once."""
        seq = int((await self.client.state())["seq"])
        self.seq_at_start = seq
        self._task = asyncio.create_task(self._read(seq - 1 if seq > 0 else None))
        if seq > 0:
            await self.wait_for(lambda e: e["seq"] >= seq, EVENT_WAIT_S)
        else:
            await asyncio.sleep(0.2)  # nothing to resume from (a host publishes host.started)
        self.live_from = len(self.arrivals)
        return self

    async def _read(self, after: int | None) -> None:
        try:
            async for event in self.client.events(after):
                self.arrivals.append((time.perf_counter(), time.time(), event))
                self._arrived.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported by wait_for and the summary
            self.error = exc
            self._arrived.set()

    async def wait_for(
        self, match: Any, timeout: float, since: int = 0
    ) -> tuple[float, float, dict[str, Any]] | None:
        """The first arrival from index `since` whose event `match`es; None after `timeout`."""
        deadline = time.perf_counter() + timeout
        checked = since
        while True:
            for index in range(checked, len(self.arrivals)):
                if match(self.arrivals[index][2]):
                    return self.arrivals[index]
            checked = len(self.arrivals)
            left = deadline - time.perf_counter()
            if left <= 0 or self.error is not None or (self._task and self._task.done()):
                return None
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    def live(self) -> list[tuple[float, float, dict[str, Any]]]:
        return self.arrivals[self.live_from :]

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.client.__aexit__(None, None, None)


@dataclass(frozen=True)
class EventSample:
    """One event's latency: from what caused it, seen by this process, to its arrival here."""

    type: str
    # From the request's start (session.opened), the response read (session.closed) or the
    # kill -9 (worker.exited):
    latency_ms: float
    publish_to_arrival_ms: float  # the event's `at` (the parent's wall clock, ms) to its arrival


def event_sample(
    event: dict[str, Any], arrival: tuple[float, float, Any], cause: float
) -> EventSample:
    at_perf, at_wall, _ = arrival
    return EventSample(event["type"], (at_perf - cause) * 1e3, at_wall * 1e3 - event["at"])


async def measure_event_latency(
    client: httpx.AsyncClient, url: str, prompt: str
) -> tuple[list[EventSample], dict[str, int], str | None]:
    """EVENT_REQUESTS short chat requests one after the other, with an AdminClient subscribed:
    each session's session.opened, from the request's start, and session.closed, from the
    response's arrival, to the event's arrival at the subscriber. One request first, unmeasured."""
    watcher = await EventWatcher(url).start()
    samples: list[EventSample] = []
    missing: collections.Counter[str] = collections.Counter()
    body = chat_body(prompt, EVENT_MAX_TOKENS, stream=False)
    try:
        for number in range(EVENT_REQUESTS + 1):
            since = len(watcher.arrivals)
            began = time.perf_counter()
            response = await client.post("/v1/chat/completions", json=body)
            answered = time.perf_counter()
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text}")
            session = response.headers.get(SESSION_HEADER)
            if session is None:
                raise RuntimeError(f"no {SESSION_HEADER} header on a chat completion")
            found = {}
            for kind in ("session.opened", "session.closed"):
                arrival = await watcher.wait_for(
                    lambda e, kind=kind, session=session: (
                        e["type"] == kind and e.get("session") == session
                    ),
                    EVENT_WAIT_S,
                    since,
                )
                if arrival is None:
                    missing[kind] += 1
                else:
                    found[kind] = arrival
            if number == 0:
                continue  # the warm-up
            for kind, arrival in found.items():
                cause = began if kind == "session.opened" else answered
                samples.append(event_sample(arrival[2], arrival, cause))
        types = collections.Counter(e["type"] for _, _, e in watcher.live())
    finally:
        await watcher.stop()
    error = None if watcher.error is None else f"{type(watcher.error).__name__}: {watcher.error}"
    if missing:
        progress(f"warning: events that never arrived: {dict(missing)}")
    return samples, dict(types), error


class LaggingSubscriber:
    """A raw TCP client of /admin/events with a small receive buffer that reads the response's
    head (so the subscription exists) and then nothing, until `finish` reads what came."""

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

    def finish(self) -> dict[str, Any]:
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
        return {
            "bytes": len(data),
            "events": len(types),
            "last_type": types[-1] if types else None,
            "dropped": bool(types) and types[-1] == "stream.lagged",
            "stream_ended": ended,
        }


@dataclass(frozen=True)
class HubRun:
    """LAGGING_STREAMS greedy streams, with or without the two admin subscribers."""

    subscribers: bool
    batch: BatchRun
    cpu_s: dict[str, float]  # parent, worker, client (this process, the reading subscriber too)
    events_published: int | None  # seq after the run minus seq before (with subscribers)
    events_seen: int | None  # by the reading subscriber, during the run
    lagging: dict[str, Any] | None  # LaggingSubscriber.finish()


async def hub_once(
    bench: HTTPBench, url: str, subscribers: bool, max_tokens: int, pids: dict[str, int]
) -> HubRun:
    lagging: LaggingSubscriber | None = None
    watcher: EventWatcher | None = None
    try:
        if subscribers:
            lagging = await asyncio.to_thread(LaggingSubscriber, url)
            watcher = await EventWatcher(url).start()
        # Both kinds start alike, after a pause: the host's and the worker's work after the last
        # run (memory readings, session bookkeeping) done, and the subscribers' setup too.
        await asyncio.sleep(LAGGING_SETTLE_S)
        clock = CPUClock(pids)
        batch = await bench.batch(LAGGING_STREAMS, max_tokens)
        cpu_s = clock.elapsed()
        published = seen = None
        finished = None
        if watcher is not None and lagging is not None:
            # Everything published up to the run's end, and what of it the reader got.
            start, end = watcher.seq_at_start, int((await watcher.client.state())["seq"])
            await watcher.wait_for(lambda e: e["seq"] >= end, EVENT_WAIT_S, watcher.live_from)
            published = end - start
            seen = len({e["seq"] for _, _, e in watcher.arrivals if start < e["seq"] <= end})
            finished = await asyncio.to_thread(lagging.finish)
            lagging = None
    finally:
        if watcher is not None:
            await watcher.stop()
        if lagging is not None:
            lagging.sock.close()
    return HubRun(subscribers, batch, cpu_s, published, seen, finished)


def describe_hub(run: HubRun) -> str:
    cores = ", ".join(f"{n} {s / run.batch.wall_s:.2f}" for n, s in run.cpu_s.items())
    text = f"{describe_batch(run.batch)}; CPU cores used: {cores}"
    if run.subscribers and run.lagging is not None:
        text += (
            f"; {run.events_published} events published, {run.events_seen} seen by the reading "
            f"subscriber; the lagging one got {run.lagging['events']} "
            f"({run.lagging['bytes']} bytes) when read afterwards, last "
            f"{run.lagging['last_type']}"
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
    for number in range(rounds):
        kinds = (False, True) if number % 2 == 0 else (True, False)
        for subscribers in kinds:
            run = await hub_once(bench, url, subscribers, max_tokens, pids)
            runs.append(run)
            kind = "with subscribers" if subscribers else "no subscriber"
            progress(f"  event hub {number + 1}/{rounds} {kind}: {describe_hub(run)}")
    return runs


async def hub_throughput(events: int = HUB_EVENTS) -> dict[str, Any]:
    """The EventHub alone, in this process: publish `events` events, yielding to the scheduler
    after each (as the host's publishers, each in its own task step, do), with one subscriber
    that never reads and one that reads everything in a task."""
    hub = EventHub()
    lagging = hub.subscribe()
    draining = hub.subscribe()
    received = 0
    done = anyio.Event()

    async def drain() -> None:
        nonlocal received
        async for _ in draining:
            received += 1
            if received >= events:
                break
        done.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(drain)
        await anyio.lowlevel.checkpoint()
        began = time.perf_counter()
        for number in range(events):
            hub.publish(
                "session.progress", session="s-bench", model="bench", tokens=number,
                tokens_per_s=123.4,
            )  # fmt: skip
            await anyio.lowlevel.checkpoint()
        published = time.perf_counter()
        with anyio.move_on_after(10):
            await done.wait()
        drained = time.perf_counter()
        tasks.cancel_scope.cancel()
    queued = []
    with anyio.move_on_after(1):  # its sender is closed once it was dropped
        queued = [event async for event in lagging]
    await lagging.aclose()  # type: ignore[attr-defined]  # a _Subscription
    await draining.aclose()  # type: ignore[attr-defined]
    wall = drained - began
    return {
        "events": events,
        "events_per_s": events / wall,
        "wall_s": wall,
        "publish_s": published - began,
        "received_by_reader": received,
        "reader_kept": received == events,
        "dropped_subscribers": hub.dropped_subscribers,
        "lagging_got": len(queued),
        "lagging_last_type": queued[-1]["type"] if queued else None,
        "lagging_dropped": bool(queued) and queued[-1]["type"] == "stream.lagged",
    }


def event_latency_summary(
    samples: list[EventSample],
    exits: list[EventSample],
    types: dict[str, int],
    error: str | None,
    exits_missing: int,
) -> dict[str, Any]:
    def stats(values: list[float]) -> dict[str, Any]:
        return {
            "p50": percentile(values, 50),
            "p95": percentile(values, 95),
            "max": max(values, default=float("nan")),
            "count": len(values),
        }

    latency = [s.latency_ms for s in samples]
    p95 = percentile(latency, 95)
    exit_ms = [s.latency_ms for s in exits]
    return {
        **stats(latency),
        "by_type": {
            kind: stats([s.latency_ms for s in samples if s.type == kind])
            for kind in ("session.opened", "session.closed")
        },
        "publish_to_arrival_ms": stats([s.publish_to_arrival_ms for s in samples]),
        "worker_exited": {
            **stats(exit_ms),
            "missing": exits_missing,
            "publish_to_arrival_ms": stats([s.publish_to_arrival_ms for s in exits]),
            "ok": None if not exit_ms else max(exit_ms) <= EVENT_LATENCY_P95_TARGET_MS,
        },
        "meets_target": bool(latency) and p95 <= EVENT_LATENCY_P95_TARGET_MS,
        "types_seen": types,
        "subscriber_error": error,
        "settings": {"requests": EVENT_REQUESTS, "max_tokens": EVENT_MAX_TOKENS},
        "samples": [asdict(s) for s in samples],
        "worker_exited_samples": [asdict(s) for s in exits],
    }


def events_summary(runs: list[HubRun], hub: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    plain = [r for r in runs if not r.subscribers]
    subscribed = [r for r in runs if r.subscribers]
    plain_tok_s = [r.batch.total_tok_s for r in plain]
    subscribed_tok_s = [r.batch.total_tok_s for r in subscribed]
    lagging_ratio = ratio(median(subscribed_tok_s), median(plain_tok_s))

    def cores(kind: list[HubRun]) -> dict[str, float]:
        names = kind[0].cpu_s if kind else {}
        return {n: median([r.cpu_s[n] / r.batch.wall_s for r in kind]) for n in names}

    lagging = [r.lagging for r in subscribed if r.lagging is not None]
    return {
        "hub_events_per_s": hub["events_per_s"],
        "lagging_subscriber_ratio": lagging_ratio,
        "lagging_subscriber_ratio_by_round": [
            ratio(s, p) for p, s in zip(plain_tok_s, subscribed_tok_s, strict=False)
        ],
        "tok_s": {
            "no_subscriber": median(plain_tok_s),
            "with_subscribers": median(subscribed_tok_s),
        },
        "cpu_cores": {"no_subscriber": cores(plain), "with_subscribers": cores(subscribed)},
        "events_published_per_run": [r.events_published for r in subscribed],
        "events_seen_by_reader_per_run": [r.events_seen for r in subscribed],
        "lagging_dropped": [entry["dropped"] for entry in lagging],
        "lagging_received": lagging,
        "hub_micro": hub,
        "hub_ok": hub["events_per_s"] >= HUB_EVENTS_PER_S_TARGET
        and hub["reader_kept"]
        and hub["lagging_dropped"],
        "lagging_ok": lagging_ratio >= LAGGING_RATIO_TARGET,
        "settings": {
            "streams": LAGGING_STREAMS,
            "max_tokens": max_tokens,
            "rounds": min(len(plain), len(subscribed)),
            "lagging_rcvbuf": LAGGING_RCVBUF,
            "hub_events": hub["events"],
            "subscriber_buffer": SUBSCRIBER_BUFFER,
        },
        "runs": [{**asdict(r), "total_tok_s": r.batch.total_tok_s} for r in runs],
    }


# -- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    model_path: Path
    size: str  # "tiny", "bench", or "custom" for --model
    max_tokens: int
    repeats: int
    concurrency: list[int]
    json_path: Path | None
    chart_path: Path
    ttft_requests: int
    mlx_lm_server_backlog: int

    @property
    def max_batch(self) -> int:
        """Both paths decode at most this many rows per step: the server's default, or more."""
        return max(MAX_BATCH, *self.concurrency)


def parse_concurrency(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        message = f"not a comma-separated list of integers: {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be integers >= 1")
    return values


def parse_args(argv: Sequence[str] | None) -> Plan:
    parser = argparse.ArgumentParser(
        description="Benchmark mlxhost over HTTP against raw mlx-lm and mlx_lm.server, one model.",
    )
    parser.add_argument("--model", type=Path, help="mlx-lm model directory (default: a demo model)")
    parser.add_argument(
        "--size",
        choices=sorted(DEFAULT_MAX_TOKENS),
        default="tiny",
        help="demo model to build in the cache when --model is not given (default: tiny)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="tokens per generation (default: 256 for tiny, 64 for bench; halved by --quick)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help="runs of each measurement; medians are reported (default: 3, 1 with --quick)",
    )
    parser.add_argument(
        "--concurrency",
        type=parse_concurrency,
        default=list(DEFAULT_CONCURRENCY),
        help="comma-separated stream counts; 1 is the single-stream test "
        f"(default: {','.join(map(str, DEFAULT_CONCURRENCY))})",
    )
    parser.add_argument(
        "--ttft-requests",
        type=int,
        help="single-stream TTFT requests per path after the throughput runs "
        f"(default: {TTFT_REQUESTS['full']}, {TTFT_REQUESTS['quick']} with --quick)",
    )
    parser.add_argument(
        "--mlx-lm-server-backlog",
        type=int,
        default=MLX_LM_SERVER_BACKLOG,
        help="listen backlog for mlx_lm.server, set before its main() runs; 0: as shipped "
        f"(socketserver's 5, which drops connections past it) (default: {MLX_LM_SERVER_BACKLOG}, "
        "mlxhost's)",
    )
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer tokens")
    parser.add_argument("--json", type=Path, help="also write every figure and ratio to this file")
    parser.add_argument(
        "--chart",
        type=Path,
        help="PNG of total tok/s against concurrency (default: beside --json with .png, else "
        "bench.png; needs matplotlib: pip install -e '.[bench]')",
    )
    args = parser.parse_args(argv)

    defaults = QUICK_MAX_TOKENS if args.quick else DEFAULT_MAX_TOKENS
    max_tokens = args.max_tokens if args.max_tokens is not None else defaults[args.size]
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if max_tokens < 2:
        parser.error("--max-tokens must be at least 2 (a decode rate needs two tokens)")
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    ttft_requests = args.ttft_requests
    if ttft_requests is None:
        ttft_requests = TTFT_REQUESTS["quick" if args.quick else "full"]
    if ttft_requests < 0:
        parser.error("--ttft-requests must be at least 0")
    if args.mlx_lm_server_backlog < 0:
        parser.error("--mlx-lm-server-backlog must be at least 0")
    if args.chart is not None:
        chart_path = args.chart
    elif args.json is not None:
        chart_path = args.json.with_suffix(".png")
    else:
        chart_path = Path("bench.png")
    if args.model is not None:
        if not args.model.is_dir():
            parser.error(f"--model: {args.model} is not a directory")
        model_path, size = args.model.resolve(), "custom"
    else:
        progress(f"building the {args.size} demo model (once; it is cached)")
        cache = demo.default_cache_dir() / f"bench-{args.size}"
        model_path, size = demo.make_model(cache, args.size), args.size
    return Plan(
        model_path, size, max_tokens, repeats, args.concurrency, args.json, chart_path,
        ttft_requests, args.mlx_lm_server_backlog,
    )  # fmt: skip


def machine_info() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "mlx_device": str(mx.default_device()),
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
    }


def versions() -> dict[str, str | None]:
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "mlxhost_commit": commit}


def choose_prompt(raw: RawMLX, max_tokens: int) -> tuple[str, list[int], PromptProbe]:
    """The first suitable prompt (see PROMPTS). Doubles as the raw warm-up."""
    probes: list[tuple[str, PromptProbe]] = []
    for text in PROMPTS:
        probe = raw.probe(raw.encode(text), max_tokens)
        if probe.suitable:
            return text, raw.encode(text), probe
        probes.append((text, probe))
    text, probe = max(probes, key=lambda p: (p[1].reaches_max_tokens, p[1].visible_fraction))
    progress(
        f"warning: no prompt suits this model at max_tokens {max_tokens}; "
        f"using {text!r} ({probe}). Rates use the actual token counts, but TTFT and decode "
        "over HTTP may be off."
    )
    return text, raw.encode(text), probe


def server_options(name: str, plan: Plan) -> list[str]:
    # Every stream of the highest concurrency admitted at once (the parent's default is 8).
    admit = [f"--max-active={max(MIN_MAX_ACTIVE, *plan.concurrency)}"]
    if name == "in_process":
        return ["--in-process", *admit]
    # No crash-loop backoff and enough respawns for back-to-back kills (see the docstring).
    return [*admit, "--early-exit=0", f"--restart-limit={plan.repeats + 3}"]


def admin_token_option(token: str = ADMIN_TOKEN) -> str:
    """The admin token as one argv word (kept out of `server_options`, which the report shows)."""
    return f"--admin-token={token}"


async def measure(
    plan: Plan, raw: RawMLX, prompt: str, ids: list[int], servers_stack: contextlib.ExitStack
) -> dict[str, Any]:
    """Everything but the report. The servers go on `servers_stack`, which the caller closes."""
    results = {name: Measurements() for name in PATHS}
    top = max(plan.concurrency)
    warm_tokens = min(plan.max_tokens, 16)

    progress("raw: warming up")
    raw.stream(ids, plan.max_tokens)
    if top > 1:
        raw.batch(ids, top, warm_tokens, plan.max_batch)

    servers: dict[str, Server] = {}
    for name in SERVED:  # one after the other, so that each loads on a quiet machine
        progress(f"{LABELS[name]}: starting the server")
        options = server_options(name, plan)
        if name == "isolated":
            options = [*options, admin_token_option()]
        server = servers_stack.enter_context(
            running_server(name, plan.model_path, plan.max_batch, options)
        )
        server.wait_ready()
        servers[name] = server
    progress(f"{LABELS['mlx_lm_server']}: starting the server")
    peer = await asyncio.to_thread(
        start_mlx_lm_server, plan.model_path, plan.max_batch, plan.max_tokens,
        plan.mlx_lm_server_backlog, prompt,
    )  # fmt: skip
    # Stopped after the memory readings (below), or by the caller's stack on an error.
    servers_stack.callback(peer.stop)
    urls = {"mlx_lm_server": peer.url, **{name: server.url for name, server in servers.items()}}

    limits = httpx.Limits(max_connections=top + 4, max_keepalive_connections=top + 4)
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
    async with contextlib.AsyncExitStack() as clients:
        http: dict[str, HTTPBench] = {}
        for name in HTTP_PATHS:
            client = httpx.AsyncClient(base_url=urls[name], timeout=timeout, limits=limits)
            client = await clients.enter_async_context(client)
            http[name] = HTTPBench(client, prompt, plan.max_tokens)
            progress(f"{LABELS[name]}: ready on {urls[name]}; warming up")
            await http[name].stream()
            if top > 1:
                await http[name].batch(top, warm_tokens)  # also opens the pooled connections

        for repeat in range(plan.repeats):
            for concurrency in plan.concurrency:
                # Rotate which path goes first, so a drifting machine favours none.
                shift = repeat % len(PATHS)
                for name in PATHS[shift:] + PATHS[:shift]:
                    if name == "raw":
                        result = run_raw(raw, results[name], ids, concurrency, plan)
                    else:
                        result = await run_http(http[name], results[name], concurrency)
                    where = f"repeat {repeat + 1}/{plan.repeats} c{concurrency} {LABELS[name]}"
                    progress(f"  {where}: {result}")

        # TTFT: more single-stream requests, short ones, the paths taking turns.
        ttft_tokens = min(plan.max_tokens, TTFT_MAX_TOKENS)
        for number in range(plan.ttft_requests):
            shift = number % len(PATHS)
            for name in PATHS[shift:] + PATHS[:shift]:
                if name == "raw":
                    probe = raw.stream(ids, ttft_tokens)
                else:
                    probe = await http[name].stream(ttft_tokens)
                results[name].ttft_probes.append(probe)
        progress(
            f"  TTFT: {plan.ttft_requests} requests of max_tokens {ttft_tokens} per path; p50 "
            + ", ".join(
                f"{LABELS[name]} {median([r.ttft_s * 1e3 for r in results[name].ttft_probes]):.1f}"
                for name in PATHS
            )
            + " ms"
        )

        # Memory, after the throughput runs and before any kill.
        isolated = http["isolated"].client
        worker = await isolated_worker(isolated)
        in_process_health = (await http["in_process"].client.get("/health")).json()
        reported = worker.get("memory") or {}
        memory = {
            "parent": rss_mb(servers["isolated"].pid),
            "worker": rss_mb(worker.get("pid")),
            "in_process": rss_mb(servers["in_process"].pid),
            "mlx_lm_server": rss_mb(peer.pid),
            # The servers' own readings, for comparison:
            "worker_reported": reported.get("rss_bytes", 0) / MB or None,
            "in_process_reported": (in_process_health.get("memory") or {}).get("rss_bytes", 0) / MB
            or None,
        }
        engines = {
            "in_process": in_process_health.get("engine"),
            "isolated": await engine_statistics(uds=worker.get("socket")),
        }
        # The peer is done: it would only take memory (and its log thread CPU) from here on.
        await asyncio.to_thread(peer.stop)

        # Cancellation, on the isolated server's first worker (before any kill).
        cancel_tokens = CANCEL_MAX_TOKENS.get(plan.size, CANCEL_MAX_TOKENS["tiny"])
        cancels: list[CancelRun] = []
        for repeat in range(plan.repeats):
            cancel = await cancel_once(isolated, worker["socket"], prompt, cancel_tokens)
            cancels.append(cancel)
            progress(f"  cancel {repeat + 1}/{plan.repeats}: {describe_cancel(cancel)}")

        # The admin event stream, also before any kill: event latency, then generation with and
        # without a lagging subscriber.
        isolated_url = str(isolated.base_url)
        event_samples, event_types, event_error = await measure_event_latency(
            isolated, isolated_url, prompt
        )
        latencies = [s.latency_ms for s in event_samples]
        progress(
            f"  event latency: {len(latencies)} events, p50 {percentile(latencies, 50):.1f} ms, "
            f"p95 {percentile(latencies, 95):.1f} ms, max {max(latencies, default=math.nan):.1f} ms"
        )
        hub_tokens = plan.max_tokens * LAGGING_TOKENS_FACTOR
        hub_rounds = max(plan.repeats, LAGGING_MIN_ROUNDS)
        hub_runs = await measure_hub_ratio(isolated, isolated_url, prompt, hub_tokens, hub_rounds)

        # Recovery, with a subscriber that times each kill's worker.exited event.
        recoveries: list[Recovery] = []
        kills: list[tuple[int, float]] = []
        exit_samples: list[EventSample] = []
        exits_missing = 0
        exit_watcher = await EventWatcher(isolated_url).start()
        try:
            for repeat in range(plan.repeats):
                run = await recover_once(servers["isolated"], isolated, prompt, kills)
                recoveries.append(run)
                progress(f"  recovery {repeat + 1}/{plan.repeats}: {describe_recovery(run)}")
            for pid, killed in kills:
                arrival = await exit_watcher.wait_for(
                    lambda e, pid=pid: e["type"] == "worker.exited" and e.get("pid") == pid,
                    EVENT_WAIT_S,
                )
                if arrival is None:
                    exits_missing += 1
                else:
                    exit_samples.append(event_sample(arrival[2], arrival, killed))
        finally:
            await exit_watcher.stop()

    overloads = await measure_overload(plan, prompt)
    imports_s = worker_import_s()
    return {
        "results": results,
        "prompt_tokens": {name: http[name].prompt_tokens for name in HTTP_PATHS},
        "stream_retries": {name: dict(http[name].retries) for name in HTTP_PATHS},
        # Every server's usage.prompt_tokens_details.cached_tokens (its prompt cache) to how many
        # requests reported it; raw mlx-lm has no prompt cache and prefills every prompt.
        "cached_prompt_tokens": {
            name: {str(k): v for k, v in sorted(http[name].cached_tokens.items())}
            for name in HTTP_PATHS
        },
        "mlx_lm_server": {
            "command": peer.command,
            "options": peer.command[peer.command.index("--model") :],
            "listen_backlog": peer.backlog,
            "as_shipped": not plan.mlx_lm_server_backlog,
            "ready_s": peer.ready_s,
            # prompt_tokens_details.cached_tokens (its prompt cache) to the number of requests:
            "cached_prompt_tokens": {
                str(k): v for k, v in sorted(http["mlx_lm_server"].cached_tokens.items())
            },
        },
        "ttft_max_tokens": ttft_tokens,
        "server_engines": engines,
        "memory": memory,
        "recoveries": recoveries,
        "cancels": cancels,
        "cancel_max_tokens": cancel_tokens,
        "overloads": overloads,
        "worker_import_s": imports_s,
        "in_process_load_s": servers["in_process"].load_s,
        "event_samples": event_samples,
        "event_types": event_types,
        "event_error": event_error,
        "exit_samples": exit_samples,
        "exits_missing": exits_missing,
        "hub_runs": hub_runs,
        "hub_max_tokens": hub_tokens,
    }


def run_raw(
    raw: RawMLX, results: Measurements, ids: list[int], concurrency: int, plan: Plan
) -> str:
    if concurrency == 1:
        run = raw.stream(ids, plan.max_tokens)
        results.single.append(run)
        return describe_stream(run)
    batch = raw.batch(ids, concurrency, plan.max_tokens, plan.max_batch)
    results.batches.setdefault(concurrency, []).append(batch)
    bare = raw.batch(ids, concurrency, plan.max_tokens, plan.max_batch, detokenize=False)
    results.tokens_only.setdefault(concurrency, []).append(bare)
    return describe_batch(batch)


async def run_http(http: HTTPBench, results: Measurements, concurrency: int) -> str:
    if concurrency == 1:
        run = await http.stream()
        results.single.append(run)
        return describe_stream(run)
    batch = await http.batch(concurrency)
    results.batches.setdefault(concurrency, []).append(batch)
    return describe_batch(batch)


def describe_stream(run: StreamRun) -> str:
    return (
        f"{run.tokens} tokens, decode {run.decode_tok_s:.1f} tok/s, "
        f"TTFT {run.ttft_s * 1e3:.1f} ms, end-to-end {run.e2e_tok_s:.1f} tok/s, "
        f"{run.text_frames} text frames"
    )


def describe_batch(run: BatchRun) -> str:
    return f"{sum(run.tokens)} tokens in {run.wall_s:.2f} s, {run.total_tok_s:.1f} tok/s"


# -- report --------------------------------------------------------------------------------------


def summarize(results: Measurements) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    # TTFT over every single-stream request: the c1 runs and the TTFT requests.
    ttft_ms = [r.ttft_s * 1e3 for r in [*results.single, *results.ttft_probes]]
    if results.single:
        summary["c1"] = {
            "decode_tok_s": median([r.decode_tok_s for r in results.single]),
            "ttft_ms_p50": percentile(ttft_ms, 50),
            "ttft_ms_p95": percentile(ttft_ms, 95),
            "ttft_samples": len(ttft_ms),
            "ttft_ms_p50_c1_runs": median([r.ttft_s * 1e3 for r in results.single]),
            "e2e_tok_s": median([r.e2e_tok_s for r in results.single]),
            "total_tok_s": median([r.e2e_tok_s for r in results.single]),  # one stream's total
            "tokens": [r.tokens for r in results.single],
            "runs": [
                {**asdict(r), "decode_tok_s": r.decode_tok_s, "e2e_tok_s": r.e2e_tok_s}
                for r in results.single
            ],
            "ttft_requests_ms": [r.ttft_s * 1e3 for r in results.ttft_probes],
        }
    for concurrency, runs in sorted(results.batches.items()):
        stream_ttft_ms = [t * 1e3 for r in runs for t in r.ttft_s]
        bare = results.tokens_only.get(concurrency)
        summary[f"c{concurrency}"] = {
            "total_tok_s": median([r.total_tok_s for r in runs]),
            "ttft_ms_p50": percentile(stream_ttft_ms, 50),
            "ttft_ms_p95": percentile(stream_ttft_ms, 95),
            "tokens": [r.tokens for r in runs],
            "runs": [{**asdict(r), "total_tok_s": r.total_tok_s} for r in runs],
        }
        if bare:
            summary[f"c{concurrency}"]["tokens_only_total_tok_s"] = median([r.total_tok_s for r in bare])
    return summary


class Row(NamedTuple):
    label: str
    values: dict[str, float]  # path to figure
    tokens: str  # tokens per stream, raw / mlx_lm.server / in-process / isolated

    def ratio(self, path: str, base: str = "raw") -> float:
        return ratio(self.values[path], self.values[base])


def table_rows(summaries: dict[str, dict[str, Any]]) -> list[Row]:
    def tokens(key: str) -> str:
        def span(runs: list[Any]) -> str:
            flat = [t for run in runs for t in (run if isinstance(run, list) else [run])]
            low, high = min(flat), max(flat)
            return str(low) if low == high else f"{low}-{high}"

        return " / ".join(span(summaries[path][key]["tokens"]) for path in PATHS)

    def row(label: str, key: str, figure: str) -> Row:
        return Row(label, {path: summaries[path][key][figure] for path in PATHS}, tokens(key))

    rows: list[Row] = []
    if "c1" in summaries["raw"]:
        rows.append(row("single-stream decode tok/s", "c1", "decode_tok_s"))
        rows.append(row("single-stream end-to-end tok/s", "c1", "e2e_tok_s"))
    batched = [key for key in summaries["raw"] if key != "c1"]
    for key in batched:
        rows.append(row(f"total tok/s {key}", key, "total_tok_s"))
    if "c1" in summaries["raw"]:
        samples = summaries["raw"]["c1"]["ttft_samples"]
        rows.append(row(f"TTFT ms p50 c1 ({samples} requests)", "c1", "ttft_ms_p50"))
        rows.append(row(f"TTFT ms p95 c1 ({samples} requests)", "c1", "ttft_ms_p95"))
    for key in batched:
        rows.append(row(f"TTFT ms p50 {key} (all streams)", key, "ttft_ms_p50"))
        rows.append(row(f"TTFT ms p95 {key} (all streams)", key, "ttft_ms_p95"))
    return rows


def recovery_summary(runs: list[Recovery]) -> dict[str, Any]:
    recovery_s = median([r.recovery_s for r in runs])
    worker_ready_s = median([r.worker_ready_s for r in runs])
    return {
        "recovery_s": recovery_s,
        "worker_ready_s": worker_ready_s,
        "respawn_ready_s": median(
            [r.respawn_ready_s for r in runs if r.respawn_ready_s is not None]
        ),
        "meets_target": recovery_s <= worker_ready_s + RECOVERY_SLACK_S,
        "runs": [{**asdict(r), "meets_target": r.meets_target} for r in runs],
    }


def cancel_summary(runs: list[CancelRun], ms_per_step: float, max_tokens: int) -> dict[str, Any]:
    cancel_ms = [r.cancel_ms for r in runs]
    lags = [r.lag_steps for r in runs if r.lag_steps is not None]
    after = [r.steps_after_close for r in runs if r.steps_after_close is not None]
    p50 = median(cancel_ms)
    return {
        "cancel_ms": {"p50": p50, "max": max(cancel_ms, default=float("nan"))},
        "cancel_steps": {"p50": median(lags), "max": max(lags, default=None)},
        "steps_after_close": {"p50": median(after), "max": max(after, default=None)},
        # The isolated server's single-stream decode: one decode step per token.
        "ms_per_step_c1": ms_per_step,
        "cancel_ms_p50_in_steps": ratio(p50, ms_per_step),
        "cancel_ms_max_in_steps": ratio(max(cancel_ms, default=float("nan")), ms_per_step),
        "meets_target": bool(runs)
        and len(lags) == len(runs)
        and max(lags) <= CANCEL_STEPS_TARGET,
        "outcomes": [r.outcome for r in runs],
        "settings": {
            "max_tokens": max_tokens,
            "closed_after_frames": CANCEL_AFTER_FRAMES,
            "poll_ms": CANCEL_POLL_S * 1e3,
        },
        "runs": [asdict(r) for r in runs],
    }


def overload_summary(runs: list[OverloadRun], max_tokens: int) -> dict[str, Any]:
    unloaded = [r.admitted.total_tok_s for r in runs if not r.overloaded]
    overloaded = [r.admitted.total_tok_s for r in runs if r.overloaded]
    loaded_runs = [r for r in runs if r.overloaded]
    rejects = [ms for r in loaded_runs for ms in r.reject_ms]
    extra: collections.Counter[str] = collections.Counter()
    for r in loaded_runs:
        extra.update(r.extra)
    admitted_ratio = ratio(median(overloaded), median(unloaded))
    p99 = percentile(rejects, 99)
    # Round by round: each round has one run of each kind, next to each other.
    pairs = list(zip(unloaded, overloaded, strict=False))
    unloaded_runs = [r for r in runs if not r.overloaded]
    empty: collections.Counter[str] = collections.Counter()

    def cores(kind: list[OverloadRun]) -> dict[str, float]:
        names = kind[0].cpu_s if kind else {}
        return {name: median([r.cpu_s[name] / r.admitted.wall_s for r in kind]) for name in names}

    # The parent's CPU for the refusals: what it used beyond its unloaded run, per 429.
    def parent_cores(run: OverloadRun) -> float:
        return run.cpu_s["parent"] / run.admitted.wall_s

    per_reject = [
        ratio(
            (parent_cores(over) - parent_cores(unl)) * over.admitted.wall_s * 1e3,
            len(over.reject_ms),
        )
        for unl, over in zip(unloaded_runs, loaded_runs, strict=False)
    ]
    return {
        "reject_ms": {
            "p50": percentile(rejects, 50),
            "p99": p99,
            "max": max(rejects, default=float("nan")),
            "count": len(rejects),
        },
        "admitted_vs_unloaded": admitted_ratio,
        "admitted_vs_unloaded_by_round": [ratio(o, u) for u, o in pairs],
        "admitted_tok_s": {"unloaded": median(unloaded), "overloaded": median(overloaded)},
        "rejects_per_s": median([r.rejects_per_s for r in loaded_runs]),
        "extra_requests": dict(extra),
        "cpu_cores": {"unloaded": cores(unloaded_runs), "overloaded": cores(loaded_runs)},
        "parent_cpu_ms_per_429": median(per_reject),
        "rejected_by_parent": sum(r.rejected_by_parent for r in loaded_runs),
        "problems": dict(sum((collections.Counter(r.problems) for r in runs), empty)),
        "reject_ok": None if not rejects else p99 < REJECT_P99_TARGET_MS,
        "admitted_ok": admitted_ratio >= ADMITTED_RATIO_TARGET,
        "settings": {
            "server_options": overload_options(),
            "admitted_streams": OVERLOAD_MAX_ACTIVE,
            "admitted_max_tokens": max_tokens,
            "extra_in_flight": OVERLOAD_EXTRA,
            "extra_max_tokens": 1,
            "refill_ms": OVERLOAD_REFILL_S * 1e3,
            "refill_jitter": 0.5,
            "rounds": len(pairs),
        },
        "runs": [
            {
                **asdict(r),
                "admitted_tok_s": r.admitted.total_tok_s,
                "rejects_per_s": r.rejects_per_s,
            }
            for r in runs
        ],
    }


def print_report(
    plan: Plan,
    info: dict[str, Any],
    rows: list[Row],
    memory: dict[str, float | None],
    recovery: dict[str, Any],
    startup: dict[str, float | None],
    cancel: dict[str, Any],
    overload: dict[str, Any],
    targets: dict[str, Any],
    mlx_lm_server: dict[str, Any] | None = None,
    stream_retries: dict[str, dict[str, int]] | None = None,
    cached_prompt_tokens: dict[str, dict[str, int]] | None = None,
) -> None:
    machine, model, version = info["machine"], info["model"], info["versions"]
    print(
        f"machine: {machine['platform']}, {machine['cpu_count']} CPUs, "
        f"mlx device {machine['mlx_device']}, "
        f"load average at start {machine['load_average_at_start']}"
    )
    print(
        f"versions: mlx {version['mlx']}, mlx-lm {version['mlx_lm']}, "
        f"mlxhost {version['mlxhost_commit']}"
    )
    print(f"model: {model['path']} (size {model['size']}, {model['parameters']:,} parameters)")
    print(
        f"prompt: {model['prompt_tokens']} tokens, greedy, max_tokens {plan.max_tokens}, "
        f"repeats {plan.repeats} (medians), concurrency {','.join(map(str, plan.concurrency))}"
    )
    print()
    header = (
        "measurement", "raw", "mlx_lm.server", "in-process", "isolated", "in-proc/raw",
        "isolated/raw", "isolated/mlx_lm.server",
        "tokens/stream raw / mlx_lm.server / in-proc / isolated",
    )  # fmt: skip
    lines = [
        (
            row.label,
            *(f"{row.values[path]:.1f}" for path in PATHS),
            f"{row.ratio('in_process'):.3f}",
            f"{row.ratio('isolated'):.3f}",
            f"{row.ratio('isolated', 'mlx_lm_server'):.3f}",
            row.tokens,
        )
        for row in rows
    ]
    print_table(header, lines, ["<", *">" * 7, "<"])
    print()
    print(
        "ratio = path / base: above 1 is better for tok/s rows, worse for TTFT. TTFT c1: every "
        "single-stream request (the c1 runs and the TTFT requests); cN: every stream of the cN "
        "runs, from its own start."
    )
    if mlx_lm_server is not None:
        cached = ", ".join(
            f"{tokens} tokens x{count}"
            for tokens, count in mlx_lm_server["cached_prompt_tokens"].items()
        )
        backlog = mlx_lm_server["listen_backlog"]
        how = (
            "as shipped"
            if mlx_lm_server["as_shipped"]
            else "its own main(), the listen backlog raised from socketserver's 5"
        )
        options = " ".join(mlx_lm_server["options"])
        print(
            f"mlx_lm.server: {how} (listen backlog {backlog}); options {options}; start "
            f"to first answer {mlx_lm_server['ready_s']:.2f} s; prompt tokens served from its "
            f"prompt cache (usage cached_tokens), by request: {cached or '?'}"
        )
    for name in ("in_process", "isolated"):
        by_request = (cached_prompt_tokens or {}).get(name) or {}
        listed = ", ".join(f"{tokens} tokens x{count}" for tokens, count in by_request.items())
        print(f"{LABELS[name]}: prompt tokens served from its prompt cache, by request: {listed or '?'}")
    for name, retries in (stream_retries or {}).items():
        if retries:
            listed = ", ".join(f"{kind} x{count}" for kind, count in retries.items())
            print(
                f"{LABELS[name]}: streams tried again after their connection failed before the "
                f"response head: {listed} (the time counts from the first try)"
            )
    print_targets(targets)

    def mb(value: float | None) -> str:
        return "?" if value is None else f"{value:.1f} MB"

    parent = memory["parent"]
    verdict = "?" if parent is None else ("pass" if parent <= PARENT_RSS_TARGET_MB else "FAIL")
    print()
    print("memory (RSS, psutil, after the throughput runs):")
    target = f"target <= {PARENT_RSS_TARGET_MB:g} MB: {verdict}"
    print(f"  isolated parent   {mb(parent):>10}   {target}")
    print(
        f"  isolated worker   {mb(memory['worker']):>10}   "
        f"(its own reading in /health: {mb(memory['worker_reported'])})"
    )
    print(
        f"  in-process        {mb(memory['in_process']):>10}   "
        f"(its own reading in /health: {mb(memory['in_process_reported'])})"
    )
    print(f"  mlx_lm.server     {mb(memory.get('mlx_lm_server')):>10}")

    print()
    print(
        f"recovery (isolated: kill -9 of the worker to the first 200 of a max_tokens "
        f"{RECOVERY_MAX_TOKENS} request; {len(recovery['runs'])} kill(s), medians):"
    )
    verdict = "pass" if recovery["meets_target"] else "FAIL"
    print(
        f"  recovery_s {recovery['recovery_s']:.3f} s, worker_ready_s "
        f"{recovery['worker_ready_s']:.3f} s: target recovery_s <= worker_ready_s + "
        f"{RECOVERY_SLACK_S:g} s: {verdict}"
    )

    def seconds(value: float | None) -> str:
        return "?" if value is None else f"{value:.3f}"

    header = (
        "kill", "ready_s before", "exit seen", "respawned", "ready", "200", "respawn ready_s",
        "warm request", "attempts", "retry-after",
    )  # fmt: skip
    lines = [
        (
            str(number),
            seconds(run["worker_ready_s"]),
            seconds(run["exit_seen_at_s"]),
            seconds(run["respawned_at_s"]),
            seconds(run["ready_at_s"]),
            seconds(run["recovery_s"]),
            seconds(run["respawn_ready_s"]),
            seconds(run["warm_request_s"]),
            " ".join(f"{k}:{v}" for k, v in sorted(run["attempts"].items())),
            ",".join(run["retry_after"]) or "-",
        )
        for number, run in enumerate(recovery["runs"], 1)
    ]
    print_table(header, lines, ["<", *">" * 7, "<", "<"], indent="  ")
    print(
        "  (exit seen, respawned, ready, 200: seconds from the kill, as the parent's log lines "
        "arrived; warm request: the same request just before the kill)"
    )
    print(
        "  where a worker's ready_s goes: a fresh interpreter importing the worker's modules "
        f"takes {seconds(startup['worker_import_s'])} s (median of 3); the model load itself "
        f"{seconds(startup['in_process_load_s'])} s (the in-process server's 'loaded in'; "
        f"mlx_lm.load in this process {seconds(startup['raw_load_s'])} s)"
    )
    load = startup["in_process_load_s"]
    if load is not None:
        verdict = "pass" if recovery["recovery_s"] <= load + RECOVERY_SLACK_S else "FAIL"
        print(
            f"  stricter reading, model load only: recovery_s <= {load:.3f} + "
            f"{RECOVERY_SLACK_S:g} s: {verdict}"
        )

    print_cancel(cancel)
    print_overload(overload)


def print_cancel(cancel: dict[str, Any]) -> None:
    def number(value: float | None, digits: int = 1) -> str:
        return "?" if value is None or math.isnan(value) else f"{value:.{digits}f}"

    settings = cancel["settings"]
    print()
    print(
        f"cancellation (isolated: a greedy stream of max_tokens {settings['max_tokens']} closed "
        f"after {settings['closed_after_frames']} content frames; {len(cancel['runs'])} run(s), "
        "medians and max):"
    )
    ms, steps, after = cancel["cancel_ms"], cancel["cancel_steps"], cancel["steps_after_close"]
    per_step = cancel["ms_per_step_c1"]
    print(
        f"  cancel_ms p50 {number(ms['p50'])} ms, max {number(ms['max'])} ms: from the close to "
        f"the worker's /health showing the cancel and no active sequence (polled every "
        f"{settings['poll_ms']:g} ms: an upper bound)"
    )
    print(
        f"  per decode step at c1 {number(per_step, 2)} ms (the isolated single-stream decode): "
        f"cancel_ms p50 = {number(cancel['cancel_ms_p50_in_steps'])} steps, max = "
        f"{number(cancel['cancel_ms_max_in_steps'])} steps; engine steps from just before the "
        f"close to then: p50 {number(after['p50'], 0)}, max {after['max']}"
    )
    verdict = "pass" if cancel["meets_target"] else "FAIL"
    print(
        f"  cancel_steps (engine: the cancel reaching it to the sequence leaving the batch) p50 "
        f"{number(steps['p50'], 0)}, max {steps['max']}: target <= {CANCEL_STEPS_TARGET} step: "
        f"{verdict}"
    )
    outcomes = collections.Counter(
        f"{o.get('kind')} ({o.get('reason') or o.get('code') or o.get('finish_reason')})"
        if o
        else "? (not found)"
        for o in cancel["outcomes"]
    )
    listed = ", ".join(f"{k} x{v}" for k, v in outcomes.items())
    print(f"  the parent's session outcomes: {listed}")


def print_overload(overload: dict[str, Any]) -> None:
    settings = overload["settings"]
    reject, tok_s = overload["reject_ms"], overload["admitted_tok_s"]
    print()
    print(
        f"overload (a separate isolated server with {' '.join(settings['server_options'])}; "
        f"{settings['rounds']} round(s) of one unloaded and one overloaded run, medians):"
    )
    print(
        f"  {settings['admitted_streams']} admitted streams of max_tokens "
        f"{settings['admitted_max_tokens']}; overloaded: meanwhile {settings['extra_in_flight']} "
        f"more clients, each sending a request (max_tokens 1) and, after a 429, the next one "
        f"{settings['refill_ms']:g} ms (+-50%) later, until the first admitted stream ends; then "
        "the ones still unanswered (queued) close their connections"
    )
    verdict = "pass" if overload["admitted_ok"] else "FAIL"
    by_round = ", ".join(f"{r:.3f}" for r in overload["admitted_vs_unloaded_by_round"])
    print(
        f"  admitted total tok/s: unloaded {tok_s['unloaded']:.1f}, overloaded "
        f"{tok_s['overloaded']:.1f}: admitted_vs_unloaded {overload['admitted_vs_unloaded']:.3f} "
        f"(by round {by_round}): target >= {ADMITTED_RATIO_TARGET:g}: {verdict}"
    )
    reject_ok = overload["reject_ok"]
    verdict = "?" if reject_ok is None else ("pass" if reject_ok else "FAIL")
    print(
        f"  429 latency (request sent to the whole answer read, client side): p50 "
        f"{reject['p50']:.2f} ms, p99 {reject['p99']:.2f} ms, max {reject['max']:.2f} ms over "
        f"{reject['count']} (~{overload['rejects_per_s']:.0f}/s): target p99 < "
        f"{REJECT_P99_TARGET_MS:g} ms: {verdict}"
    )
    extra = " ".join(f"{k}:{v}" for k, v in sorted(overload["extra_requests"].items()))
    print(
        f"  extra requests: {extra}; the parent counted {overload['rejected_by_parent']} "
        "rejected"
    )

    def used(kind: str) -> str:
        return ", ".join(f"{k} {v:.2f}" for k, v in overload["cpu_cores"][kind].items())

    print(
        f"  CPU cores used (of {os.cpu_count()}): unloaded {used('unloaded')}; overloaded "
        f"{used('overloaded')}; the parent's extra CPU per 429 "
        f"{overload['parent_cpu_ms_per_429']:.2f} ms"
    )
    for problem, count in overload["problems"].items():
        print(f"  problem: {count} {problem}")


def print_events(latency: dict[str, Any], events: dict[str, Any]) -> None:
    def ms(stats: dict[str, Any]) -> str:
        if not stats["count"]:
            return "none"
        return (
            f"p50 {stats['p50']:.1f} ms, p95 {stats['p95']:.1f} ms, max {stats['max']:.1f} ms "
            f"over {stats['count']}"
        )

    settings = latency["settings"]
    print()
    print(
        f"admin event stream (isolated: GET /admin/events through AdminClient, what mlxhost tui "
        f"reads; {settings['requests']} sequential non-streaming requests of max_tokens "
        f"{settings['max_tokens']}):"
    )
    verdict = "pass" if latency["meets_target"] else "FAIL"
    print(
        f"  event latency {ms(latency)}: target p95 <= {EVENT_LATENCY_P95_TARGET_MS:g} ms: "
        f"{verdict}"
    )
    by_type = latency["by_type"]
    print(f"    session.opened (from the request's start): {ms(by_type['session.opened'])}")
    print(f"    session.closed (from the response read):   {ms(by_type['session.closed'])}")
    print(
        f"    the parent's publish ('at', ms wall clock) to the arrival: "
        f"{ms(latency['publish_to_arrival_ms'])}"
    )
    exited = latency["worker_exited"]
    verdict = "?" if exited["ok"] is None else ("pass" if exited["ok"] else "FAIL")
    missing = f", {exited['missing']} never arrived" if exited["missing"] else ""
    print(
        f"  worker.exited, from the kill -9 (recovery runs): {ms(exited)}{missing}; publish to "
        f"arrival {ms(exited['publish_to_arrival_ms'])}: max <= "
        f"{EVENT_LATENCY_P95_TARGET_MS:g} ms: {verdict}"
    )
    types = ", ".join(f"{k} {v}" for k, v in sorted(latency["types_seen"].items()))
    print(f"  events seen meanwhile: {types}")
    if latency["subscriber_error"]:
        print(f"  problem: the subscriber failed: {latency['subscriber_error']}")

    settings = events["settings"]
    tok_s = events["tok_s"]
    by_round = ", ".join(f"{r:.3f}" for r in events["lagging_subscriber_ratio_by_round"])
    verdict = "pass" if events["lagging_ok"] else "FAIL"
    print(
        f"  {settings['streams']} greedy streams of max_tokens {settings['max_tokens']}, "
        f"{settings['rounds']} round(s), alternating: total tok/s with no admin subscriber "
        f"{tok_s['no_subscriber']:.1f}, with a lagging one (raw socket, SO_RCVBUF "
        f"{settings['lagging_rcvbuf']}, never reads) and a reading AdminClient "
        f"{tok_s['with_subscribers']:.1f}"
    )
    print(
        f"    ratio {events['lagging_subscriber_ratio']:.3f} (by round {by_round}): target >= "
        f"{LAGGING_RATIO_TARGET:g}: {verdict}"
    )

    def used(kind: str) -> str:
        return ", ".join(f"{k} {v:.2f}" for k, v in events["cpu_cores"][kind].items())

    print(
        f"    CPU cores used: no subscriber {used('no_subscriber')}; with subscribers "
        f"{used('with_subscribers')}"
    )
    received = events["lagging_received"]
    dropped = sum(events["lagging_dropped"])
    print(
        f"    events per run: published {events['events_published_per_run']}, seen by the reading "
        f"subscriber {events['events_seen_by_reader_per_run']}; the lagging one, read after each "
        f"run, had {[r['events'] for r in received]} events queued for it, dropped (ended with "
        f"stream.lagged) in {dropped} of {len(received)} run(s)"
    )
    if dropped < len(received):
        print(
            f"    (a subscriber is dropped once {settings['subscriber_buffer']} events wait in its "
            "buffer, and they only start to wait there when the kernel's socket buffers between "
            "the parent and it are full: on loopback that is hundreds of KB to MBs)"
        )
    hub = events["hub_micro"]
    verdict = "pass" if events["hub_ok"] else "FAIL"
    print(
        f"  the hub alone (EventHub in this process, anyio): {hub['events']:,} events published, "
        f"one subscriber never reading, one reading in a task: {hub['events_per_s']:,.0f} "
        f"events/s (publishing {hub['publish_s']:.2f} s, all read {hub['wall_s']:.2f} s); the "
        f"reader got {hub['received_by_reader']:,}; the lagging one was "
        f"{'dropped' if hub['lagging_dropped'] else 'NOT dropped'} after {hub['lagging_got']} "
        f"(buffer {settings['subscriber_buffer']}): target >= {HUB_EVENTS_PER_S_TARGET:,.0f} "
        f"events/s, the reader kept, the lagging one dropped: {verdict}"
    )


def print_table(
    header: Sequence[str], lines: Sequence[Sequence[str]], aligns: Sequence[str], indent: str = ""
) -> None:
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        padded = (f"{cell:{align}{width}}" for cell, align, width in zip(cells, aligns, widths))
        return (indent + "  ".join(padded)).rstrip()

    print(fmt(header))
    print(indent + "  ".join("-" * width for width in widths))
    for line in lines:
        print(fmt(line))


def path_ratios(summaries: dict[str, dict[str, Any]], path: str, base: str) -> dict[str, float]:
    top, bottom = summaries[path], summaries[base]
    ratios: dict[str, float] = {}
    for key in bottom:
        figure = "decode_tok_s" if key == "c1" else "total_tok_s"
        ratios[key] = ratio(top[key][figure], bottom[key][figure])
    if "c1" in bottom:
        ratios["c1_e2e"] = ratio(top["c1"]["e2e_tok_s"], bottom["c1"]["e2e_tok_s"])
        ratios["ttft_p50"] = ratio(top["c1"]["ttft_ms_p50"], bottom["c1"]["ttft_ms_p50"])
    return ratios


def at_least(value: float | None, bound: float) -> bool | None:
    """value >= bound; None when there is no value (nan)."""
    if value is None or math.isnan(value):
        return None
    return value >= bound


def speed_targets(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The targets on the table's figures (see the docstring)."""
    vs_raw = path_ratios(summaries, "isolated", "raw")
    vs_peer = path_ratios(summaries, "isolated", "mlx_lm_server")
    levels = list(summaries["raw"])  # c1, c4, ...
    by_level = {key: at_least(vs_raw.get(key), ISOLATED_VS_RAW_MIN) for key in levels}
    peer_key = f"c{ISOLATED_VS_MLX_LM_SERVER_AT}"
    ttft = {path: summaries[path].get("c1", {}).get("ttft_ms_p50") for path in PATHS}
    gap = None
    if ttft["isolated"] is not None and ttft["raw"] is not None:
        gap = ttft["isolated"] - ttft["raw"]
    return {
        "isolated_vs_raw_min": ISOLATED_VS_RAW_MIN,
        "isolated_vs_raw": {key: vs_raw.get(key) for key in levels},
        "isolated_vs_raw_ok_by_concurrency": by_level,
        "isolated_vs_raw_ok": None
        if not by_level or None in by_level.values()
        else all(by_level.values()),
        "isolated_vs_mlx_lm_server_min": ISOLATED_VS_MLX_LM_SERVER_MIN,
        "isolated_vs_mlx_lm_server_at": peer_key,
        "isolated_vs_mlx_lm_server": vs_peer.get(peer_key),
        "isolated_vs_mlx_lm_server_ok": at_least(
            vs_peer.get(peer_key), ISOLATED_VS_MLX_LM_SERVER_MIN
        ),
        "ttft_p50_slack_ms": TTFT_SLACK_MS,
        "ttft_p50_ms": {"isolated": ttft["isolated"], "raw": ttft["raw"]},
        "ttft_p50_isolated_minus_raw_ms": gap,
        "ttft_ok": None if gap is None or math.isnan(gap) else gap <= TTFT_SLACK_MS,
        # Not a target: against raw batches that never turn tokens into text (see RawMLX.batch).
        "isolated_vs_raw_tokens_only": {
            key: ratio(summaries["isolated"][key]["total_tok_s"], summaries["raw"][key]["tokens_only_total_tok_s"])
            for key in levels
            if "tokens_only_total_tok_s" in summaries["raw"].get(key, {})
        },
    }


def print_targets(targets: dict[str, Any]) -> None:
    def verdict(ok: bool | None) -> str:
        return "?" if ok is None else ("pass" if ok else "FAIL")

    def number(value: float | None, digits: int = 3) -> str:
        return "?" if value is None or math.isnan(value) else f"{value:.{digits}f}"

    print()
    print("targets:")
    levels = ", ".join(
        f"{key} {number(value)}" + (" (decode)" if key == "c1" else "")
        + ("" if targets["isolated_vs_raw_ok_by_concurrency"][key] is not False else " FAIL")
        for key, value in targets["isolated_vs_raw"].items()
    )  # fmt: skip
    print(
        f"  isolated >= {ISOLATED_VS_RAW_MIN:g} x raw at every concurrency: {levels}: "
        f"{verdict(targets['isolated_vs_raw_ok'])}"
    )
    print(
        f"  isolated >= {ISOLATED_VS_MLX_LM_SERVER_MIN:g} x mlx_lm.server at "
        f"{targets['isolated_vs_mlx_lm_server_at']} (total tok/s): "
        f"{number(targets['isolated_vs_mlx_lm_server'])}: "
        f"{verdict(targets['isolated_vs_mlx_lm_server_ok'])}"
    )
    ttft = targets["ttft_p50_ms"]
    print(
        f"  TTFT p50 isolated <= raw + {TTFT_SLACK_MS:g} ms: isolated {number(ttft['isolated'], 2)}"
        f" ms, raw {number(ttft['raw'], 2)} ms (difference "
        f"{number(targets['ttft_p50_isolated_minus_raw_ms'], 2)} ms): {verdict(targets['ttft_ok'])}"
    )
    if bare := targets.get("isolated_vs_raw_tokens_only"):
        listed = ", ".join(f"{key} {number(value)}" for key, value in bare.items())
        print(f"  (not a target) isolated / raw batches that do not detokenize: {listed}")


def write_chart(
    path: Path, summaries: dict[str, dict[str, Any]], concurrency: list[int], title: str
) -> Path | None:
    """Total tok/s against concurrency for every path, and the isolated server's ratios; a PNG.
    None, with a hint, when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress(
            "chart skipped: matplotlib is not installed; install it with "
            "pip install -e '.[bench]' (or pip install matplotlib)"
        )
        return None

    def total(path_name: str, level: int) -> float:
        return summaries[path_name].get(f"c{level}", {}).get("total_tok_s", float("nan"))

    styles = {
        "raw": ("tab:gray", "s", "--"),
        "mlx_lm_server": ("tab:orange", "^", "-"),
        "in_process": ("tab:blue", "D", "-"),
        "isolated": ("tab:green", "o", "-"),
    }
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(9, 7.5), dpi=110, sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    for name in PATHS:
        color, marker, line = styles[name]
        values = [total(name, level) for level in concurrency]
        top.plot(
            concurrency, values, color=color, marker=marker, linestyle=line, linewidth=2,
            markersize=7, label=LABELS[name],
        )  # fmt: skip
    top.set_ylabel("total tok/s (all streams)")
    top.set_ylim(bottom=0)
    top.set_title(title, fontsize=10)
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left")

    for base, color, bound in (
        ("raw", "tab:gray", ISOLATED_VS_RAW_MIN),
        ("mlx_lm_server", "tab:orange", ISOLATED_VS_MLX_LM_SERVER_MIN),
    ):
        values = [ratio(total("isolated", level), total(base, level)) for level in concurrency]
        bottom.plot(
            concurrency, values, color=color, marker="o", linewidth=2,
            label=f"isolated / {LABELS[base]} (target >= {bound:g})",
        )  # fmt: skip
        bottom.axhline(bound, color=color, linestyle=":", linewidth=1)
    bottom.axhline(1.0, color="black", linewidth=0.6)
    bottom.set_ylabel("ratio")
    bottom.set_xlabel("concurrent streams (c1: one stream's end-to-end tok/s)")
    bottom.grid(True, alpha=0.3)
    bottom.legend(loc="best", fontsize=8)
    bottom.set_xscale("log", base=2)
    bottom.set_xticks(concurrency)
    bottom.set_xticklabels([str(level) for level in concurrency])
    bottom.minorticks_off()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def json_document(
    plan: Plan,
    info: dict[str, Any],
    summaries: dict[str, dict[str, Any]],
    measured: dict[str, Any],
    recovery: dict[str, Any],
    startup: dict[str, float | None],
    cancel: dict[str, Any],
    overload: dict[str, Any],
) -> dict[str, Any]:
    isolated_vs_raw = path_ratios(summaries, "isolated", "raw")

    def ttft_of(figure: str) -> dict[str, Any]:
        values = {path: summaries[path].get("c1", {}).get(figure) for path in PATHS}
        return {**values, "mlxhost": values["isolated"]}  # the old key: the isolated server

    by_concurrency = {
        path: {
            key: {"p50": figures["ttft_ms_p50"], "p95": figures["ttft_ms_p95"]}
            for key, figures in summaries[path].items()
        }
        for path in PATHS
    }
    memory = measured["memory"]
    return {
        **info,
        "settings": {
            "max_tokens": plan.max_tokens,
            "repeats": plan.repeats,
            "concurrency": plan.concurrency,
            "temperature": 0.0,
            "max_batch": plan.max_batch,
            "prefill_batch": PREFILL_BATCH,
            "server_options": {
                **{name: server_options(name, plan) for name in SERVED},
                "mlx_lm_server": measured["mlx_lm_server"]["options"],
                "overload": overload_options(),
            },
            "ttft_requests": plan.ttft_requests,
            "ttft_max_tokens": measured["ttft_max_tokens"],
        },
        "results": summaries,
        "ratios": {
            "isolated_vs_raw": isolated_vs_raw,
            "isolated_vs_mlx_lm_server": path_ratios(summaries, "isolated", "mlx_lm_server"),
            "in_process_vs_raw": path_ratios(summaries, "in_process", "raw"),
            "in_process_vs_mlx_lm_server": path_ratios(summaries, "in_process", "mlx_lm_server"),
            "mlx_lm_server_vs_raw": path_ratios(summaries, "mlx_lm_server", "raw"),
            "isolated_vs_in_process": path_ratios(summaries, "isolated", "in_process"),
            "mlxhost_vs_raw": isolated_vs_raw,  # the old key: the default (isolated) server
        },
        "ttft_ms": {
            "p50": ttft_of("ttft_ms_p50"),
            "p95": ttft_of("ttft_ms_p95"),
            "count": {path: summaries[path].get("c1", {}).get("ttft_samples") for path in PATHS},
            "by_concurrency": by_concurrency,
        },
        "mlx_lm_server": measured["mlx_lm_server"],
        "stream_retries": measured["stream_retries"],
        "cached_prompt_tokens": measured["cached_prompt_tokens"],
        "rss_mb": memory,
        "recovery_s": recovery["recovery_s"],
        "worker_ready_s": recovery["worker_ready_s"],
        "recovery": {**recovery, "startup": startup},
        "cancel_ms": cancel["cancel_ms"],
        "cancel_steps": cancel["cancel_steps"],
        "cancel": cancel,
        "overload": overload,
        "targets": {
            **speed_targets(summaries),
            "parent_rss_mb_max": PARENT_RSS_TARGET_MB,
            "parent_rss_ok": None
            if memory["parent"] is None
            else memory["parent"] <= PARENT_RSS_TARGET_MB,
            "recovery_slack_s": RECOVERY_SLACK_S,
            "recovery_ok": recovery["meets_target"],
            # The issue's "model load time" read as the load alone, without interpreter start
            # and imports (the in-process server's "loaded in"):
            "model_load_s": startup["in_process_load_s"],
            "recovery_ok_vs_model_load": None
            if startup["in_process_load_s"] is None
            else recovery["recovery_s"] <= startup["in_process_load_s"] + RECOVERY_SLACK_S,
            "cancel_steps_max": CANCEL_STEPS_TARGET,
            "cancel_ok": cancel["meets_target"],
            "reject_ms_p99_below": REJECT_P99_TARGET_MS,
            "reject_ok": overload["reject_ok"],
            "admitted_vs_unloaded_min": ADMITTED_RATIO_TARGET,
            "admitted_ok": overload["admitted_ok"],
        },
        "server_engine_statistics": measured["server_engines"],
        "prompt_tokens_served": measured["prompt_tokens"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse_args(argv)
    info: dict[str, Any] = {"machine": machine_info(), "versions": versions()}
    progress(f"loading {plan.model_path}")
    raw = RawMLX(plan.model_path)
    progress("choosing a prompt whose greedy reply runs to max_tokens (raw warm-up)")
    prompt, ids, probe = choose_prompt(raw, plan.max_tokens)
    info["model"] = {
        "path": str(plan.model_path),
        "size": plan.size,
        "parameters": raw.parameters,
        "load_s": raw.load_s,
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "reply_probe": asdict(probe),
    }

    # The servers stop when this block ends, however it ends; so also on SIGTERM.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        with contextlib.ExitStack() as servers:
            measured = asyncio.run(measure(plan, raw, prompt, ids, servers))
    finally:
        signal.signal(signal.SIGTERM, previous)

    for name, counted in measured["prompt_tokens"].items():
        if counted != len(ids):
            progress(
                f"warning: {LABELS[name]} counted {counted} prompt tokens, raw {len(ids)}: "
                "the paths do not see the same prompt"
            )
    summaries = {name: summarize(measured["results"][name]) for name in PATHS}
    recovery = recovery_summary(measured["recoveries"])
    startup = {
        "raw_load_s": raw.load_s,
        "in_process_load_s": measured["in_process_load_s"],
        "worker_import_s": measured["worker_import_s"],
    }
    isolated_c1 = summaries["isolated"].get("c1", {}).get("decode_tok_s", float("nan"))
    cancel = cancel_summary(
        measured["cancels"], ratio(1e3, isolated_c1), measured["cancel_max_tokens"]
    )
    overload = overload_summary(measured["overloads"], plan.max_tokens * OVERLOAD_TOKENS_FACTOR)
    progress(f"event hub alone: publishing {HUB_EVENTS:,} events in this process")
    hub = anyio.run(hub_throughput)
    event_latency = event_latency_summary(
        measured["event_samples"],
        measured["exit_samples"],
        measured["event_types"],
        measured["event_error"],
        measured["exits_missing"],
    )
    events = events_summary(measured["hub_runs"], hub, measured["hub_max_tokens"])
    print_report(
        plan, info, table_rows(summaries), measured["memory"], recovery, startup, cancel,
        overload, speed_targets(summaries), measured["mlx_lm_server"], measured["stream_retries"],
        measured["cached_prompt_tokens"],
    )  # fmt: skip
    print_events(event_latency, events)

    title = (
        f"{Path(info['model']['path']).name} ({info['model']['parameters']:,} parameters), "
        f"max_tokens {plan.max_tokens}, greedy, medians of {plan.repeats}\n"
        f"{info['machine']['cpu_count']} CPUs (load average at start "
        f"{(info['machine']['load_average_at_start'] or ['?'])[0]}), mlx "
        f"{info['versions']['mlx']}, mlx-lm {info['versions']['mlx_lm']}"
    )
    chart = write_chart(plan.chart_path, summaries, plan.concurrency, title)
    print()
    print(f"chart: {chart}" if chart else "chart: skipped (matplotlib is not installed)")

    if plan.json_path is not None:
        document = json_document(
            plan, info, summaries, measured, recovery, startup, cancel, overload
        )
        document["chart"] = None if chart is None else str(chart)
        document["event_latency_ms"] = event_latency
        document["events"] = events
        document["targets"].update(
            {
                "event_latency_p95_ms_max": EVENT_LATENCY_P95_TARGET_MS,
                "event_latency_ok": event_latency["meets_target"],
                "hub_events_per_s_min": HUB_EVENTS_PER_S_TARGET,
                "hub_ok": events["hub_ok"],
                "lagging_subscriber_ratio_min": LAGGING_RATIO_TARGET,
                "lagging_ok": events["lagging_ok"],
            }
        )
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        plan.json_path.write_text(json.dumps(json_safe(document), indent=2) + "\n")
        progress(f"wrote {plan.json_path}")
    return 0


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
