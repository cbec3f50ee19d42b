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

import tempfile
from pathlib import Path

import anyio
import httpx

from bench import hosts
from bench.agent_conversation import TOOLS, Conversation, system_prompt
from bench.agent_turns import MlxhostSide, Turn, http_turn, prompt_cache_on_disk, raw_turn
from bench.figures import median, number, print_table, progress, ratio, verdict
from bench.mlx_lm_server import start_mlx_lm_server
from bench.plan import Plan
from bench.raw import RawMLX
from bench.results.parts import (
    AgentSettings,
    AgentSummary,
    AgentTurn,
    HitRates,
    PeerVsCold,
    VsCold,
)
from bench.settings import REQUEST_TIMEOUT_S
from bench.streams import CHAT_PATH

# By --quick: conversation turns before the kill (then one after it, one after the restart), the
# system prompt's size in tokens, and each reply's max_tokens. A cold prefill of the bench model
# on this CPU costs some 35-40 ms a token: the full scenario's raw path alone takes minutes.
AGENT_TURNS = {False: 12, True: 4}
SYSTEM_TOKENS = {False: 2000, True: 800}
AGENT_MAX_TOKENS = {False: 16, True: 8}
TTFT_VS_COLD_MAX = 0.3  # mlxhost / cold prefill of the same length, every turn after the first
AGENT_PATHS = ("raw", "mlx_lm_server", "mlxhost")
AGENT_LABELS = {"raw": "raw (cold)", "mlx_lm_server": "mlx_lm.server", "mlxhost": "mlxhost"}


async def measure_agent(plan: Plan, raw: RawMLX) -> AgentSummary:
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
) -> AgentSummary:
    by_turn: list[AgentTurn] = []
    for turn_no in sorted({r.turn for r in records}):
        row = {r.path: r for r in records if r.turn == turn_no}
        cold = row["raw"]
        by_turn.append(
            AgentTurn(
                turn=turn_no,
                event=cold.event,
                prompt_tokens={path: r.prompt_tokens for path, r in row.items()},
                ttft_ms={path: r.ttft_s * 1e3 for path, r in row.items()},
                cold_ttft_ms_at_mlxhost_length=cold.ttft_s
                * 1e3
                * ratio(row["mlxhost"].prompt_tokens, cold.prompt_tokens),
                mlxhost_vs_cold=vs_cold(row["mlxhost"], cold),
                mlx_lm_server_vs_cold=vs_cold(row["mlx_lm_server"], cold),
                cached_tokens={path: r.cached_tokens for path, r in row.items() if path != "raw"},
                hit_rate={path: r.hit_rate for path, r in row.items() if path != "raw"},
                completion_tokens={path: r.completion_tokens for path, r in row.items()},
                disk_bytes=row["mlxhost"].disk_bytes,
                disk_files=row["mlxhost"].disk_files,
            )
        )
    later = [t for t in by_turn if t.turn > 1]
    ratios = [t.mlxhost_vs_cold for t in later]
    by_event = {t.event: t for t in by_turn}
    warm = [t for t in later if t.event == "warm"]
    ok_by_turn = {t.turn: t.mlxhost_vs_cold <= TTFT_VS_COLD_MAX for t in later}
    return AgentSummary(
        settings=AgentSettings(
            turns=turns,
            extra_turns=["after_kill", "after_restart"],
            system_prompt_tokens=system_tokens,
            tools=len(TOOLS),
            max_tokens=max_tokens,
            temperature=0.0,
            host_options=host_options,
        ),
        turns=by_turn,
        mlxhost_vs_cold=VsCold(
            warm_median=median([t.mlxhost_vs_cold for t in warm]),
            warm_max=max((t.mlxhost_vs_cold for t in warm), default=float("nan")),
            after_kill=by_event["after_kill"].mlxhost_vs_cold,
            after_restart=by_event["after_restart"].mlxhost_vs_cold,
            max_after_first=max(ratios, default=float("nan")),
        ),
        mlx_lm_server_vs_cold=PeerVsCold(
            warm_median=median([t.mlx_lm_server_vs_cold for t in warm]),
            warm_max=max((t.mlx_lm_server_vs_cold for t in warm), default=float("nan")),
        ),
        hit_rate={
            path: HitRates(
                warm_median=median([t.hit_rate[path] or 0.0 for t in warm]),
                after_kill=by_event["after_kill"].hit_rate[path],
                after_restart=by_event["after_restart"].hit_rate[path],
            )
            for path in ("mlxhost", "mlx_lm_server")
        },
        disk_bytes=disk_bytes,
        disk_files=disk_files,
        events=events,
        target=TTFT_VS_COLD_MAX,
        ok_by_turn=ok_by_turn,
        meets_target=all(ok_by_turn.values()) if ok_by_turn else None,
        runs=records,
    )


def print_agent(summary: AgentSummary) -> None:
    settings = summary.settings
    print()
    print(
        f"agent scenario ({settings.turns} turns, then one after kill -9 of mlxhost's worker and one "
        f"after a host restart on the same --state-dir; a {settings.system_prompt_tokens}-token "
        f"system prompt with {settings.tools} tools, tool calls and results; max_tokens "
        f"{settings.max_tokens}, greedy):"
    )
    header = (
        "turn", "event", "prompt tok (raw/server/mlxhost)", "raw cold ms", "mlx_lm.server ms",
        "mlxhost ms", "server/cold", "mlxhost/cold", "server hit", "mlxhost hit", "disk bytes",
    )  # fmt: skip
    lines = []
    for t in summary.turns:
        tokens, ttft, hit = t.prompt_tokens, t.ttft_ms, t.hit_rate
        flag = "" if t.turn == 1 or t.mlxhost_vs_cold <= TTFT_VS_COLD_MAX else " FAIL"
        lines.append(
            (
                str(t.turn),
                t.event,
                "/".join(str(tokens[p]) for p in AGENT_PATHS),
                number(ttft["raw"]),
                number(ttft["mlx_lm_server"]),
                number(ttft["mlxhost"]),
                number(t.mlx_lm_server_vs_cold, 3),
                number(t.mlxhost_vs_cold, 3) + flag,
                number(hit["mlx_lm_server"], 2),
                number(hit["mlxhost"], 2),
                str(t.disk_bytes),
            )
        )
    print_table(header, lines, ["<", "<", "<", *">" * 8], indent="  ")
    kill_ready = summary.events.get("kill_to_ready_s")
    restart_ready = summary.events.get("start_to_ready_s")
    print(
        f"  target: mlxhost TTFT <= {TTFT_VS_COLD_MAX:g} x a cold prefill of the same length on every "
        f"turn after the first: {verdict(summary.meets_target)} (after the kill "
        f"{number(summary.mlxhost_vs_cold.after_kill, 3)}, after the restart "
        f"{number(summary.mlxhost_vs_cold.after_restart, 3)})"
    )
    print(
        f"  prompt cache on disk after the run: {summary.disk_bytes:,} bytes in "
        f"{summary.disk_files} file(s); worker back {number(kill_ready, 2)} s after the kill; "
        f"host ready {number(restart_ready, 2)} s after its restart"
    )
    print(
        "  (cold: raw's TTFT at the same turn, scaled by the prompt lengths; hit: usage cached_tokens "
        "/ prompt_tokens)"
    )
