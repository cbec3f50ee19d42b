"""`mlxhost status`: one look at a running host, as a table or JSON, for scripts and SSH."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import httpx

from mlxhost.client.admin import AdminClient, HostNotFound, Target, find_target
from mlxhost.client.human import drafts, duration, size
from mlxhost.wire.admin import BadRecord, ExitRecord, HostState
from mlxhost.wire.admin.state import DownloadRecord
from mlxhost.wire.inert import escape_controls

__all__ = ["render", "run_status", "sizes", "transfer"]


def run_status(url: str | None, unix: str | None, token: str | None, as_json: bool) -> int:
    try:
        target = find_target(url, unix, token)
    except HostNotFound as exc:
        print(f"mlxhost: {exc}", file=sys.stderr)
        return 1
    try:
        code, health, state = anyio.run(_read, target)
    except httpx.HTTPStatusError as exc:
        print(f"mlxhost: {target.describe()} answered {exc.response.status_code}: {exc.response.text}", file=sys.stderr)
        return 1
    except (httpx.TransportError, OSError) as exc:
        print(f"mlxhost: cannot reach {target.describe()}: {exc}", file=sys.stderr)
        return 1
    except BadRecord as exc:
        print(f"mlxhost: {target.describe()} answered a state this version cannot read: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps({"health": health, "state": state.to_json()}, indent=2))
    else:
        print(render(target, health, state))
    return 0 if code == 200 else 1


async def _read(target: Target) -> tuple[int, dict[str, Any], HostState]:
    async with AdminClient(target) as client:
        code, health = await client.health()
        return code, health, await client.snapshot()


def _inert(value: Any) -> Any:
    """`value` with control characters escaped in every string: the table goes to a terminal."""
    if isinstance(value, str):
        return escape_controls(value)
    if isinstance(value, dict):
        return {k: _inert(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_inert(v) for v in value]
    return value


def render(target: Target, health: dict[str, Any], state: HostState) -> str:
    health, state = _inert(health), HostState.from_json(_inert(state.to_json()))
    host, sessions = state.host, state.sessions
    lines = [
        (
            f"mlxhost at {target.describe()}: {health['status']}, pid {host.pid}, "
            f"up {duration(host.uptime_s)}, event {state.seq}"
        ),
        "",
        _table(
            ["WORKER", "STATE", "PID", "RESTARTS", "UP", "IN FLIGHT", "MEMORY", "DRAFTS", "LAST EXIT"],
            [
                [
                    w.id,
                    w.state,
                    str(w.pid or "-"),
                    str(w.restarts),
                    duration(w.uptime_s) if w.uptime_s is not None else "-",
                    str(w.in_flight),
                    size(w.memory.active_bytes + w.memory.cache_bytes) if w.memory else "-",
                    drafts(w.speculation),
                    _exit(w.last_exit),
                ]
                for w in state.workers
            ],
        ),
        "",
        _models(state),
        "",
        f"sessions: {len(sessions.live)} live, {sessions.closed} closed of {sessions.opened} opened",
    ]
    for session in sessions.live:
        if session.kind == "generate":
            work = f"{session.tokens} tokens  {session.tokens_per_s} tok/s"
        else:  # an embed or rerank session: its inputs and their tokens, once its worker is done
            work = f"{session.kind}  {session.inputs} inputs  {session.prompt_tokens} tokens"
        lines.append(f"  {session.id}  {session.model}  {session.state}  {work}  {duration(session.age_s)}")
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=False)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() for row in [header, *rows])


def _models(state: HostState) -> str:
    """The models and their admission; a DOWNLOAD column only while one's files are being pulled
    (or failed to be), so that a host with every model in place reads as before pulls."""
    header = ["MODEL", "RESIDENT", "ACTIVE", "QUEUED", "REJECTED"]
    rows = [
        [m.id + (" (default)" if m.default else ""), "yes" if m.resident else "no", *_admission(state, m.id)]
        for m in state.models
    ]
    if any(m.download is not None for m in state.models):
        header.append("DOWNLOAD")
        for row, m in zip(rows, state.models, strict=True):
            row.append(_download(m.download) if m.download is not None else "-")
    return _table(header, rows)


def _download(download: DownloadRecord) -> str:
    """`downloading 45% 1.2/2.3 GiB 40.0 MiB/s from org/repo`, or `failed: why (org/repo)`."""
    if download.state == "downloading":
        progress = transfer(download.done_bytes, download.total_bytes, download.bytes_per_s)
        return f"downloading {progress} from {download.repo}"
    return f"{download.state}: {download.error or 'unknown'} ({download.repo})"


def transfer(done: int, total: int, bytes_per_s: float = 0.0) -> str:
    """A download at a glance, as the console's row and `mlxhost status` show it:
    `45% 1.2/2.3 GiB 40.0 MiB/s`; before the hub says how much there is, what came so far."""
    if total <= 0:
        text = size(done)
    else:
        text = f"{min(100, done * 100 // total)}% {sizes(done, total)}"
    return f"{text} {size(bytes_per_s)}/s" if bytes_per_s > 0 else text


def sizes(done: int, total: int) -> str:
    """`1.2/2.3 GiB`, the unit said once where both share it; `312.4 MiB/2.1 GiB` where not."""
    done_text, total_text = size(done), size(total)
    number, _, unit = done_text.partition(" ")
    return f"{number}/{total_text}" if total_text.endswith(f" {unit}") else f"{done_text}/{total_text}"


def _admission(state: HostState, model: str) -> list[str]:
    """A model's active, queued and rejected counts."""
    stats = state.admission.get(model)
    return [str(stats.active), str(stats.queued), str(stats.rejected)] if stats else ["0", "0", "0"]


def _exit(last: ExitRecord | None) -> str:
    if last is None:
        return "-"
    if last.signal:
        return f"signal {last.signal}"
    if last.code is None:  # it was never started: the reason is all there is
        return last.reason or "-"
    return f"code {last.code}"
