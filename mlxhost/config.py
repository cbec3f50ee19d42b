"""Settings: one name per option in the config file, the environment (`MLXHOST_*`) and the CLI.

Precedence, lowest first: built-in defaults, the TOML file (`--config` or `config/mlxhost.toml`
when present in the working directory), `MLXHOST_*` environment variables, command-line flags.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from mlxhost.ranks import GroupSpec, InvalidGroup, group_spec

__all__ = [
    "DEMOS",
    "ConfigError",
    "ModelSpec",
    "Settings",
    "binds",
    "is_pattern",
    "load_settings",
    "settings_from_options",
]

ENV_PREFIX = "MLXHOST_"
DEFAULT_CONFIG_FILE = Path("config/mlxhost.toml")
# The built-in demo models `serve` may build when no model is given (sizes in mlxhost.demo).
DEMOS = ("tiny", "agent")
# A model's aliases may be patterns: '*' matches any run of characters, '?' any one.
WILDCARDS = "*?"


class ConfigError(Exception):
    """An option has a value mlxhost cannot use; the message names option, value and what is valid."""


class _Invalid(ValueError):
    """A parser's own account of what is wrong (plain ValueErrors fall back to its docstring)."""


def _integer(low: int, high: int | None = None) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool):
            raise ValueError
        number = int(value) if isinstance(value, str) else value
        if not isinstance(number, int) or number < low or (high is not None and number > high):
            raise ValueError
        return number

    parse.__doc__ = f"an integer >= {low}" + (f" and <= {high}" if high is not None else "")
    return parse


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError
    return float(value)


def _positive_number(value: object) -> float:
    """a number > 0"""
    if not (number := _number(value)) > 0:
        raise ValueError
    return number


def _non_negative_number(value: object) -> float:
    """a number >= 0"""
    if not (number := _number(value)) >= 0:
        raise ValueError
    return number


def _text(value: object) -> str:
    """a non-empty string"""
    if not isinstance(value, str) or not value.strip():
        raise ValueError
    return value


def _optional_text(value: object) -> str | None:
    """a string (empty for none)"""
    if not isinstance(value, str):
        raise ValueError
    return value or None


def _names(value: object) -> tuple[str, ...]:
    """a name, a comma-separated list of names, or a list of names"""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError
    names = tuple(i.strip() for i in items if i.strip())
    if any(any(c.isspace() or not c.isprintable() for c in name) for name in names):
        raise _Invalid("names with spaces or control characters")
    return names


def _boolean(value: object) -> bool:
    """true or false"""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return value.lower() in {"1", "true", "yes", "on"}
    raise ValueError


def _model_id(value: object) -> str | None:
    """a model name without * or ? (empty for none)"""
    name = _optional_text(value)
    if name is not None and is_pattern(name):
        raise _Invalid("an exact model name: a model's id cannot hold * or ? (patterns go in its aliases)")
    return name


def _aliases(value: object) -> tuple[str, ...]:
    """a name or pattern (* and ?), a comma-separated list of them, or a list of them"""
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        value = ",".join(value)  # a repeated flag may carry commas as the environment does
    aliases = _names(value)
    for alias in aliases:
        if (problem := _alias_problem(alias)) is not None:
            raise _Invalid(problem)
    if len(set(aliases)) < len(aliases):
        raise _Invalid("each name or pattern once")
    return aliases


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


def _option(default: Any, parse: Callable[[object], Any], help: str, repeat: bool = False) -> Any:
    return dataclasses.field(
        default=default, metadata={"parse": parse, "help": help, "repeat": repeat}
    )


def is_pattern(name: str) -> bool:
    return any(c in WILDCARDS for c in name)


def _alias_problem(alias: str) -> str | None:
    """Why `alias` cannot be a model's alias; None when it can."""
    if not is_pattern(alias):
        return None  # an exact name: anything a request may send, as before
    if any(c.isspace() or not c.isprintable() for c in alias):
        return f"a pattern without spaces or control characters, not {alias!r}"
    if "[" in alias or "]" in alias:
        # fnmatch would read [...] as a character class; model names carry brackets literally
        # (Claude Code's "[1m]"), so the two meanings would be easy to confuse: neither is taken.
        return f"a pattern whose only wildcards are * and ?, not {alias!r} ([ and ] are not allowed in one)"
    return None


