"""The `mlxhost` command. Flags are made from `Settings`, so each option has one name everywhere."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from .config import ConfigError, Settings, load_settings

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxhost", description="Serve local MLX language models.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve a model over the OpenAI-compatible API",
        description="Serve a model. With no --model, serves a small built-in demo model.",
    )
    serve.add_argument("--config", type=Path, help="TOML file of options (see config/mlxhost.toml)")
    for field in fields(Settings):
        flag = "--" + field.name.replace("_", "-")
        help = f"{field.metadata['help']} (default: {field.default})"
        if field.type in ("bool", bool):
            serve.add_argument(flag, dest=field.name, action="store_const", const=True, help=help)
        elif field.metadata["repeat"]:
            serve.add_argument(flag, dest=field.name, action="append", metavar=field.name.upper(), help=help)
        else:
            serve.add_argument(flag, dest=field.name, metavar=field.name.upper(), help=help)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(_parser().parse_args(argv))
    command, config_file = args.pop("command"), args.pop("config")
    try:
        settings = load_settings(cli=args, config_file=config_file)
    except ConfigError as exc:
        sys.exit(f"mlxhost: {exc}")
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO: one line per proxied request is noise, not news.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if command == "serve":
        _serve(settings)


def _serve(settings: Settings) -> None:
    import anyio

    from .server import StartupError, serve
    from .worker.model_source import ModelNotFound

    try:
        anyio.run(serve, settings, backend="asyncio")
    except* (StartupError, ModelNotFound) as group:
        sys.exit(f"mlxhost: {group.exceptions[0]}")
