"""Benchmark mlxhost against raw mlx-lm: same model, same prompt, greedy, same max_tokens.

    python scripts/bench.py [--model DIR | --size tiny|bench] [--max-tokens N] [--repeats N]
                            [--concurrency 1,4,8] [--quick] [--json PATH]

Two paths are measured in one run, their repeats interleaved so that a noisy machine slows both
alike:

raw      mlx-lm in this process. Concurrency 1 is `stream_generate` with eos ignored; concurrency
         N inserts N copies of the prompt into a `BatchGenerator` at once (no stop tokens, so every
         row runs to max_tokens; batch sizes as the server's) and steps it until all finished.
mlxhost  `python -m mlxhost serve` in a subprocess, driven over HTTP with streaming chat
         completions (httpx, SSE parsed by hand). Concurrency N is N streams at once.

Each path is warmed up first: one full single-stream generation, then one short batch at the
highest concurrency. The prompt is picked by a greedy probe (see PROMPTS).

Figures, each the median over the repeats:
  decode tok/s    (tokens - 1) / (time of the last token - time of the first token), one stream.
                  The first token is not counted because its time is the TTFT. Over HTTP the
                  "token times" are those of the first and last SSE frames with non-empty content.
  TTFT            call (or request start) to the first token (first frame with content), one stream.
  end-to-end      tokens / (call to the last token (raw) or to the end of the stream (mlxhost)).
  total tok/s cN  tokens of all N streams / (first insert or request start to the last finish).
Rates come from the tokens actually generated (mlxhost: its usage chunks), which are recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import re
import signal
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

import httpx
import mlx.core as mx
import mlx_lm
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

READY = re.compile(r"mlxhost ready: .* on (http://[\d.]+:\d+)")
SERVER_START_TIMEOUT_S = 180.0
REQUEST_TIMEOUT_S = 900.0
# The server's defaults (EngineOptions), which the raw BatchGenerator copies.
MAX_BATCH = 32
PREFILL_BATCH = 8

DEFAULT_MAX_TOKENS = {"tiny": 256, "bench": 64}
QUICK_MAX_TOKENS = {"tiny": 128, "bench": 32}
# The first prompt whose greedy reply suits both paths is used: it must run to max_tokens without
# eos, so that both generate the same number of tokens (a random-weight model may emit eos at any
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
    total_s: float  # call to the end (raw: the last token; mlxhost: the stream's end)
    text_frames: int  # responses (raw) or SSE frames (mlxhost) that carried text

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

    @property
    def total_tok_s(self) -> float:
        return sum(self.tokens) / self.wall_s


@dataclass
class Measurements:
    single: list[StreamRun] = field(default_factory=list)
    batches: dict[int, list[BatchRun]] = field(default_factory=dict)


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
        self.model, self.tokenizer = mlx_lm.load(str(model_path))
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
        self, prompt: list[int], concurrency: int, max_tokens: int, max_batch: int = MAX_BATCH
    ) -> BatchRun:
        """Insert `concurrency` copies of the prompt at once; step until every row finished."""
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
            counts = dict.fromkeys(uids, 0)
            running = set(uids)
            while running:
                _, responses = generator.next()
                for response in responses:
                    counts[response.uid] += 1
                    if response.finish_reason is not None:
                        running.discard(response.uid)
            wall = time.perf_counter() - start
        finally:
            generator.close()
        return BatchRun([counts[uid] for uid in uids], wall)


# -- mlxhost over HTTP ---------------------------------------------------------------------------


class Server:
    """`python -m mlxhost serve` on a free port; its log is kept for when it fails."""

    def __init__(self, model_path: Path, max_batch: int) -> None:
        env = dict(os.environ)
        # Serve the code of the checkout this script belongs to, installed or not.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        command = [
            sys.executable, "-m", "mlxhost", "serve",
            "--model", str(model_path), "--host", "127.0.0.1", "--port", "0",
            "--max-batch", str(max_batch),
        ]  # fmt: skip
        self.log: collections.deque[str] = collections.deque(maxlen=200)
        self.url: str | None = None
        self._ready = threading.Event()
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        # Drain stderr for the server's whole life, so that it never blocks on a full pipe.
        threading.Thread(target=self._read_log, name="mlxhost-log", daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line.rstrip("\n"))
            if self.url is None and (match := READY.search(line)):
                self.url = match.group(1)
                self._ready.set()
        self._ready.set()  # the server exited: stop waiting

    def wait_ready(self, timeout: float = SERVER_START_TIMEOUT_S) -> str:
        self._ready.wait(timeout)
        if self.url is None:
            tail = "\n".join(list(self.log)[-20:])
            code = self.process.poll()
            raise RuntimeError(f"mlxhost did not become ready (exit code {code}):\n{tail}")
        return self.url

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class HTTPBench:
    def __init__(self, client: httpx.AsyncClient, prompt: str, max_tokens: int) -> None:
        self.client = client
        self.prompt = prompt
        self.max_tokens = max_tokens
        self.prompt_tokens: int | None = None  # as the server counted them

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
        async with self.client.stream("POST", "/v1/chat/completions", json=body) as response:
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
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
                    self.prompt_tokens = chunk["usage"]["prompt_tokens"]
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
        return BatchRun([run.tokens for run in runs], wall)


# -- the run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    model_path: Path
    size: str  # "tiny", "bench", or "custom" for --model
    max_tokens: int
    repeats: int
    concurrency: list[int]
    json_path: Path | None

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
        description="Benchmark mlxhost over HTTP against raw mlx-lm on the same model.",
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
        default=[1, 4, 8],
        help="comma-separated stream counts; 1 is the single-stream test (default: 1,4,8)",
    )
    parser.add_argument("--quick", action="store_true", help="one repeat, fewer tokens")
    parser.add_argument("--json", type=Path, help="also write every figure and ratio to this file")
    args = parser.parse_args(argv)

    defaults = QUICK_MAX_TOKENS if args.quick else DEFAULT_MAX_TOKENS
    max_tokens = args.max_tokens if args.max_tokens is not None else defaults[args.size]
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if max_tokens < 2:
        parser.error("--max-tokens must be at least 2 (a decode rate needs two tokens)")
    if repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.model is not None:
        if not args.model.is_dir():
            parser.error(f"--model: {args.model} is not a directory")
        model_path, size = args.model.resolve(), "custom"
    else:
        progress(f"building the {args.size} demo model (once; it is cached)")
        cache = demo.default_cache_dir() / f"bench-{args.size}"
        model_path, size = demo.make_model(cache, args.size), args.size
    return Plan(model_path, size, max_tokens, repeats, args.concurrency, args.json)


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


@contextmanager
def running_server(model_path: Path, max_batch: int) -> Iterator[Server]:
    server = Server(model_path, max_batch)
    try:
        yield server
    finally:
        server.stop()


async def measure(plan: Plan, raw: RawMLX, prompt: str, ids: list[int]) -> dict[str, Any]:
    raw_results, http_results = Measurements(), Measurements()
    top = max(plan.concurrency)
    warm_tokens = min(plan.max_tokens, 16)

    progress("raw: warming up")
    raw.stream(ids, plan.max_tokens)
    if top > 1:
        raw.batch(ids, top, warm_tokens, plan.max_batch)

    progress("mlxhost: starting the server")
    with running_server(plan.model_path, plan.max_batch) as server:
        url = server.wait_ready()
        limits = httpx.Limits(max_connections=top + 4, max_keepalive_connections=top + 4)
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S)
        async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
            http = HTTPBench(client, prompt, plan.max_tokens)
            progress(f"mlxhost: ready on {url}; warming up")
            await http.stream()
            if top > 1:
                await http.batch(top, warm_tokens)  # also opens the pooled connections

            for repeat in range(plan.repeats):
                for concurrency in plan.concurrency:
                    # Alternate which path goes first, so a drifting machine favours neither.
                    order = ("raw", "mlxhost") if repeat % 2 == 0 else ("mlxhost", "raw")
                    for name in order:
                        if name == "raw":
                            result = run_raw(raw, raw_results, ids, concurrency, plan)
                        else:
                            result = await run_http(http, http_results, concurrency)
                        where = f"repeat {repeat + 1}/{plan.repeats} c{concurrency} {name}"
                        progress(f"  {where}: {result}")
            health = (await client.get("/health")).json()
    return {
        "raw": raw_results,
        "mlxhost": http_results,
        "prompt_tokens_mlxhost": http.prompt_tokens,
        "server_engine": health.get("engine"),
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
    if results.single:
        summary["c1"] = {
            "decode_tok_s": median([r.decode_tok_s for r in results.single]),
            "ttft_ms_p50": median([r.ttft_s * 1e3 for r in results.single]),
            "e2e_tok_s": median([r.e2e_tok_s for r in results.single]),
            "tokens": [r.tokens for r in results.single],
            "runs": [
                {**asdict(r), "decode_tok_s": r.decode_tok_s, "e2e_tok_s": r.e2e_tok_s}
                for r in results.single
            ],
        }
    for concurrency, runs in sorted(results.batches.items()):
        summary[f"c{concurrency}"] = {
            "total_tok_s": median([r.total_tok_s for r in runs]),
            "tokens": [r.tokens for r in runs],
            "runs": [{**asdict(r), "total_tok_s": r.total_tok_s} for r in runs],
        }
    return summary


class Row(NamedTuple):
    label: str
    raw: float
    mlxhost: float
    tokens: str  # tokens per stream, raw / mlxhost

    @property
    def ratio(self) -> float:
        return ratio(self.mlxhost, self.raw)


def table_rows(raw: dict[str, Any], http: dict[str, Any]) -> list[Row]:
    def tokens(key: str) -> str:
        def span(runs: list[Any]) -> str:
            flat = [t for run in runs for t in (run if isinstance(run, list) else [run])]
            low, high = min(flat), max(flat)
            return str(low) if low == high else f"{low}-{high}"

        return f"{span(raw[key]['tokens'])} / {span(http[key]['tokens'])}"

    rows: list[Row] = []
    if "c1" in raw:
        for label, figure in (
            ("single-stream decode tok/s", "decode_tok_s"),
            ("single-stream TTFT ms p50", "ttft_ms_p50"),
            ("single-stream end-to-end tok/s", "e2e_tok_s"),
        ):
            rows.append(Row(label, raw["c1"][figure], http["c1"][figure], tokens("c1")))
    for key in raw:
        if key != "c1":
            figure = "total_tok_s"
            rows.append(Row(f"total tok/s {key}", raw[key][figure], http[key][figure], tokens(key)))
    return rows


def print_report(plan: Plan, info: dict[str, Any], rows: list[Row]) -> None:
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
    header = ("measurement", "raw", "mlxhost", "ratio", "tokens/stream raw / mlxhost")
    lines = [
        (row.label, f"{row.raw:.1f}", f"{row.mlxhost:.1f}", f"{row.ratio:.3f}", row.tokens)
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    aligns = ["<", ">", ">", ">", "<"]

    def fmt(cells: Sequence[str]) -> str:
        padded = (f"{cell:{align}{width}}" for cell, align, width in zip(cells, aligns, widths))
        return "  ".join(padded).rstrip()

    print(fmt(header))
    print("  ".join("-" * width for width in widths))
    for line in lines:
        print(fmt(line))
    print()
    print("ratio = mlxhost / raw: above 1 is better for tok/s rows, worse for TTFT.")


def json_document(
    plan: Plan,
    info: dict[str, Any],
    raw: dict[str, Any],
    http: dict[str, Any],
    measured: dict[str, Any],
) -> dict[str, Any]:
    ratios: dict[str, float] = {}
    for key in raw:
        figure = "decode_tok_s" if key == "c1" else "total_tok_s"
        ratios[key] = ratio(http[key][figure], raw[key][figure])
    if "c1" in raw:
        ratios["c1_e2e"] = ratio(http["c1"]["e2e_tok_s"], raw["c1"]["e2e_tok_s"])
        ratios["ttft_p50"] = ratio(http["c1"]["ttft_ms_p50"], raw["c1"]["ttft_ms_p50"])
    return {
        **info,
        "settings": {
            "max_tokens": plan.max_tokens,
            "repeats": plan.repeats,
            "concurrency": plan.concurrency,
            "temperature": 0.0,
            "max_batch": plan.max_batch,
            "prefill_batch": PREFILL_BATCH,
        },
        "results": {"raw": raw, "mlxhost": http},
        "ratios": {"mlxhost_vs_raw": ratios},
        "ttft_ms": {
            "p50": {
                "raw": raw.get("c1", {}).get("ttft_ms_p50"),
                "mlxhost": http.get("c1", {}).get("ttft_ms_p50"),
            }
        },
        "server_engine_statistics": measured["server_engine"],
        "prompt_tokens_mlxhost": measured["prompt_tokens_mlxhost"],
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
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "reply_probe": asdict(probe),
    }

    measured = asyncio.run(measure(plan, raw, prompt, ids))
    if measured["prompt_tokens_mlxhost"] != len(ids):
        progress(
            f"warning: mlxhost counted {measured['prompt_tokens_mlxhost']} prompt tokens, raw "
            f"{len(ids)}: the two paths do not see the same prompt"
        )
    raw_summary, http_summary = summarize(measured["raw"]), summarize(measured["mlxhost"])
    rows = table_rows(raw_summary, http_summary)
    print_report(plan, info, rows)

    if plan.json_path is not None:
        document = json_document(plan, info, raw_summary, http_summary, measured)
        plan.json_path.parent.mkdir(parents=True, exist_ok=True)
        plan.json_path.write_text(json.dumps(json_safe(document), indent=2) + "\n")
        progress(f"wrote {plan.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
