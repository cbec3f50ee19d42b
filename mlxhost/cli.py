"""The `mlxhost` command. Flags are made from `Settings`, so each option has one name everywhere."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from mlxhost.config import ConfigError, Settings
from mlxhost.config_sources import load_settings

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxhost", description="Serve local MLX language models.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve a model over the OpenAI-compatible API",
        description="Serve a model. With no --model, serves a built-in demo model (--demo says which).",
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
    for name, help in (
        ("status", "show a running host: workers, models, sessions (exit 1 if none can serve)"),
        ("tui", "the operator console for a running host"),
    ):
        command = commands.add_parser(name, help=help, description=help)
        _where(command)
        if name == "status":
            command.add_argument("--json", action="store_true", help="print JSON instead of a table")
    _jobs_parser(commands)
    _models_parsers(commands)
    return parser


def _models_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help = "fetch a model from the Hugging Face Hub into the local cache, with progress"
    pull = commands.add_parser(
        "pull", help=help,
        description=help + ". REPO is owner/name, optionally @REVISION (a branch, tag or commit). "
        "With --url or --unix, a running host pulls it as a job and serves it at once.",
    )  # fmt: skip
    pull.add_argument("repo", metavar="REPO[@REVISION]")
    pull.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
    convert = pull.add_mutually_exclusive_group()
    convert.add_argument("--quantize", type=int, choices=[2, 3, 4, 5, 6, 8], metavar="BITS",
                         help="convert a transformers checkpoint into an MLX model quantized to BITS")  # fmt: skip
    convert.add_argument("--dtype", choices=["float16", "bfloat16", "float32"],
                         help="convert a transformers checkpoint into an MLX model of this dtype")  # fmt: skip
    pull.add_argument("--state-dir", help="where a converted model is written (default: the host's state directory)")
    _where(pull)
    help = "the models on this machine: the Hugging Face cache and the state directory's outputs"
    models = commands.add_parser("models", help=help, description=help)
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    models.add_argument("--state-dir", help="the state directory to read (default: the host's)")
    models.add_argument("--url", help="the running host to ask which models it serves (default: the local host)")
    actions = models.add_subparsers(dest="action")
    rm = actions.add_parser("rm", help="remove a model from disk (refused while a host serves it)")
    rm.add_argument("model", metavar="MODEL", help="a repo id (owner/name) or a converted model's name")
    rm.add_argument("--state-dir", dest="rm_state_dir", help=argparse.SUPPRESS)
    rm.add_argument("--url", dest="rm_url", help=argparse.SUPPRESS)
    rm.add_argument("--json", dest="rm_json", action="store_true", help=argparse.SUPPRESS)


def _where(command: argparse.ArgumentParser) -> None:
    """The flags that say which host to ask, as `status` takes them."""
    where = command.add_mutually_exclusive_group()
    where.add_argument("--url", help="the host's HTTP address (default: the local host)")
    where.add_argument("--unix", help="the host's Unix socket")
    command.add_argument("--token", help="admin token (default: MLXHOST_ADMIN_TOKEN, or the local host's)")


def _jobs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help = "a running host's managed jobs: fine-tune, quantize, fuse"
    jobs = commands.add_parser("jobs", help=help, description=help)
    actions = jobs.add_subparsers(dest="action", required=True)
    submit = actions.add_parser(
        "submit", help="queue a job and print its id",
        description="Queue a job; options left out take the host's defaults. Prints the job's id.",
    )  # fmt: skip
    submit.add_argument("kind", choices=["finetune", "quantize", "fuse"], metavar="KIND",
                        help="finetune (LoRA), quantize or fuse")  # fmt: skip
    submit.add_argument("--model", help="the model to work on (fuse: the fine-tune's, by default)")
    submit.add_argument("--data", help="finetune: a dataset directory with train.jsonl and valid.jsonl")
    submit.add_argument("--iters", type=int, help="finetune: training iterations")
    submit.add_argument("--batch-size", type=int, help="finetune: batch size")
    submit.add_argument("--learning-rate", type=float, help="finetune: learning rate")
    submit.add_argument("--rank", type=int, help="finetune: LoRA rank")
    submit.add_argument("--num-layers", type=int, help="finetune: layers to adapt (-1: all)")
    submit.add_argument("--bits", type=int, help="quantize: bits per weight")
    submit.add_argument("--group-size", type=int, help="quantize: group size")
    submit.add_argument("--adapter", help="fuse: the id of a succeeded fine-tune")
    submit.add_argument("--json", action="store_true", help="print the job's record as JSON")
    listing = actions.add_parser("list", help="the host's jobs, newest first")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show = actions.add_parser("show", help="one job: its options, progress and result")
    show.add_argument("id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the job's record as JSON")
    tail = actions.add_parser(
        "tail", help="follow a job's log until it ends (exit 0 only if it succeeded)",
        description="Follow a job's log until it ends; exit 0 if it succeeded, 1 if not.",
    )  # fmt: skip
    tail.add_argument("id", metavar="ID")
    cancel = actions.add_parser("cancel", help="cancel a queued or running job")
    cancel.add_argument("id", metavar="ID")
    for command in (submit, listing, show, tail, cancel):
        _where(command)


def main(argv: Sequence[str] | None = None) -> None:
    args = vars(_parser().parse_args(argv))
    command = args.pop("command")
    if command == "status":
        from mlxhost.client.status import run_status

        sys.exit(run_status(args["url"], args["unix"], args["token"], args["json"]))
    if command == "tui":
        _tui(args["url"], args["unix"], args["token"])
        return
    if command == "jobs":
        from mlxhost.client.jobs import run_jobs

        sys.exit(run_jobs(**args))
    if command == "pull":
        from mlxhost.client.pull import run_pull

        sys.exit(run_pull(args.pop("repo"), **args))
    if command == "models":
        from mlxhost.client.library import run_models

        sys.exit(run_models(**args))
    config_file = args.pop("config")
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
    from mlxhost.errors import StartupError
    from mlxhost.runtime import eventloop
    from mlxhost.runtime.state_dir import PRIVATE_UMASK

    # Before anything is created: what the host and every child it starts write is theirs alone.
    os.umask(PRIVATE_UMASK)
    try:
        eventloop.run(serve, settings)
        if settings.in_process:  # this process loaded MLX: see exit_now
            from mlxhost.runtime.shutdown import exit_now

            exit_now(0)
    except* StartupError as group:
        sys.exit(f"mlxhost: {group.exceptions[0]}")


async def serve(settings: Settings) -> None:
    """`mlxhost serve`: the parent by default; the serving core in this process with --in-process.

    Only the --in-process path imports MLX: in the default mode the parent never loads it.
    """
    if settings.in_process:
        from mlxhost.worker.in_process import serve_in_process

        await serve_in_process(settings)
    else:
        from mlxhost.host.serve import serve_host

        await serve_host(settings)
    logging.getLogger("mlxhost").info("stopped")


def _tui(url: str | None, unix: str | None, token: str | None) -> None:
    from mlxhost.client.admin import HostNotFound, find_target
    from mlxhost_tui.app import make_app

    try:
        target = find_target(url, unix, token)
    except HostNotFound as exc:
        sys.exit(f"mlxhost: {exc}")
    make_app(target).run()
