"""Where settings come from, and in which precedence: each source's values are checked by their
option's parser (`Settings`' field metadata) and merged into one `Settings`, then the options
that depend on each other are checked together.

Precedence, lowest first: built-in defaults, the TOML file (`--config` or `config/mlxhost.toml`
when present in the working directory), `MLXHOST_*` environment variables, command-line flags.
A worker reads its parent's values from its launch record instead (`settings_from_options`).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from mlxhost.config import ConfigError, Settings
from mlxhost.config_values import InvalidValue
from mlxhost.catalog.spec import check_names

__all__ = ["load_settings", "settings_from_options"]

ENV_PREFIX = "MLXHOST_"
DEFAULT_CONFIG_FILE = Path("config/mlxhost.toml")


def _parse(name: str, raw: object, source: str) -> Any:
    field = next(f for f in fields(Settings) if f.name == name)
    parse = field.metadata["parse"]
    try:
        return parse(raw)
    except (ValueError, TypeError) as exc:
        expected = str(exc) if isinstance(exc, InvalidValue) else parse.__doc__
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
            check_names((spec,))
        except InvalidValue as exc:
            name = "model_aliases" if settings.model_aliases else "model_id"
            raise ConfigError(
                f"invalid value for option '{name}' (from {sources[name]}): "
                f"{getattr(settings, name)!r}; {exc}"
            ) from None
        settings = dataclasses.replace(settings, model=(spec,))
    return settings
