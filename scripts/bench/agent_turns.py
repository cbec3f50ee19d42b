"""One turn of the agent scenario on each path (`bench.agent`): a cold prefill on raw mlx-lm in this
process, a streamed chat completion over HTTP (mlx_lm.server, mlxhost), and the mlxhost side: its
host on a --state-dir of its own, the kill of its worker, its restart, the prompt cache on disk."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import mlx_lm

from bench import hosts
from bench.agent_conversation import TOOLS
from bench.figures import progress, ratio
from bench.health import isolated_worker
from bench.plan import Plan
from bench.processes import wait_quiet
from bench.raw import RawMLX
from bench.settings import REQUEST_TIMEOUT_S
from bench.streams import CHAT_PATH, sse_chunks
from mlxhost.wire.layout import PROMPT_CACHE_DIR

READY_WAIT_S = 300.0  # a respawned worker, or a restarted host, on a slow machine
READY_POLL_S = 0.05


@dataclass(frozen=True)
class Turn:
    """One turn on one path."""

    path: str
    turn: int  # from 1
    event: str  # "first", "warm", "after_kill" or "after_restart"
    prompt_tokens: int
    cached_tokens: int | None  # None: not reported (raw has no cache)
    completion_tokens: int
    ttft_s: float
    total_s: float
    reply: str
    disk_bytes: int | None = None  # mlxhost: under <state-dir>/prompt-cache after the turn
    disk_files: int | None = None

    @property
    def hit_rate(self) -> float | None:
        return None if self.cached_tokens is None else ratio(self.cached_tokens, self.prompt_tokens)


def raw_turn(raw: RawMLX, messages: list[dict[str, Any]], max_tokens: int, turn: int, event: str) -> Turn:
    """A cold prefill of the whole prompt and a short greedy reply, in this process."""
    ids = list(raw.tokenizer.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True))
    start = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    tokens = 0
    for response in mlx_lm.stream_generate(
        raw.model, raw.tokenizer, ids, max_tokens=max_tokens, sampler=raw.sampler
    ):
        if first is None:
            first = time.perf_counter()
        text.append(response.text)
        tokens = response.generation_tokens
    end = time.perf_counter()
    return Turn(
        "raw", turn, event, len(ids), None, tokens, (first or end) - start, end - start, "".join(text)
    )


async def http_turn(
    client: httpx.AsyncClient,
    path: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    turn: int,
    event: str,
) -> Turn:
    """One streamed chat completion of the conversation so far, the tools declared."""
    body = {
        "messages": messages,
        "tools": TOOLS,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first: float | None = None
    usage: dict[str, Any] | None = None
    text: list[str] = []
    async with client.stream("POST", CHAT_PATH, json=body) as response:
        if response.status_code != 200:
            await response.aread()
            raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text}")
        async for now, chunk in sse_chunks(response):
            if chunk is None:
                continue
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                answered = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                if first is None and (answered or delta.get("tool_calls") or choice.get("finish_reason")):
                    first = now
    end = time.perf_counter()
    if usage is None:
        raise RuntimeError(f"{path}: the stream ended without a usage chunk")
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens")
    return Turn(
        path, turn, event, int(usage["prompt_tokens"]), None if cached is None else int(cached),
        int(usage["completion_tokens"]), (first or end) - start, end - start, "".join(text),
    )  # fmt: skip


def prompt_cache_on_disk(state_dir: Path) -> tuple[int, int]:
    """Bytes and files under <state-dir>/prompt-cache (0, 0 while there is none)."""
    folder = state_dir / PROMPT_CACHE_DIR
    sizes = [f.stat().st_size for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []
    return sum(sizes), len(sizes)


async def wait_new_worker(client: httpx.AsyncClient, killed: int) -> dict[str, Any]:
    """/health until a worker other than `killed` is ready; what it says of it."""
    with anyio.fail_after(READY_WAIT_S):
        while True:
            try:
                worker = await isolated_worker(client)
                if worker.get("state") == "ready" and worker.get("pid") not in (None, killed):
                    return worker
            except (httpx.TransportError, RuntimeError, ValueError):
                pass  # between workers /health may list none
            await anyio.sleep(READY_POLL_S)


@dataclass
class MlxhostSide:
    """The mlxhost path: its host (replaced on restart), a client of it, and its state dir."""

    plan: Plan
    state_dir: Path
    options: list[str]
    host: hosts.Host | None = None
    client: httpx.AsyncClient | None = None
    events: dict[str, float] = field(default_factory=dict)  # kill_to_ready_s, restart_to_ready_s, ...

    async def start(self) -> None:
        self.host = await anyio.to_thread.run_sync(
            hosts.start, "agent", self.plan.model_path, self.plan.max_batch, self.options
        )
        self.client = httpx.AsyncClient(base_url=self.host.url, timeout=REQUEST_TIMEOUT_S)

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.host is not None:
            host, self.host = self.host, None
            await anyio.to_thread.run_sync(host.stop)

    async def kill_worker(self) -> None:
        assert self.client is not None
        # The kill finds the worker idle (done writing what it writes after a turn), as an agent's
        # next turn, seconds later, would; a kill mid-write is another test's business.
        await self.wait_quiet("quiet_before_kill_s")
        before = await isolated_worker(self.client)
        pid = int(before["pid"])
        killed = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        after = await wait_new_worker(self.client, pid)
        self.events["kill_to_ready_s"] = time.perf_counter() - killed
        self.events["respawn_ready_s"] = after.get("ready_s") or float("nan")
        ready = self.events["kill_to_ready_s"]
        progress(f"  mlxhost: killed worker {pid}; pid {after.get('pid')} ready {ready:.2f} s later")
        await self.wait_quiet("quiet_after_kill_s")

    async def restart(self) -> None:
        began = time.perf_counter()
        await self.stop()
        stopped = time.perf_counter()
        await self.start()
        assert self.client is not None
        await wait_new_worker(self.client, killed=0)  # the turn measures a prefill, not a load
        await self.wait_quiet("quiet_after_restart_s")
        self.events["stop_s"] = stopped - began
        self.events["start_to_ready_s"] = time.perf_counter() - stopped
        progress(
            f"  mlxhost: stopped in {self.events['stop_s']:.2f} s, started again on the same "
            f"--state-dir, ready in {self.events['start_to_ready_s']:.2f} s"
        )

    async def wait_quiet(self, event: str) -> None:
        """Until the host is idle (a new host or worker spawns its standby interpreter once ready),
        so that a turn's prefill does not share two cores with it; the wait goes in `events`."""
        assert self.host is not None
        self.events[event] = await anyio.to_thread.run_sync(wait_quiet, self.host.pid)

    async def turn(self, messages: list[dict[str, Any]], max_tokens: int, turn_no: int, event: str) -> Turn:
        assert self.client is not None
        result = await http_turn(self.client, "mlxhost", messages, max_tokens, turn_no, event)
        disk, files = prompt_cache_on_disk(self.state_dir)
        return Turn(**{**asdict(result), "disk_bytes": disk, "disk_files": files})
