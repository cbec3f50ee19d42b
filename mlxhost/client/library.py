"""`mlxhost models`: the models on this machine, as a table or JSON; `mlxhost models rm MODEL`.

The models are what `mlxhost.catalog.library` finds: the Hugging Face cache's repos and the state
directory's outputs (converted models, and jobs' fine-tunes, quantizations and fusions). SERVED
says what a running host does with each, asked over its admin API (`/admin/state`: the local
host, or `--url`), briefly:

    yes    one of the host's models, held by a worker now (resident, or a ready worker)
    idle   one of the host's models, which it loads from these files when asked for it
    no     the host does not serve it
    -      no host is running, or it could not be asked (JSON: `served` null)

`rm` deletes a model's files: a repo's every revision and blob from the cache (huggingface_hub's
own deletion), or an output's folder. It refuses while a host has the model among its own (a
worker reads those files), and when a host is there but cannot be asked.

Exit statuses: 0 done; 1 refused (a host serves it, or cannot be asked) or the files could not all
be removed; 2 an unknown (or ambiguous) model, named with the ids there are. What is printed is
escaped of control characters: a folder name or a repo id reaches the operator's terminal.
"""

from __future__ import annotations

import json as json_module
import os
import shutil
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

from mlxhost.catalog import hub
from mlxhost.catalog.library import (
    HF_CACHE,
    AmbiguousLocalModel,
    LibraryError,
    LocalModel,
    RemovedModel,
    UnknownLocalModel,
    find,
    list_models,
    remove,
)
from mlxhost.client.admin import AdminClient, HostNotFound, find_target
from mlxhost.client.human import size
from mlxhost.wire.admin import BadRecord, HostState, ModelRecord
from mlxhost.wire.inert import escape_controls
from mlxhost.wire.layout import state_dir as layout_state_dir

__all__ = [
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "HostView",
    "Serving",
    "ago",
    "ask_host",
    "models_json",
    "refusal",
    "render_models",
    "resolve_state_dir",
    "run_models",
    "serving",
    "short_size",
]

EXIT_OK = 0
EXIT_REFUSED = 1  # a host serves it (or cannot be asked), or the files could not all be removed
EXIT_USAGE = 2  # no such model here, or the name is ambiguous

HOST_TIMEOUT_S = 2.0  # the admin API answers at once; a host slower than this is treated as unaskable
WIDTH = 80  # the table's least width; a wider terminal gets its full width
MIN_ID = 16
MAX_ARCH = 10
HEADER = ["ID", "REV", "SIZE", "ARCH", "BITS", "LOADS", "SERVED", "LAST USED"]


@dataclass(frozen=True)
class HostView:
    """A running host as `/admin/state` showed it; `problem` says why it could not be asked."""

    where: str
    pid: int | None = None
    models: tuple[ModelRecord, ...] = ()
    ready: frozenset[str] = frozenset()  # the model ids a ready worker holds
    problem: str | None = None


@dataclass(frozen=True)
class Serving:
    host_model: str  # the host's id for it
    now: bool  # a worker holds it


def resolve_state_dir(named: str | None) -> Path:
    """The state directory `--state-dir` names, else the host's (env, config file, default)."""
    if named:
        return layout_state_dir(_Named(named))
    try:
        from mlxhost.config_sources import load_settings

        return layout_state_dir(load_settings())
    except Exception:  # a config this command cannot read: the host would refuse it; the env or default
        return layout_state_dir(_Named(os.environ.get("MLXHOST_STATE_DIR")))


class _Named:
    def __init__(self, state_dir: str | None) -> None:
        self.state_dir = state_dir


def ask_host(url: str | None) -> HostView | None:
    """The host `url` names, or the local one; None when none runs (and none was named)."""
    try:
        target = find_target(url)
    except HostNotFound:
        return None
    where = target.describe()

    async def read() -> HostState:
        async with AdminClient(target, timeout=HOST_TIMEOUT_S) as client:
            return await client.snapshot()

    try:
        state = anyio.run(read)
    except httpx.HTTPStatusError as exc:
        status = exc.response.status_code
        hint = " (set MLXHOST_ADMIN_TOKEN to its admin token)" if status == 401 else ""
        return HostView(where, problem=f"it answered {status}{hint}")
    except (httpx.TransportError, OSError) as exc:
        return HostView(where, problem=f"it cannot be reached ({type(exc).__name__}: {exc})")
    except (BadRecord, ValueError) as exc:
        return HostView(where, problem=f"it answered a state this version cannot read ({exc})")
    ready = frozenset(w.model for w in state.workers if w.state == "ready")
    return HostView(where, state.host.pid, state.models, ready)


