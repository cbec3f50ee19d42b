"""--peers: mlxhost against its two peers, vllm-mlx and mlx_lm.server, on one model, in paired
rounds; the figures are `bench.peers_figures`'.

The three servers start one after the other, each loading on a quiet machine: mlxhost as the bench
starts its isolated server (`bench.hosts`), vllm-mlx (`bench.vllm_mlx`: skipped, with the reason,
where it is not installed and --install-vllm-mlx was not given, or it cannot be installed or
started) and mlx_lm.server (`bench.mlx_lm_server`). Each is warmed up: one stream, then one short
batch at the highest concurrency. Then, at each concurrency N, ROUNDS rounds (5; 1 with --smoke):
in each round every server in turn gets N streams at once, the order rotating by one from one round
to the next, so that a machine that drifts favours none of them.

How like is compared with like:
- Distinct prompts. Every stream of every round has a prompt of its own (in a round the three
  servers get the same set), each starting with a tag of its own (`candidate`), so that a prompt
  cache finds no more of it than the chat template's first tokens and a character or two: each
  response's usage.prompt_tokens_details.cached_tokens, where a server sends it (mlxhost and
  mlx_lm.server), is summed in the JSON. vllm-mlx saves its prefix cache to disk at
  shutdown and loads it at start; it runs with a temporary HOME, so no run sees another's.
- Exactly max_tokens. None of the three takes `ignore_eos` (mlxhost and mlx_lm.server have no such
  field, and vllm-mlx 0.6.0's chat requests neither), so the prompts are chosen for it: each
  candidate's greedy reply is generated here first (mlx-lm's BatchGenerator on the same weights, eos
  as its stop token), and only those that run to max_tokens without eos are used. Greedy decoding
  then runs to max_tokens on every server. Every response's completion_tokens is checked all the
  same, and the responses that did not run to max_tokens are counted per server and concurrency
  (the table's last column; JSON figures.<server>.cN.short_responses); rates use the tokens actually
  generated either way.
- One usage per response. Tokens are counted from each stream's usage, taken once per response
  (`peers_figures.one_usage`): vllm-mlx sends its usage chunk twice.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from mlx_lm.generate import BatchGenerator

from bench import hosts
from bench.figures import progress
from bench.mlx_lm_server import start_mlx_lm_server
from bench.peers_figures import LABELS, PeerBatch, PeerServer, PeersSummary, in_turn, one_usage, summarize
from bench.plan import Plan
from bench.raw import PROMPTS, RawMLX
from bench.settings import PREFILL_BATCH, REQUEST_TIMEOUT_S
from bench.streams import chat_body, chat_stream, gather
from bench.vllm_mlx import VllmMlxUnavailable, start_vllm_mlx

ROUNDS = 5
WARM_TOKENS = 16
PROBE_LIMIT = 4  # candidates probed, at most, per prompt needed
PROBE_BATCH = 64  # rows of the probe's BatchGenerator


@dataclass
class Peer:
    """A running server of the comparison: where it listens, what its requests add, how it runs."""

    url: str | None  # None: skipped (the reason is in its record)
    record: PeerServer
    extra: dict[str, Any] = field(default_factory=dict)


def candidate(index: int) -> str:
    """A distinct prompt, told apart from the first character on: a prompt cache matches the
    longest shared prefix, which "... (request 12)" after "... (request 1)" would make most of it."""
    tag = hashlib.sha256(str(index).encode()).hexdigest()[:8]
    return f"{tag}: {PROMPTS[index % len(PROMPTS)]}"


def choose_prompts(raw: RawMLX, count: int, max_tokens: int) -> list[str]:
    """`count` distinct prompts whose greedy reply runs to max_tokens without eos (see the
    module's docstring); with too few such candidates, the rest as they come, and a warning."""
    chosen: list[str] = []
    others: list[str] = []
    tried = 0
    while len(chosen) < count and tried < count * PROBE_LIMIT:
        # What is still missing, and a few more for the replies that stop at eos.
        texts = [candidate(tried + i) for i in range(count - len(chosen) + 8)]
        tried += len(texts)
        for text, full in zip(texts, reaches_max_tokens(raw, texts, max_tokens), strict=True):
            (chosen if full else others).append(text)
    if len(chosen) < count:
        progress(
            f"warning: only {len(chosen)} of {tried} prompts run to max_tokens {max_tokens} on this "
            "model; some responses will be short (counted in the table)"
        )
        chosen += others[: count - len(chosen)]
    return chosen[:count]


def reaches_max_tokens(raw: RawMLX, texts: Sequence[str], max_tokens: int) -> list[bool]:
    """For each prompt, whether its greedy reply runs to max_tokens without eos."""
    stops = [[token] for token in raw.tokenizer.eos_token_ids]
    generator = BatchGenerator(
        raw.model,
        stop_tokens=stops,
        sampler=raw.sampler,
        completion_batch_size=PROBE_BATCH,
        prefill_batch_size=PREFILL_BATCH,
    )
    try:
        uids = generator.insert([raw.encode(text) for text in texts], max_tokens=[max_tokens] * len(texts))
        finished: dict[int, str] = {}
        while len(finished) < len(uids):
            _, responses = generator.next()
            for response in responses:
                if response.finish_reason is not None:
                    finished[response.uid] = response.finish_reason
    finally:
        generator.close()
    return [finished[uid] == "length" for uid in uids]


async def read_response(
    client: httpx.AsyncClient, prompt: str, max_tokens: int, extra: Mapping[str, Any]
) -> Mapping[str, Any]:
    """One streamed chat completion read to [DONE]; its one usage."""
    body = {
        **chat_body(prompt, max_tokens, stream=True),
        "stream_options": {"include_usage": True},
        **extra,
    }
    usages: list[Mapping[str, Any]] = []
    done = False
    async with chat_stream(client, body) as chunks:
        async for _, chunk in chunks:
            if chunk is None:
                done = True
            elif chunk.get("usage"):
                usages.append(chunk["usage"])
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    return one_usage(usages)


async def run_batch(
    name: str, client: httpx.AsyncClient, peer: Peer, prompts: Sequence[str], max_tokens: int, number: int
) -> PeerBatch:
    """The prompts' streams at once, timed from the first start to the last end."""
    start = time.perf_counter()
    usages = await gather(
        [functools.partial(read_response, client, p, max_tokens, peer.extra) for p in prompts]
    )
    wall = time.perf_counter() - start
    return PeerBatch(
        server=name,
        concurrency=len(prompts),
        round=number,
        wall_s=wall,
        completion_tokens=[int(u["completion_tokens"]) for u in usages],
        prompt_tokens=[int(u["prompt_tokens"]) for u in usages],
        cached_tokens=[(u.get("prompt_tokens_details") or {}).get("cached_tokens") for u in usages],
    )


def own_versions() -> dict[str, str]:
    return {package: importlib.metadata.version(package) for package in ("mlx", "mlx-lm")}


async def start_peers(plan: Plan, stack: contextlib.ExitStack, warm: str) -> dict[str, Peer]:
    """The three servers, one after the other, in PEERS' order; vllm-mlx with no url and the
    reason in its record where it could not be had. Each is stopped by `stack`."""
    peers: dict[str, Peer] = {}
    progress("peers: starting mlxhost")
    began = time.perf_counter()
    options = hosts.server_options("isolated", plan)
    host = await anyio.to_thread.run_sync(hosts.start, "isolated", plan.model_path, plan.max_batch, options)
    stack.enter_context(hosts.running(host))
    command = ["mlxhost", "serve", *options, f"--model={plan.model_path}", f"--max-batch={plan.max_batch}"]
    peers["mlxhost"] = Peer(host.url, PeerServer(command, own_versions(), time.perf_counter() - began))

    progress("peers: starting vllm-mlx")
    try:
        vllm, versions = await anyio.to_thread.run_sync(
            start_vllm_mlx, plan.model_path, plan.max_batch, plan.max_tokens, warm, plan.install_vllm_mlx
        )
    except VllmMlxUnavailable as exc:
        progress(f"vllm-mlx: skipped: {exc}")
        peers["vllm_mlx"] = Peer(None, PeerServer(None, {}, None, skipped=str(exc)))
    else:
        stack.callback(vllm.stop)
        record = PeerServer(vllm.command, versions, vllm.ready_s)
        peers["vllm_mlx"] = Peer(vllm.url, record, vllm.body_extra())

    progress("peers: starting mlx_lm.server")
    server = await anyio.to_thread.run_sync(
        start_mlx_lm_server, plan.model_path, plan.max_batch, plan.max_tokens,
        plan.mlx_lm_server_backlog, warm,
    )  # fmt: skip
    stack.callback(server.stop)
    peers["mlx_lm_server"] = Peer(server.url, PeerServer(server.command, own_versions(), server.ready_s))
    return peers


async def measure_peers(plan: Plan, raw: RawMLX) -> PeersSummary:
    """Every round of every concurrency on every server that could be had; the summary."""
    rounds = plan.rounds(ROUNDS)
    needed = rounds * sum(plan.concurrency)
    progress(
        f"peers: choosing {needed} distinct prompts whose greedy reply runs to max_tokens {plan.max_tokens}"
    )
    prompts = iter(choose_prompts(raw, needed, plan.max_tokens))
    sets = {
        (level, r): [next(prompts) for _ in range(level)] for level in plan.concurrency for r in range(rounds)
    }
    top = max(plan.concurrency)
    warm = [f"Warm-up request {i}: say anything." for i in range(top + 1)]

    runs: list[PeerBatch] = []
    with contextlib.ExitStack() as stack:
        peers = await start_peers(plan, stack, warm[0])
        running = {name: peer for name, peer in peers.items() if peer.url is not None}
        limits = httpx.Limits(max_connections=top + 4, max_keepalive_connections=top + 4)
        async with contextlib.AsyncExitStack() as clients:
            http = {}
            for name, peer in running.items():
                client = httpx.AsyncClient(base_url=peer.url, timeout=REQUEST_TIMEOUT_S, limits=limits)
                http[name] = await clients.enter_async_context(client)
                progress(f"peers: {LABELS[name]} ready on {peer.url}; warming up")
                await run_batch(name, http[name], peer, warm[:1], plan.max_tokens, -1)
                await run_batch(name, http[name], peer, warm[1:], min(WARM_TOKENS, plan.max_tokens), -1)
            for level in plan.concurrency:
                for number in range(rounds):
                    done = []
                    for name in in_turn(number):
                        if name in running:
                            batch = await run_batch(
                                name, http[name], running[name], sets[level, number], plan.max_tokens, number
                            )
                            runs.append(batch)
                            done.append(f"{LABELS[name]} {batch.tok_s:.1f}")
                    progress(f"peers c{level} round {number + 1}/{rounds}: {', '.join(done)} tok/s")
    servers = {name: peer.record for name, peer in peers.items()}
    return summarize(runs, servers, plan.max_tokens, rounds, plan.concurrency)
