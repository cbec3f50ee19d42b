"""The agent scenario (issue 14, part 5): a coding agent's conversation, re-sent whole every turn,
and how long each turn waits for its first token on raw mlx-lm, mlx_lm.server and mlxhost; then,
on mlxhost only, a turn after its worker was killed and a turn after the host was restarted.

The conversation (`Conversation`) is deterministic but for the model's replies: a system prompt
of about SYSTEM_TOKENS tokens (tool documentation, repeated, counted with the model's tokenizer as
the chat template renders it, the declared tools included), the tools declared in every request,
and turns that alternate between an agent's two kinds: the model's reply came with a tool call and
the turn carries the tool's result (OpenAI chat format: an assistant message with `tool_calls`,
then a `role: tool` message), or the user writes again. Every turn re-sends the whole history plus
the model's previous reply, as agents do. Each path keeps its own conversation, with its own
replies (a random model's greedy replies may differ by path): so prompt lengths are reported per
path. Short replies (max_tokens AGENT_MAX_TOKENS), greedy, eos honoured.

Paths:
  raw            mlx-lm in this process, no cache: a cold prefill of the whole prompt every turn.
  mlx_lm.server  `python -m mlx_lm server` with its own prompt cache (started here, as
                 `bench.mlx_lm_server` does).
  mlxhost        an isolated server with a temporary --state-dir of its own. After the
                 conversation's turns: kill -9 of its worker, /health until a new one is ready,
                 the next turn; then SIGTERM to the host, a new host on the same --state-dir, the
                 next turn. raw and mlx_lm.server run those two turns as ordinary ones.
Before its first turn, before the kill and after it, and after the restart, the bench waits until
mlxhost's processes are idle (`bench.processes.wait_quiet`: a new worker or host spawns a standby
interpreter; a worker may write caches to disk after a turn), so that a turn's prefill does not
share two cores with that work; the waits are in `events`. The paths take every turn in rotating
order. TTFT is the request's start (raw: the call) to the
first chunk with content, reasoning, a tool call or a finish reason (a role-only chunk does not
count). Hit rate: usage.prompt_tokens_details.cached_tokens / usage.prompt_tokens (mlxhost and
mlx_lm.server both report it). Bytes on disk: every file under <state-dir>/prompt-cache after each
mlxhost turn (none before the disk tier exists).

Target (issue 14): mlxhost's TTFT <= 0.3 x a cold prefill of the same length on every turn after the
first, the turn after the kill and the turn after the restart included. The cold prefill is raw's
TTFT at the same turn, scaled by the prompt lengths' ratio (prefill is close to linear in the
length at these sizes; the raw and mlxhost prompts differ by a few tokens of reply).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import mlx_lm

from bench import hosts
from bench.figures import median, number, print_table, progress, ratio, verdict
from bench.health import isolated_worker
from bench.mlx_lm_server import start_mlx_lm_server
from bench.plan import Plan
from bench.processes import wait_quiet
from bench.raw import RawMLX
from bench.settings import REQUEST_TIMEOUT_S
from bench.streams import CHAT_PATH, sse_chunks
from mlxhost.wire.layout import PROMPT_CACHE_DIR

# By --quick: conversation turns before the kill (then one after it, one after the restart), the
# system prompt's size in tokens, and each reply's max_tokens. A cold prefill of the bench model
# on this CPU costs some 35-40 ms a token: the full scenario's raw path alone takes minutes.
AGENT_TURNS = {False: 12, True: 4}
SYSTEM_TOKENS = {False: 2000, True: 800}
AGENT_MAX_TOKENS = {False: 16, True: 8}
TTFT_VS_COLD_MAX = 0.3  # mlxhost / cold prefill of the same length, every turn after the first
AGENT_PATHS = ("raw", "mlx_lm_server", "mlxhost")
AGENT_LABELS = {"raw": "raw (cold)", "mlx_lm_server": "mlx_lm.server", "mlxhost": "mlxhost"}
READY_WAIT_S = 300.0  # a respawned worker, or a restarted host, on a slow machine
READY_POLL_S = 0.05

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": doc} for arg, doc in args.items()},
                "required": list(args),
            },
        },
    }
    for name, description, args in (
        ("read_file", "Read a file of the repository.", {"path": "path from the repository root"}),
        ("list_dir", "List a directory.", {"path": "path from the repository root"}),
        ("search_code", "Search the code for a string.", {"query": "the text to look for"}),
        ("run_shell", "Run a shell command.", {"command": "the command line"}),
        (
            "edit_file",
            "Replace text in a file.",
            {"path": "the file", "old": "the text", "new": "its replacement"},
        ),
    )
]

PREAMBLE = (
    "You are a coding agent working in a Python repository. You answer briefly, and you use the "
    "tools below to read, search, run and edit code. Never guess the content of a file: read it."
)
# The documentation the system prompt repeats until it is long enough (agents' system prompts are
# mostly such text).
TOOL_DOCS = (
    (
        "read_file returns the whole file with line numbers. Read a file before you edit it, and read "
        "it again after an edit if you need its new line numbers. Large files are cut at 2,000 lines; "
        "ask for a range with the path and the first line when you need more."
    ),
    (
        "list_dir lists the entries of one directory, folders first, with their sizes. It does not "
        "recurse: list the folders you need one by one. Hidden files are listed too."
    ),
    (
        "search_code finds a string in every tracked file and returns the matching lines with their "
        "paths and line numbers, at most 200 of them. Prefer a specific string to a common word."
    ),
    (
        "run_shell runs one command in the repository root with a timeout of two minutes and returns "
        "its exit status and its output, the last 10,000 characters of it. It cannot read from stdin."
    ),
    (
        "edit_file replaces one exact occurrence of a text in a file. The old text must match exactly, "
        "whitespace included, and appear once; otherwise nothing is changed and you are told why."
    ),
)
USER_TURNS = (
    "The test suite fails on test_prompt_cache. Find out why and fix it.",
    "Good. Does the same bug exist in the Responses API path?",
    "Run the unit tests again and tell me what still fails.",
    "Add a test for the case you fixed, next to the existing ones.",
    "Now check that the linter is happy with your change.",
    "Summarise what you changed, in two sentences.",
    "One more thing: the README still names the old option. Fix it.",
)
TOOL_STEPS = (
    (
        "search_code",
        {"query": "def test_prompt_cache"},
        "tests/unit/test_prompt_cache.py:41: def test_prompt_cache_hit():",
    ),
    (
        "read_file",
        {"path": "mlxhost/worker/prompt_cache.py"},
        '1 | """The prompt cache."""\n2 | \n3 | from __future__ import annotations',
    ),
    ("run_shell", {"command": "pytest -q tests/unit"}, "exit 1\n1 failed, 212 passed in 9.81s"),
    (
        "edit_file",
        {"path": "mlxhost/worker/prompt_cache.py", "old": "len(rest)", "new": "len(rest) - 1"},
        "edited: 1 replacement",
    ),
    (
        "list_dir",
        {"path": "tests/unit"},
        "test_prompt_cache.py 4.1 kB\ntest_reading.py 7.9 kB\ntest_wire.py 3.2 kB",
    ),
    ("run_shell", {"command": "ruff check mlxhost"}, "exit 0\nAll checks passed!"),
    ("read_file", {"path": "README.md"}, "1 | # mlxhost\n2 | \n3 | A host for MLX models."),
)


def system_prompt(raw: RawMLX, target_tokens: int) -> tuple[str, int]:
    """The preamble and as many tool notes as bring the rendered system turn (the tools declared
    included) to `target_tokens`; and its length in tokens."""
    parts = [PREAMBLE]

    def rendered() -> int:
        messages = [{"role": "system", "content": "\n\n".join(parts)}]
        return len(raw.tokenizer.apply_chat_template(messages, tools=TOOLS))

    count = rendered()
    while count < target_tokens:
        note = len(parts)
        parts.append(f"Note {note}. {TOOL_DOCS[(note - 1) % len(TOOL_DOCS)]}")
        count = rendered()
    return "\n\n".join(parts), count


class Conversation:
    """One path's conversation: what turn `n` sends is the history, the model's previous reply,
    and the turn's new message (a tool result after a tool call, or the user's next words)."""

    def __init__(self, system: str) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.turns = 0

    def next_request(self, previous_reply: str | None) -> list[dict[str, Any]]:
        turn = self.turns
        if turn == 0:
            self.messages.append({"role": "user", "content": USER_TURNS[0]})
        elif turn % 2 == 1:  # the reply came with a tool call; its result follows
            name, arguments, result = TOOL_STEPS[(turn // 2) % len(TOOL_STEPS)]
            call_id = f"call_{turn}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            self.messages.append({"role": "assistant", "content": previous_reply or "", "tool_calls": [call]})
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            self.messages.append({"role": "assistant", "content": previous_reply or ""})
            self.messages.append({"role": "user", "content": USER_TURNS[(turn // 2) % len(USER_TURNS)]})
        self.turns += 1
        return copy.deepcopy(self.messages)  # a server may not change what the next turn sends


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


async def measure_agent(plan: Plan, raw: RawMLX) -> dict[str, Any]:
    """The whole scenario, its servers stopped however it ends; the summary. The raw turns run in
    this thread, which made `raw`."""
    turns, max_tokens = AGENT_TURNS[plan.quick], AGENT_MAX_TOKENS[plan.quick]
    system, system_tokens = system_prompt(raw, SYSTEM_TOKENS[plan.quick])
    progress(
        f"agent: {turns} turns, then one after a worker kill and one after a host restart; a "
        f"{system_tokens}-token system prompt (the {len(TOOLS)} tools included), max_tokens {max_tokens}"
    )
    raw.stream(raw.encode("hello"), 2)  # warm-up
    with tempfile.TemporaryDirectory(prefix="mlxhost-bench-agent-") as folder:
        state_dir = Path(folder) / "state"
        options = [*hosts.server_options("isolated", plan), f"--state-dir={state_dir}"]
        mlxhost = MlxhostSide(plan, state_dir, options)
        progress(f"agent: starting mlx_lm.server, and mlxhost on {state_dir}")
        peer = await anyio.to_thread.run_sync(
            start_mlx_lm_server,
            plan.model_path,
            plan.max_batch,
            max_tokens,
            plan.mlx_lm_server_backlog,
            "hello",
        )
        try:
            await mlxhost.start()
            async with httpx.AsyncClient(base_url=peer.url, timeout=REQUEST_TIMEOUT_S) as peer_client:
                assert mlxhost.client is not None
                await mlxhost.client.post(
                    CHAT_PATH, json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 1}
                )
                await mlxhost.wait_quiet("quiet_after_start_s")
                records = await _conversation(plan, raw, system, turns, max_tokens, mlxhost, peer_client)
        finally:
            await mlxhost.stop()
            await anyio.to_thread.run_sync(peer.stop)
        disk, files = prompt_cache_on_disk(state_dir)
    return agent_summary(records, mlxhost.events, system_tokens, turns, max_tokens, disk, files, options[:-1])


async def _conversation(
    plan: Plan,
    raw: RawMLX,
    system: str,
    turns: int,
    max_tokens: int,
    mlxhost: MlxhostSide,
    peer: httpx.AsyncClient,
) -> list[Turn]:
    conversations = {path: Conversation(system) for path in AGENT_PATHS}
    replies: dict[str, str | None] = dict.fromkeys(AGENT_PATHS)
    records: list[Turn] = []
    for index in range(turns + 2):
        turn_no = index + 1
        event = "first" if index == 0 else "warm"
        if index == turns:
            event = "after_kill"
            await mlxhost.kill_worker()
        elif index == turns + 1:
            event = "after_restart"
            await mlxhost.restart()
        shift = index % len(AGENT_PATHS)
        for path in AGENT_PATHS[shift:] + AGENT_PATHS[:shift]:
            messages = conversations[path].next_request(replies[path])
            if path == "raw":
                record = raw_turn(raw, messages, max_tokens, turn_no, event)
            elif path == "mlx_lm_server":
                record = await http_turn(peer, path, messages, max_tokens, turn_no, event)
            else:
                record = await mlxhost.turn(messages, max_tokens, turn_no, event)
            replies[path] = record.reply
            records.append(record)
        progress("  agent " + describe_turn([r for r in records if r.turn == turn_no]))
    return records


def describe_turn(records: list[Turn]) -> str:
    first = records[0]
    parts = []
    for record in sorted(records, key=lambda r: AGENT_PATHS.index(r.path)):
        hit = "" if record.hit_rate is None else f", hit {record.hit_rate:.2f}"
        parts.append(
            f"{AGENT_LABELS[record.path]} {record.ttft_s * 1e3:.0f} ms ({record.prompt_tokens} tok{hit})"
        )
    return f"turn {first.turn} ({first.event}): TTFT " + "; ".join(parts)


def vs_cold(record: Turn, cold: Turn) -> float:
    """A turn's TTFT / a cold prefill of its prompt's length: raw's TTFT at the same turn, scaled
    by the prompt lengths."""
    return ratio(record.ttft_s, cold.ttft_s * ratio(record.prompt_tokens, cold.prompt_tokens))


def agent_summary(
    records: list[Turn],
    events: dict[str, float],
    system_tokens: int,
    turns: int,
    max_tokens: int,
    disk_bytes: int,
    disk_files: int,
    host_options: list[str],
) -> dict[str, Any]:
    by_turn: list[dict[str, Any]] = []
    for turn_no in sorted({r.turn for r in records}):
        row = {r.path: r for r in records if r.turn == turn_no}
        cold = row["raw"]
        by_turn.append(
            {
                "turn": turn_no,
                "event": cold.event,
                "prompt_tokens": {path: r.prompt_tokens for path, r in row.items()},
                "ttft_ms": {path: r.ttft_s * 1e3 for path, r in row.items()},
                "cold_ttft_ms_at_mlxhost_length": cold.ttft_s
                * 1e3
                * ratio(row["mlxhost"].prompt_tokens, cold.prompt_tokens),
                "mlxhost_vs_cold": vs_cold(row["mlxhost"], cold),
                "mlx_lm_server_vs_cold": vs_cold(row["mlx_lm_server"], cold),
                "cached_tokens": {path: r.cached_tokens for path, r in row.items() if path != "raw"},
                "hit_rate": {path: r.hit_rate for path, r in row.items() if path != "raw"},
                "completion_tokens": {path: r.completion_tokens for path, r in row.items()},
                "disk_bytes": row["mlxhost"].disk_bytes,
                "disk_files": row["mlxhost"].disk_files,
            }
        )
    later = [t for t in by_turn if t["turn"] > 1]
    ratios = [t["mlxhost_vs_cold"] for t in later]
    by_event = {t["event"]: t for t in by_turn}
    warm = [t for t in later if t["event"] == "warm"]
    ok_by_turn = {t["turn"]: t["mlxhost_vs_cold"] <= TTFT_VS_COLD_MAX for t in later}
    return {
        "settings": {
            "turns": turns,
            "extra_turns": ["after_kill", "after_restart"],
            "system_prompt_tokens": system_tokens,
            "tools": len(TOOLS),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "host_options": host_options,  # and a temporary --state-dir
        },
        "turns": by_turn,
        "mlxhost_vs_cold": {
            "warm_median": median([t["mlxhost_vs_cold"] for t in warm]),
            "warm_max": max((t["mlxhost_vs_cold"] for t in warm), default=float("nan")),
            "after_kill": by_event["after_kill"]["mlxhost_vs_cold"],
            "after_restart": by_event["after_restart"]["mlxhost_vs_cold"],
            "max_after_first": max(ratios, default=float("nan")),
        },
        "mlx_lm_server_vs_cold": {
            "warm_median": median([t["mlx_lm_server_vs_cold"] for t in warm]),
            "warm_max": max((t["mlx_lm_server_vs_cold"] for t in warm), default=float("nan")),
        },
        "hit_rate": {
            path: {
                "warm_median": median([t["hit_rate"][path] or 0.0 for t in warm]),
                "after_kill": by_event["after_kill"]["hit_rate"][path],
                "after_restart": by_event["after_restart"]["hit_rate"][path],
            }
            for path in ("mlxhost", "mlx_lm_server")
        },
        "disk_bytes": disk_bytes,
        "disk_files": disk_files,
        "events": events,
        "target": TTFT_VS_COLD_MAX,
        "ok_by_turn": ok_by_turn,
        "meets_target": all(ok_by_turn.values()) if ok_by_turn else None,
        "runs": [{**asdict(r), "hit_rate": r.hit_rate} for r in records],
    }


def agent_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The JSON's top-level keys of this module (beside the whole summary, `agent`)."""
    return {
        "agent": summary,
        "agent_ttft_vs_cold": summary["mlxhost_vs_cold"],
        "agent_hit_rate": summary["hit_rate"],
        "agent_disk_bytes": summary["disk_bytes"],
    }