@dataclass(frozen=True)
class ModelSpec:
    """One servable model: where it is, what it is called, and its own limits.

    `aliases` are as configured: exact names, and patterns (with * or ?) that requests' unknown
    names are matched against. `names` are the exact ones only: the id first.
    """

    id: str
    path: str  # a model directory, or a Hugging Face repo id already in the local cache
    aliases: tuple[str, ...] = ()
    preload: bool | None = None  # None: the default (first) model preloads, others on demand
    idle_ttl: float | None = None  # seconds unused before it is unloaded; None: the host's idle_ttl
    max_batch: int | None = None
    max_active: int | None = None  # sessions running at once; None: the host's max_active
    max_queued: int | None = None  # sessions waiting; None: the host's max_queued
    max_tokens_limit: int | None = None  # largest max_tokens; None: the host's max_tokens_limit
    adapter: str | None = None  # a LoRA adapter directory (mlx-lm's), loaded over the model
    group: GroupSpec | None = None  # served by several MLX ranks (mlxhost.ranks); None: one worker

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *(a for a in self.aliases if not is_pattern(a)))

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(a for a in self.aliases if is_pattern(a))

    def matches(self, name: str) -> bool:
        """Whether one of this model's patterns matches `name` (case-sensitive, as exact names)."""
        # '[' is escaped: a pattern's wildcards are * and ? only, whoever built the spec.
        return any(fnmatch.fnmatchcase(name, p.replace("[", "[[]")) for p in self.patterns)


_MODEL_KEYS = {
    "id", "path", "aliases", "preload", "idle_ttl", "max_batch", "max_active", "max_queued", "max_tokens_limit",
    "adapter", "ranks", "backend", "hosts", "hostfile", "sharding",
}  # fmt: skip


def _model_specs(value: object) -> tuple[ModelSpec, ...]:
    """a model directory or repo id, ID=PATH, or a list of those or of [[model]] tables"""
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError
    specs = tuple(_model_spec(item) for item in items)
    _check_names(specs)
    return specs


def _check_names(specs: tuple[ModelSpec, ...]) -> None:
    """Every exact name once, every pattern once, and no pattern hidden by an earlier model's."""
    seen: set[str] = set()
    for spec in specs:
        for name in spec.names:
            if name in seen:
                raise _Invalid(f"the model name '{name}' is used twice")
            seen.add(name)
    patterns = [(pattern, spec.id) for spec in specs for pattern in spec.patterns]  # in order
    for at, (pattern, model) in enumerate(patterns):
        for first, owner in patterns[:at]:
            if pattern == first:
                raise _Invalid(f"the pattern '{pattern}' is used twice")
            if owner != model and _covers(first, pattern):
                raise _Invalid(
                    f"the pattern '{pattern}' (model '{model}') would never match: the pattern "
                    f"'{first}' of model '{owner}', earlier, takes every name it would (the first "
                    f"model's pattern wins): narrow '{first}' (e.g. 'claude-sonnet-*' beside "
                    "'claude-haiku-*'), or list this model first"
                )


def _covers(wide: str, narrow: str) -> bool:
    """Whether every name `narrow` matches, `wide` matches too, in the case that is easy to be
    sure of and easy to write by mistake: `wide` is a plain prefix and a '*' ("claude-*", "*")."""
    head = wide.rstrip("*")
    return not is_pattern(head) and narrow.startswith(head)


