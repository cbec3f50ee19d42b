"""Settings: one name per option in the config file, the environment (`MLXHOST_*`) and the CLI.

`Settings` is the record every part of mlxhost reads: each option with its default, its check and
its help (the CLI's flags are made from them). Where the values come from, and in which
precedence, is mlxhost.config_sources; the checks of plain values (numbers, names, switches) are
mlxhost.config_values, and those of models and their names mlxhost.catalog.spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from mlxhost.config_values import (
    boolean,
    integer,
    names,
    non_negative_number,
    optional_text,
    positive_number,
    text,
)
from mlxhost.catalog.spec import (
    MAX_DRAFT_TOKENS,
    ModelSpec,
    alias_list,
    draft_tokens_value,
    kv_bits_value,
    kv_group_size_value,
    model_list,
    model_name,
    speculate_value,
)

__all__ = ["DEMOS", "KV_LAYOUTS", "ConfigError", "Settings", "binds"]

# The built-in demo models `serve` may build when no model is given (sizes in mlxhost.demo).
DEMOS = ("tiny", "agent")
# How the generation batch keeps its rows' KV (the engine's `kv_layout`).
KV_LAYOUTS = ("per_row", "padded")


class ConfigError(Exception):
    """An option has a value mlxhost cannot use; the message names option, value and what is valid."""


def _demo(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in DEMOS:
        raise ValueError
    return value.lower()


_demo.__doc__ = f"one of {', '.join(DEMOS)}"


def _log_level(value: object) -> str:
    """one of debug, info, warning, error"""
    if not isinstance(value, str) or value.lower() not in {"debug", "info", "warning", "error"}:
        raise ValueError
    return value.lower()


def _kv_layout(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in KV_LAYOUTS:
        raise ValueError
    return value.lower()


_kv_layout.__doc__ = f"one of {', '.join(KV_LAYOUTS)}"


def _option(default: Any, parse: Callable[[object], Any], help: str, repeat: bool = False) -> Any:
    return dataclasses.field(default=default, metadata={"parse": parse, "help": help, "repeat": repeat})


@dataclass(frozen=True)
class Settings:
    host: str = _option("127.0.0.1", text, "TCP address to bind")
    port: int = _option(8080, integer(0, 65535), "TCP port (0 picks a free one)")
    unix: str | None = _option(None, optional_text, "Unix socket path, served beside TCP")
    no_tcp: bool = _option(False, boolean, "serve only on the Unix socket")
    model: tuple[ModelSpec, ...] = _option(
        (),
        model_list,
        "a model to serve: a directory, a Hugging Face repo id (pulled first when not in the cache), or "
        "ID=PATH; repeat for several (default: the built-in demo model)",
        repeat=True,
    )
    model_id: str | None = _option(None, model_name, "name the API reports for a single --model")
    model_aliases: tuple[str, ...] = _option(
        (),
        alias_list,
        "other names a single --model (or the demo model) answers to: exact names, or patterns "
        "with * and ? such as 'claude-*'; repeat for several",
        repeat=True,
    )
    demo: str = _option(
        "tiny",
        _demo,
        "the built-in demo model served when no model is given: tiny, or agent (a 64k context "
        "and a better tokenizer, for coding agents); naming it beside a model is an error",
    )
    in_process: bool = _option(False, boolean, "serve the model in this process (no worker; for debugging)")
    offline: bool = _option(
        False, boolean, "never pull: a --model repo id not in the Hugging Face cache is an error (as HF_HUB_OFFLINE=1)"
    )
    strict_models: bool = _option(
        False, boolean, "404 for an unknown model name (default: use the default model)"
    )
    max_active: int = _option(8, integer(1), "sessions per model running at once")
    max_queued: int = _option(64, integer(0), "sessions per model waiting in line; more get 429")
    request_timeout: float = _option(
        600.0, non_negative_number, "seconds a request may take in all, queue included (0: no limit)"
    )
    idle_timeout: float = _option(
        30.0, positive_number, "seconds a client may stop reading a stream before it is cancelled"
    )
    admin_token: str | None = _option(
        None, optional_text, "token for the admin API on TCP (default: generated at start)"
    )
    api_key: str | None = _option(
        None,
        optional_text,
        "if set, /v1 requests on TCP need it ('Authorization: Bearer KEY' or 'x-api-key: KEY'); "
        "prefer MLXHOST_API_KEY or api_key_file to a flag, which other users can read in ps",
    )
    api_key_file: str | None = _option(
        None, optional_text, "a file of API keys, one per line, each accepted like api_key"
    )
    allowed_hosts: tuple[str, ...] = _option(
        (),
        names,
        "Host names accepted besides 127.0.0.1, localhost and [::1] when bound to loopback "
        "(against DNS rebinding); when bound elsewhere, if set, the only ones accepted",
        repeat=True,
    )
    cors_origins: tuple[str, ...] = _option(
        (),
        names,
        "browser origins (https://app.example) allowed to call the API; any other Origin gets 403",
        repeat=True,
    )
    max_connections: int = _option(
        512, integer(1), "open client connections at once; more are answered 503 and closed"
    )
    body_timeout: float = _option(
        30.0, positive_number, "seconds a client may take to send a request body (then 408)"
    )
    http2: bool = _option(False, boolean, "also speak HTTP/2 (h2c); off: HTTP/1.1 only")
    max_resident: int = _option(2, integer(1), "most models loaded at once")
    memory_budget: int = _option(
        0, integer(0), "bytes the loaded models may use together, from their readings (0: no budget)"
    )
    idle_ttl: float = _option(0.0, non_negative_number, "unload a model unused this many seconds (0: never)")
    load_timeout: float = _option(
        900.0, positive_number, "seconds a worker may take to become ready (large models load slowly)"
    )
    restart_limit: int = _option(3, integer(0), "respawns allowed within restart_window")
    restart_window: float = _option(60.0, positive_number, "seconds of the rolling restart window")
    crash_backoff: float = _option(
        5.0, non_negative_number, "wait before respawning after two early exits in a row"
    )
    early_exit: float = _option(10.0, non_negative_number, "an exit this soon after spawn counts as early")
    drain_timeout: float = _option(30.0, non_negative_number, "seconds a stopping worker may finish requests")
    stop_timeout: float = _option(5.0, positive_number, "seconds from SIGTERM to SIGKILL for a worker")
    health_interval: float = _option(
        2.0, non_negative_number, "seconds between liveness checks of each worker (0: none)"
    )
    health_timeout: float = _option(
        10.0, positive_number, "a worker that does not answer its check this long is killed and respawned"
    )
    stall_timeout: float = _option(
        300.0,
        positive_number,
        "a worker whose generation thread spends this long in one step is hung: killed and respawned",
    )
    worker_command: str | None = _option(
        None, optional_text, "command that starts a worker (default: this Python, -m mlxhost.worker)"
    )
    state_dir: str | None = _option(
        None,
        optional_text,
        "where jobs, their logs and outputs are kept across restarts "
        "(default: $XDG_STATE_HOME/mlxhost, or ~/.local/state/mlxhost)",
    )
    jobs_keep: int = _option(
        50, integer(1), "finished jobs kept, with their logs and outputs; older ones are deleted"
    )
    runtime_dir: str | None = _option(
        None, optional_text, "where the private runtime directory goes (default: XDG_RUNTIME_DIR or /tmp)"
    )
    max_body_bytes: int = _option(4 * 1024 * 1024, integer(1024), "largest request body")
    default_max_tokens: int = _option(512, integer(1), "max_tokens when a request sets none")
    max_tokens_limit: int = _option(
        8192, integer(1), "most tokens one answer may have (more asked is clamped)"
    )
    max_batch: int = _option(32, integer(1, 1024), "sequences decoded together in one step")
    prefill_batch: int = _option(
        8, integer(1, 1024), "prompts prefilled together (kv_layout = padded only: per row, one at a time)"
    )
    prefill_step: int = _option(
        2048, integer(16), "prompt tokens per prefill chunk while nothing else decodes"
    )
    kv_layout: str = _option(
        "per_row",
        _kv_layout,
        "how the generation batch keeps each row's KV: per_row, each row its own cache and attention "
        "over its own length; padded, mlx-lm's BatchKVCache, every row padded to the longest",
    )
    kv_bits: int = _option(
        0,
        kv_bits_value,
        "KV quantized to this many bits, per row (0: off, or 4 or 8; the per_row layout only)",
    )
    kv_group_size: int = _option(64, kv_group_size_value, "values per KV quantization group: 32, 64 or 128")
    speculate: str = _option(
        "lookup",
        speculate_value,
        "speculative decoding: lookup drafts each row's next tokens from its own prompt and output "
        "and verifies them in one pass where that is measured to pay; always, wherever a row has "
        "drafts; off never drafts",
    )
    draft_tokens: int = _option(
        6,
        draft_tokens_value,
        f"most draft tokens per row and step when speculating (1 to {MAX_DRAFT_TOKENS})",
    )
    prefill_chunk_ms: float = _option(
        50.0,
        positive_number,
        "while streams decode, a joining prompt is prefilled in chunks of about this many "
        "milliseconds between decode steps: the longest a running stream waits for it",
    )
    prompt_cache_size: int = _option(
        10, integer(0), "finished generations whose KV cache is kept for prompts that share a prefix (0: off)"
    )
    prompt_cache_mb: int = _option(1024, integer(0), "most memory the kept KV caches may hold, in MiB")
    prompt_cache_disk_mb: int = _option(
        4096,
        integer(0),
        "most disk all models' kept KV caches may take together under state_dir, in MiB; they outlive "
        "worker restarts and host restarts (0: memory only)",
    )
    standby_workers: int = _option(
        1,
        integer(0, 8),
        "warm interpreters (MLX imported, no model) kept ready to become the next worker, so a "
        "crashed or new model is back in the time of its load (0: none)",
    )
    keepalive_seconds: float = _option(
        5.0, positive_number, "SSE comment interval while a stream has no tokens"
    )
    stream_interval: float = _option(
        0.05,
        non_negative_number,
        "shortest gap in seconds between two SSE frames of a stream; faster tokens are sent "
        "together, and past 8 streams the gap grows so a worker sends at most 160 frames a "
        "second (0: a frame per token)",
    )
    shutdown_grace: float = _option(
        10.0, positive_number, "seconds running requests may finish after SIGTERM"
    )
    log_level: str = _option("info", _log_level, "debug, info, warning or error")

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def binds(settings: Settings) -> list[str]:
    """The addresses `serve` listens on, as Hypercorn spells them."""
    addresses = [] if settings.no_tcp else [f"{settings.host}:{settings.port}"]
    if settings.unix:
        addresses.append(f"unix:{settings.unix}")
    return addresses