def serving(model: LocalModel, host: HostView | None) -> Serving | None:
    """What `host` does with `model`: one of its models (held now or not), or None."""
    if host is None or host.problem is not None:
        return None
    folders = {_resolved(p) for p in (model.path, *model.snapshots)}
    found = None
    for record in host.models:
        if record.id == model.id or _resolved(Path(record.path)) in folders:
            now = record.resident or record.id in host.ready
            if found is None or (now and not found.now):
                found = Serving(record.id, now)
    return found


def _resolved(path: Path) -> Path:
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):
        return path


def ago(seconds: float) -> str:
    """How long ago, in at most 8 characters: `12s ago`, `5m ago`, `3h ago`, `9d ago`, `4mo ago`, `2y ago`."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{int(seconds)}s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)}m ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h ago"
    days = seconds / 86400
    if days < 60:
        return f"{int(days)}d ago"
    if days < 730:
        return f"{int(days // 30)}mo ago"
    return f"{int(days // 365)}y ago"


def short_size(count: float) -> str:
    """A byte count in at most 5 characters, binary units: `148B`, `866K`, `5.1G`, `12G`."""
    for unit in ("B", "K", "M", "G", "T"):
        if unit == "T" or count < 999.5:
            break
        count /= 1024
    if unit == "B":
        return f"{int(count)}B"
    return f"{count:.1f}{unit}" if count < 9.95 else f"{count:.0f}{unit}"


def _served_cell(model: LocalModel, host: HostView | None) -> str:
    if host is None or host.problem is not None:
        return "-"
    found = serving(model, host)
    return "no" if found is None else ("yes" if found.now else "idle")


def _middle(text: str, width: int) -> str:
    """`text` in `width` characters, its middle cut (a repo id's owner and its suffix both stay)."""
    if len(text) <= width:
        return text
    keep = width - 1
    head = (keep + 1) // 2
    return text[:head] + "…" + text[len(text) - (keep - head) :]


def _end(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_models(
    models: Sequence[LocalModel],
    host: HostView | None,
    *,
    width: int = WIDTH,
    now: float | None = None,
    hf_cache: Path | None = None,
    state_dir: Path | None = None,
) -> str:
    """The table, in `width` columns, and a line for each model that cannot be served, saying why."""
    now = time.time() if now is None else now
    where = []
    if hf_cache is not None:
        where.append(f"HF cache:  {escape_controls(str(hf_cache))}")
    if state_dir is not None:
        where.append(f"state dir: {escape_controls(str(state_dir))}")
    if not models:
        empty = "no models on this machine; pull one: mlxhost pull OWNER/NAME"
        return "\n".join([empty, *(f"  {w}" for w in where)])
    rows = [
        [
            escape_controls(m.id),
            (m.revision or "-")[:7],
            short_size(m.size_bytes),
            _end(escape_controls(m.model_type or m.architecture or "-"), MAX_ARCH),
            str(m.quantization_bits) if m.quantization_bits is not None else "-",
            "yes" if m.loadable else "no",
            _served_cell(m, host),
            ago(now - m.last_used) if m.last_used is not None else "-",
        ]
        for m in models
    ]
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    others = sum(widths[1:]) + 2 * (len(HEADER) - 1)
    id_width = max(MIN_ID, min(widths[0], width - others))
    shortened = id_width < widths[0]
    widths[0] = max(id_width, len(HEADER[0]))
    lines = []
    for row in [HEADER, *rows]:
        cells = [_middle(row[0], widths[0]), *row[1:]]
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
    notes = []
    for m in models:
        if not m.loadable and m.reason:
            why = f"{escape_controls(m.id)} cannot be served: {escape_controls(m.reason)}"
            notes.append(_wrap(why, width))
    if host is not None and host.problem is not None:
        notes.append(_wrap(f"SERVED is unknown: the host at {escape_controls(host.where)} cannot be asked: "
                           f"{escape_controls(host.problem)}", width))  # fmt: skip
    if shortened:
        notes.append(_wrap("(ids shortened to fit: `mlxhost models --json` gives them whole)", width))
    total = sum(m.size_bytes for m in models)
    notes.append(f"{len(models)} model{'s' if len(models) != 1 else ''}, {size(total)} in all")
    notes.extend(f"  {w}" for w in where)  # a path is not cut: the one line that may be wider
    return "\n".join([*lines, "", *notes])


def _wrap(text: str, width: int) -> str:
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def models_json(models: Sequence[LocalModel], host: HostView | None) -> list[dict[str, Any]]:
    """Each model's record, with `served` (true, false, or null without a host) and `host_model`."""
    found = []
    for m in models:
        record = m.to_json()
        if host is None or host.problem is not None:
            record |= {"served": None, "host_model": None}
        else:
            what = serving(m, host)
            record |= {
                "served": what is not None and what.now,
                "host_model": what.host_model if what is not None else None,
            }
        found.append(record)
    return found


def refusal(model: LocalModel, host: HostView, what: Serving) -> str:
    """Why `rm` leaves `model` alone while `host` has it, and what to do."""
    name, where = escape_controls(model.id), escape_controls(host.where)
    pid = f" (pid {host.pid})" if host.pid is not None else ""
    as_model = "" if what.host_model == model.id else f" as model {escape_controls(what.host_model)}"
    if what.now:
        how = f"{name} is served by the host at {where}{pid}{as_model}, whose worker reads its files"
    else:
        how = f"{name} is one of the models of the host at {where}{pid}{as_model}"
        how += ", which loads it from these files"
    stop = f"kill {host.pid}" if host.pid is not None else "Ctrl-C where it runs"
    return (
        f"{how}: not removing it. Stop that host ({stop}), or restart it without this model, then run "
        f"`mlxhost models rm {name}` again."
    )


def run_models(
    json: bool,
    state_dir: str | None,
    url: str | None,
    action: str | None,
    model: str | None = None,
    rm_state_dir: str | None = None,
    rm_url: str | None = None,
    rm_json: bool = False,
) -> int:
    """`mlxhost models [rm MODEL]`: the exit status. The `rm_` flags are `rm`'s own spellings of
    the listing's (`mlxhost models rm M --state-dir D` as well as `mlxhost models --state-dir D rm M`)."""
    state = resolve_state_dir(rm_state_dir or state_dir)
    if action == "rm":
        if model is None:
            print("mlxhost models rm: name the model to remove", file=sys.stderr)
            return EXIT_USAGE
        return _remove(model, state, rm_url or url, json or rm_json)
    if action is not None:
        print(f"mlxhost models: unknown action {action!r}", file=sys.stderr)
        return EXIT_USAGE
    models = list_models(state)
    host = ask_host(url)
    if json:
        print(json_module.dumps(models_json(models, host), indent=2))
        return EXIT_OK
    width = max(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)
    print(render_models(models, host, width=width, hf_cache=hub.cache_dir(), state_dir=state))
    return EXIT_OK


def _remove(model_id: str, state: Path, url: str | None, as_json: bool) -> int:
    try:
        model = find(model_id, state)
    except (UnknownLocalModel, AmbiguousLocalModel) as exc:
        print(f"mlxhost: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    host = ask_host(url)
    if host is not None and host.problem is not None:
        print(
            f"mlxhost: cannot tell whether the host at {escape_controls(host.where)} serves "
            f"{escape_controls(model.id)}: {escape_controls(host.problem)}; not removing it. Stop that host, "
            "or make it answer (--url, MLXHOST_ADMIN_TOKEN), then try again.",
            file=sys.stderr,
        )
        return EXIT_REFUSED
    what = serving(model, host)
    if host is not None and what is not None:
        print(f"mlxhost: {refusal(model, host, what)}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        removed = remove(model_id, state)
    except (UnknownLocalModel, AmbiguousLocalModel) as exc:  # gone (or doubled) since: another process
        print(f"mlxhost: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except LibraryError as exc:
        print(f"mlxhost: {escape_controls(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    if as_json:
        print(json_module.dumps(removed.to_json(), indent=2))
    else:
        print(_removed_line(removed))
    return EXIT_OK


def _removed_line(removed: RemovedModel) -> str:
    where = "the Hugging Face cache" if removed.source == HF_CACHE else "the state directory"
    return (
        f"removed {escape_controls(removed.id)} from {where}: freed {size(removed.freed_bytes)} "
        f"({removed.freed_bytes} bytes) at {escape_controls(str(removed.path))}"
    )