def _model_spec(item: object) -> ModelSpec:
    if isinstance(item, str):
        model_id, sep, path = item.strip().partition("=")
        if not sep:
            path = model_id
            model_id = Path(path).name if Path(path).expanduser().is_dir() else path
        if not model_id or not path:
            raise _Invalid(f"'{item}' is not PATH or ID=PATH")
        if is_pattern(model_id):
            raise _Invalid(f"an exact model id in '{item}': ids cannot hold * or ? (patterns go in aliases)")
        return ModelSpec(model_id, path)
    if not isinstance(item, dict):
        raise ValueError
    unknown = set(item) - _MODEL_KEYS
    if unknown:
        raise _Invalid(f"unknown model key(s) {sorted(unknown)}; valid: {sorted(_MODEL_KEYS)}")
    location = item.get("path")
    if not isinstance(location, str) or not location:
        raise _Invalid("each [[model]] needs a 'path'")
    model_id = item.get("id", Path(location).name)
    aliases = item.get("aliases", [])
    if not isinstance(model_id, str) or not model_id:
        raise _Invalid("a model 'id' must be a non-empty string")
    if is_pattern(model_id):
        raise _Invalid(
            f"a model 'id' is an exact name, listed by /v1/models: '{model_id}' holds * or ?; "
            "put patterns in 'aliases'"
        )
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise _Invalid("'aliases' must be a list of names or patterns (* and ?)")
    for alias in aliases:
        if (problem := _alias_problem(alias)) is not None:
            raise _Invalid(f"model '{model_id}': each of 'aliases' must be {problem}")
    preload = item.get("preload")
    if preload is not None and not isinstance(preload, bool):
        raise _Invalid("'preload' must be true or false")
    idle_ttl = item.get("idle_ttl")
    max_batch = item.get("max_batch")
    max_active = item.get("max_active")
    max_queued = item.get("max_queued")
    max_tokens_limit = item.get("max_tokens_limit")
    adapter = item.get("adapter")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise _Invalid("'adapter' must be an adapter directory")
    try:
        group = group_spec(item)
    except InvalidGroup as exc:
        raise _Invalid(f"model '{model_id}': {exc}") from None
    if group is not None and adapter is not None:
        raise _Invalid(f"model '{model_id}': 'adapter' is not served by a group of ranks yet")
    return ModelSpec(
        model_id,
        location,
        tuple(aliases),
        preload,
        None if idle_ttl is None else _non_negative_number(idle_ttl),
        None if max_batch is None else _integer(1, 1024)(max_batch),
        None if max_active is None else _integer(1)(max_active),
        None if max_queued is None else _integer(0)(max_queued),
        None if max_tokens_limit is None else _integer(1)(max_tokens_limit),
        adapter,
        group,
    )


