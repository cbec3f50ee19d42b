"""Settings: one name per option in the config file, the environment (`MLXHOST_*`) and the CLI.

Precedence, lowest first: built-in defaults, the TOML file (`--config` or `config/mlxhost.toml`
when present in the working directory), `MLXHOST_*` environment variables, command-line flags.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["ConfigError", "Settings", "load_settings"]

ENV_PREFIX = "MLXHOST_"
DEFAULT_CONFIG_FILE = Path("config/mlxhost.toml")


class ConfigError(Exception):
    """An option has a value mlxhost cannot use; the message names option, value and what is valid."""


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


def _positive_number(value: object) -> float:
    """a number > 0"""
    if isinstance(value, bool):
        raise ValueError
    number = float(value) if isinstance(value, str | int | float) else None
    if number is None or not number > 0:
        raise ValueError
    return number


def _non_negative_number(value: object) -> float:
    """a number >= 0"""
    if isinstance(value, bool):
        raise ValueError
    number = float(value) if isinstance(value, str | int | float) else None
    if number is None or not number >= 0:
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


def _boolean(value: object) -> bool:
    """true or false"""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"1", "true", "yes", "on", "0", "false", "no", "off"}:
        return value.lower() in {"1", "true", "yes", "on"}
    raise ValueError


def _log_level(value: object) -> str:
    """one of debug, info, warning, error"""
    if not isinstance(value, str) or value.lower() not in {"debug", "info", "warning", "error"}:
        raise ValueError
    return value.lower()


def _option(default: Any, parse: Callable[[object], Any], help: str) -> Any:
    return dataclasses.field(default=default, metadata={"parse": parse, "help": help})


@dataclass(frozen=True)
class Settings:
    host: str = _option("127.0.0.1", _text, "TCP address to bind")
    port: int = _option(8080, _integer(0, 65535), "TCP port (0 picks a free one)")
    unix: str | None = _option(None, _optional_text, "Unix socket path, served beside TCP")
    no_tcp: bool = _option(False, _boolean, "serve only on the Unix socket")
    model: str | None = _option(
        None, _optional_text, "model directory or a Hugging Face repo id already in the local cache"
    )
    model_id: str | None = _option(None, _optional_text, "name the API reports for the model")
    max_body_bytes: int = _option(4 * 1024 * 1024, _integer(1024), "largest request body")
    default_max_tokens: int = _option(512, _integer(1), "max_tokens when a request sets none")
    max_tokens_limit: int = _option(8192, _integer(1), "largest max_tokens a request may ask")
    max_batch: int = _option(32, _integer(1, 1024), "sequences decoded together in one step")
    prefill_batch: int = _option(8, _integer(1, 1024), "prompts prefilled together")
    prefill_step: int = _option(2048, _integer(16), "prompt tokens per prefill chunk")
    keepalive_seconds: float = _option(
        5.0, _positive_number, "SSE comment interval while a stream has no tokens"
    )
    stream_interval: float = _option(
        0.01,
        _non_negative_number,
        "shortest gap in seconds between two SSE frames of a stream; faster tokens are sent "
        "together (0: a frame per token)",
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
    except (ValueError, TypeError):
        raise ConfigError(
            f"invalid value for option '{name}' (from {source}): {raw!r}; expected {parse.__doc__}"
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


def load_settings(
    cli: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """Merge file, environment and CLI values (those that are not None) into validated Settings."""
    env = os.environ if env is None else env
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    values: dict[str, Any] = {}

    path = config_file or (Path(env[f"{ENV_PREFIX}CONFIG"]) if f"{ENV_PREFIX}CONFIG" in env else None)
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        for name, raw in _read_file(path).items():
            values[name] = _parse(name, raw, str(path))

    for name in Settings.option_names():
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = _parse(name, env[key], key)

    for name, raw in cli.items():
        values[name] = _parse(name, raw, "--" + name.replace("_", "-"))

    settings = Settings(**values)
    if settings.no_tcp and settings.unix is None:
        raise ConfigError("option 'no_tcp' needs option 'unix': nothing would be served")
    return settings