def print_agent(summary: dict[str, Any]) -> None:
    settings = summary["settings"]
    print()
    print(
        f"agent scenario ({settings['turns']} turns, then one after kill -9 of mlxhost's worker and one "
        f"after a host restart on the same --state-dir; a {settings['system_prompt_tokens']}-token "
        f"system prompt with {settings['tools']} tools, tool calls and results; max_tokens "
        f"{settings['max_tokens']}, greedy):"
    )
    header = (
        "turn", "event", "prompt tok (raw/server/mlxhost)", "raw cold ms", "mlx_lm.server ms",
        "mlxhost ms", "server/cold", "mlxhost/cold", "server hit", "mlxhost hit", "disk bytes",
    )  # fmt: skip
    lines = []
    for t in summary["turns"]:
        tokens, ttft, hit = t["prompt_tokens"], t["ttft_ms"], t["hit_rate"]
        flag = "" if t["turn"] == 1 or t["mlxhost_vs_cold"] <= TTFT_VS_COLD_MAX else " FAIL"
        lines.append(
            (
                str(t["turn"]),
                t["event"],
                "/".join(str(tokens[p]) for p in AGENT_PATHS),
                number(ttft["raw"]),
                number(ttft["mlx_lm_server"]),
                number(ttft["mlxhost"]),
                number(t["mlx_lm_server_vs_cold"], 3),
                number(t["mlxhost_vs_cold"], 3) + flag,
                number(hit["mlx_lm_server"], 2),
                number(hit["mlxhost"], 2),
                str(t["disk_bytes"]),
            )
        )
    print_table(header, lines, ["<", "<", "<", *">" * 8], indent="  ")
    kill_ready = summary["events"].get("kill_to_ready_s")
    restart_ready = summary["events"].get("start_to_ready_s")
    print(
        f"  target: mlxhost TTFT <= {TTFT_VS_COLD_MAX:g} x a cold prefill of the same length on every "
        f"turn after the first: {verdict(summary['meets_target'])} (after the kill "
        f"{number(summary['mlxhost_vs_cold']['after_kill'], 3)}, after the restart "
        f"{number(summary['mlxhost_vs_cold']['after_restart'], 3)})"
    )
    print(
        f"  prompt cache on disk after the run: {summary['disk_bytes']:,} bytes in "
        f"{summary['disk_files']} file(s); worker back {number(kill_ready, 2)} s after the kill; "
        f"host ready {number(restart_ready, 2)} s after its restart"
    )
    print(
        "  (cold: raw's TTFT at the same turn, scaled by the prompt lengths; hit: usage cached_tokens "
        "/ prompt_tokens)"
    )