@dataclass(frozen=True)
class Settings:
    host: str = _option("127.0.0.1", _text, "TCP address to bind")
    port: int = _option(8080, _integer(0, 65535), "TCP port (0 picks a free one)")
    unix: str | None = _option(None, _optional_text, "Unix socket path, served beside TCP")
    no_tcp: bool = _option(False, _boolean, "serve only on the Unix socket")
    model: tuple[ModelSpec, ...] = _option(
        (),
        _model_specs,
        "a model to serve: a directory, a Hugging Face repo id already in the local cache, or "
        "ID=PATH; repeat for several (default: the built-in demo model)",
        repeat=True,
    )
    model_id: str | None = _option(None, _model_id, "name the API reports for a single --model")
    model_aliases: tuple[str, ...] = _option(
        (),
        _aliases,
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
    in_process: bool = _option(False, _boolean, "serve the model in this process (no worker; for debugging)")
    strict_models: bool = _option(
        False, _boolean, "404 for an unknown model name (default: use the default model)"
    )
    max_active: int = _option(8, _integer(1), "sessions per model running at once")
    max_queued: int = _option(64, _integer(0), "sessions per model waiting in line; more get 429")
    request_timeout: float = _option(
        600.0, _non_negative_number, "seconds a request may take in all, queue included (0: no limit)"
    )
    idle_timeout: float = _option(
        30.0, _positive_number, "seconds a client may stop reading a stream before it is cancelled"
    )
    admin_token: str | None = _option(
        None, _optional_text, "token for the admin API on TCP (default: generated at start)"
    )
    api_key: str | None = _option(
        None,
        _optional_text,
        "if set, /v1 requests on TCP need it ('Authorization: Bearer KEY' or 'x-api-key: KEY'); "
        "prefer MLXHOST_API_KEY or api_key_file to a flag, which other users can read in ps",
    )
    api_key_file: str | None = _option(
        None, _optional_text, "a file of API keys, one per line, each accepted like api_key"
    )
    allowed_hosts: tuple[str, ...] = _option(
        (),
        _names,
        "Host names accepted besides 127.0.0.1, localhost and [::1] when bound to loopback "
        "(against DNS rebinding); when bound elsewhere, if set, the only ones accepted",
        repeat=True,
    )
    cors_origins: tuple[str, ...] = _option(
        (),
        _names,
        "browser origins (https://app.example) allowed to call the API; any other Origin gets 403",
        repeat=True,
    )
    max_connections: int = _option(
        512, _integer(1), "open client connections at once; more are answered 503 and closed"
    )
    body_timeout: float = _option(
        30.0, _positive_number, "seconds a client may take to send a request body (then 408)"
    )
    http2: bool = _option(False, _boolean, "also speak HTTP/2 (h2c); off: HTTP/1.1 only")
    max_resident: int = _option(2, _integer(1), "most models loaded at once")
    memory_budget: int = _option(
        0, _integer(0), "bytes the loaded models may use together, from their readings (0: no budget)"
    )
    idle_ttl: float = _option(0.0, _non_negative_number, "unload a model unused this many seconds (0: never)")
    load_timeout: float = _option(
        900.0, _positive_number, "seconds a worker may take to become ready (large models load slowly)"
    )
    restart_limit: int = _option(3, _integer(0), "respawns allowed within restart_window")
    restart_window: float = _option(60.0, _positive_number, "seconds of the rolling restart window")
    crash_backoff: float = _option(
        5.0, _non_negative_number, "wait before respawning after two early exits in a row"
    )
    early_exit: float = _option(10.0, _non_negative_number, "an exit this soon after spawn counts as early")
    drain_timeout: float = _option(30.0, _non_negative_number, "seconds a stopping worker may finish requests")
    stop_timeout: float = _option(5.0, _positive_number, "seconds from SIGTERM to SIGKILL for a worker")
    health_interval: float = _option(
        2.0, _non_negative_number, "seconds between liveness checks of each worker (0: none)"
    )
    health_timeout: float = _option(
        10.0, _positive_number, "a worker that does not answer its check this long is killed and respawned"
    )
    stall_timeout: float = _option(
        300.0,
        _positive_number,
        "a worker whose generation thread spends this long in one step is hung: killed and respawned",
    )
    worker_command: str | None = _option(
        None, _optional_text, "command that starts a worker (default: this Python, -m mlxhost.worker)"
    )
    state_dir: str | None = _option(
        None,
        _optional_text,
        "where jobs, their logs and outputs are kept across restarts "
        "(default: $XDG_STATE_HOME/mlxhost, or ~/.local/state/mlxhost)",
    )
    jobs_keep: int = _option(
        50, _integer(1), "finished jobs kept, with their logs and outputs; older ones are deleted"
    )
    runtime_dir: str | None = _option(
        None, _optional_text, "where the private runtime directory goes (default: XDG_RUNTIME_DIR or /tmp)"
    )
    max_body_bytes: int = _option(4 * 1024 * 1024, _integer(1024), "largest request body")
    default_max_tokens: int = _option(512, _integer(1), "max_tokens when a request sets none")
    max_tokens_limit: int = _option(8192, _integer(1), "most tokens one answer may have (more asked is clamped)")
    max_batch: int = _option(32, _integer(1, 1024), "sequences decoded together in one step")
    prefill_batch: int = _option(8, _integer(1, 1024), "prompts prefilled together")
    prefill_step: int = _option(2048, _integer(16), "prompt tokens per prefill chunk")
    prompt_cache_size: int = _option(
        10, _integer(0), "finished generations whose KV cache is kept for prompts that share a prefix (0: off)"
    )
    prompt_cache_mb: int = _option(1024, _integer(0), "most memory the kept KV caches may hold, in MiB")
    prompt_cache_disk_mb: int = _option(
        4096,
        _integer(0),
        "most disk all models' kept KV caches may take together under state_dir, in MiB; they outlive "
        "worker restarts and host restarts (0: memory only)",
    )
    standby_workers: int = _option(
        1,
        _integer(0, 8),
        "warm interpreters (MLX imported, no model) kept ready to become the next worker, so a "
        "crashed or new model is back in the time of its load (0: none)",
    )
    keepalive_seconds: float = _option(
        5.0, _positive_number, "SSE comment interval while a stream has no tokens"
    )
    stream_interval: float = _option(
        0.05,
        _non_negative_number,
        "shortest gap in seconds between two SSE frames of a stream; faster tokens are sent "
        "together, and past 8 streams the gap grows so a worker sends at most 160 frames a "
        "second (0: a frame per token)",
    )
    shutdown_grace: float = _option(
        10.0, _positive_number, "seconds running requests may finish after SIGTERM"
    )
    log_level: str = _option("info", _log_level, "debug, info, warning or error")

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def _parse(name: str, raw: object, source: str) -> Any:
    field = next(f for f in fields(Settings) if f.name == name)
    parse = field.metadata["parse"]
    try:
        return parse(raw)
    except (ValueError, TypeError) as exc:
        expected = str(exc) if isinstance(exc, _Invalid) else parse.__doc__
        raise ConfigError(
            f"invalid value for option '{name}' (from {source}): {raw!r}; expected {expected}"
        ) from None


def _read_file(path: Path) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            data = tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    known = set(Settings.option_names())
    for key in data:
        if key not in known:
            raise ConfigError(
                f"unknown option '{key}' in {path}; valid options: {', '.join(sorted(known))}"
            )
    return data


def settings_from_options(options: Mapping[str, object]) -> Settings:
    """Settings from a worker's launch record: the parent's values, checked again here."""
    known = set(Settings.option_names())
    for name in options:
        if name not in known:
            raise ConfigError(f"unknown option '{name}' in the launch record")
    return Settings(**{name: _parse(name, raw, "launch record") for name, raw in options.items()})


def load_settings(
    cli: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """Merge file, environment and CLI values (those that are not None) into validated Settings."""
    env = os.environ if env is None else env
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}  # where each value came from, for errors between options

    path = config_file or (Path(env[f"{ENV_PREFIX}CONFIG"]) if f"{ENV_PREFIX}CONFIG" in env else None)
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        for name, raw in _read_file(path).items():
            values[name] = _parse(name, raw, str(path))
            sources[name] = str(path)

    for name in Settings.option_names():
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = _parse(name, env[key], key)
            sources[name] = key

    for name, raw in cli.items():
        values[name] = _parse(name, raw, "--" + name.replace("_", "-"))
        sources[name] = "--" + name.replace("_", "-")

    settings = Settings(**values)
    if settings.no_tcp and settings.unix is None:
        raise ConfigError("option 'no_tcp' needs option 'unix': nothing would be served")
    if "demo" in values and settings.model:
        # The demo is what is served when no model is: both named is a mistake, not a precedence.
        raise ConfigError(
            f"option 'demo' (from {sources['demo']}) and option 'model' (from {sources['model']}) "
            "both say what to serve: 'demo' picks the built-in model served when no model is "
            "given; drop one of them"
        )
    if settings.model_aliases and len(settings.model) > 1:
        raise ConfigError(
            f"option 'model_aliases' (from {sources['model_aliases']}) names aliases for a single "
            f"model, and option 'model' gives {len(settings.model)}: put each model's aliases "
            "in its [[model]] table"
        )
    if len(settings.model) == 1 and (settings.model_id is not None or settings.model_aliases):
        spec = settings.model[0]
        spec = dataclasses.replace(
            spec,
            id=settings.model_id or spec.id,
            aliases=(*spec.aliases, *(a for a in settings.model_aliases if a not in spec.aliases)),
        )
        try:
            _check_names((spec,))
        except _Invalid as exc:
            name = "model_aliases" if settings.model_aliases else "model_id"
            raise ConfigError(
                f"invalid value for option '{name}' (from {sources[name]}): "
                f"{getattr(settings, name)!r}; {exc}"
            ) from None
        settings = dataclasses.replace(settings, model=(spec,))
    return settings


def binds(settings: Settings) -> list[str]:
    """The addresses `serve` listens on, as Hypercorn spells them."""
    addresses = [] if settings.no_tcp else [f"{settings.host}:{settings.port}"]
    if settings.unix:
        addresses.append(f"unix:{settings.unix}")
    return addresses
