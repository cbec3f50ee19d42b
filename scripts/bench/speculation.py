"""--speculation: speculative decoding (prompt lookup, the host's `speculate = "lookup"`) against
none (`speculate = "off"`), on isolated hosts over HTTP, beside raw mlx-lm in this process
(`bench.speculation_raw`: plain, and mlx-lm's own speculation with a draft model) (issue 29).

    python scripts/bench --speculation [--smoke] [--lines 300] [--concurrency 1,4,8] [--repeats 3]
                         [--copy-model built|lora] [--json PATH]

Two workloads, each on hosts of its own (one speculating, one not, both up for the whole
workload), greedy, streamed:

  edit    the prompt holds a `--lines`-line file (`bench.speculation_data`) and asks for two small
          edits; the answer re-emits the file. The model copies: `--copy-model built` (the default)
          is `bench.speculation_copier`'s, whose weights are set, not trained; `--copy-model lora`
          is a demo model fine-tuned on edit examples by the host's own `finetune` and `fuse` jobs
          (`bench.speculation_model`), which on this project's 2-core CPU does not learn to copy
          in any affordable time (the spike is told there): it measures the path, not speculation.
  random  a question of random words, nothing in it to copy, on the copy model's base (the agent
          demo model, random weights): a copy model would copy even a random prompt.

Each round takes every concurrency (`--concurrency`, 1, 4 and 8) in turn, and at each the arms in
an order that rotates from round to round: the two hosts with the same requests, new ones every
round and concurrency (so the host's prompt cache finds nothing), and at one stream raw mlx-lm,
plain and speculative. `bench.speculation_figures` has the arithmetic and the JSON; the copy
model's accuracy comes from the raw arm's answers and one teacher-forced pass. The JSON goes to
--json, or for a full run to docs/bench-speculation-<model>.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import signal
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx

from bench import hosts
from bench.figures import json_safe, median, progress
from bench.plan import parse_concurrency
from bench.report import machine_info, versions
from bench.settings import MAX_BATCH, REPO_ROOT, REQUEST_TIMEOUT_S
from bench.speculation_copier import build_copier
from bench.speculation_data import edit_file, random_prompt
from bench.speculation_figures import (
    AnswerFigures,
    CopyFigures,
    Run,
    Settings,
    SpeculationDocument,
    StepPrice,
    copied_share,
    print_speculation,
    targets_of,
    workload_of,
)
from bench.speculation_model import CopyModel, CopyTraining, build_copy_model
from bench.speculation_raw import Answer, RawCopy
from bench.speculation_streams import HOST_ARMS, arm_options, batch, host_flags
from mlxhost import demo

BASE = "agent"  # the demo size the copy models start from: a 64k context, a tokenizer of words
WORK = Path.home() / ".cache" / "mlxhost-bench" / "speculation"
EDITS = 2
RANDOM_WORDS = 48
SEEDS = {"edit": 2900, "random": 2901}
# The edit answers' max_tokens: the expected answer's tokens and this share more (a model that
# strays may write longer), so that every arm writes the whole file back.
ANSWER_SLACK = 1.1
# --copy-model lora: the fine-tune's setup, the spike's first (`bench.speculation_model`); --smoke
# trains a few iterations, for the path alone.
LORA = CopyTraining(
    base=BASE, file_lines=10, train_examples=256, valid_examples=4, iters=100, batch_size=4, rank=8,
    learning_rate=1e-3, max_seq_length=1024,
)  # fmt: skip
LORA_SMOKE = CopyTraining(
    base=BASE, file_lines=4, train_examples=8, valid_examples=2, iters=4, batch_size=2, rank=4,
    learning_rate=1e-3, max_seq_length=512,
)  # fmt: skip


@dataclass(frozen=True)
class Options:
    smoke: bool
    lines: int
    concurrency: list[int]
    repeats: int
    max_tokens: int  # the random workload's
    draft_tokens: int
    copy_model: str  # "built" or "lora"
    work: Path
    json_path: Path | None
    retrain: bool


def parse(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(prog="bench --speculation", description=__doc__.splitlines()[0])
    parser.add_argument("--speculation", action="store_true", required=True)
    parser.add_argument("--smoke", action="store_true", help="short files, few tokens, one round, c1 and c4")
    parser.add_argument("--lines", type=int, help="lines of each edit request's file (default 300; smoke 12)")
    parser.add_argument("--concurrency", type=parse_concurrency, help="streams at once (default 1,4,8)")
    parser.add_argument("--repeats", type=int, help="rounds; medians are reported (default 3; smoke 1)")
    parser.add_argument("--max-tokens", type=int, help="the random workload's max_tokens (default 256)")
    parser.add_argument("--draft-tokens", type=int, default=6, help="drafts per step, host and mlx-lm (6)")
    parser.add_argument("--copy-model", choices=("built", "lora"), default="built")
    parser.add_argument("--work", type=Path, default=WORK, help=f"where models are kept (default {WORK})")
    parser.add_argument("--retrain", action="store_true", help="--copy-model lora: train anew")
    parser.add_argument("--json", type=Path, help="where to write the document (default: docs/...)")
    args = parser.parse_args(argv)
    smoke = args.smoke
    return Options(
        smoke=smoke,
        lines=args.lines or (12 if smoke else 300),
        concurrency=args.concurrency or ([1, 4] if smoke else [1, 4, 8]),
        repeats=args.repeats or (1 if smoke else 3),
        max_tokens=args.max_tokens or (24 if smoke else 256),
        draft_tokens=args.draft_tokens,
        copy_model=args.copy_model,
        work=args.work,
        json_path=args.json,
        retrain=args.retrain,
    )


@dataclass(frozen=True)
class Request:
    messages: list[dict[str, str]]
    max_tokens: int
    expected: list[int]  # the edit workload's answer, the file with its edits, as tokens


Key = tuple[int, int, int]  # (round, concurrency, stream)


def requests_of(workload: str, options: Options, raw: RawCopy) -> dict[Key, Request]:
    """Every request of the workload, new ones for every round, concurrency and stream."""
    rng = random.Random(SEEDS[workload])
    requests = {}
    for number in range(options.repeats):
        for concurrency in options.concurrency:
            for stream in range(concurrency):
                if workload == "random":
                    request = Request(random_prompt(rng, RANDOM_WORDS), options.max_tokens, [])
                else:
                    edited = edit_file(rng, options.lines, EDITS)
                    expected = raw.tokens_of(edited.answer())
                    request = Request(edited.messages(), int(len(expected) * ANSWER_SLACK) + 8, expected)
                requests[(number, concurrency, stream)] = request
    return requests


def main(argv: Sequence[str]) -> int:
    # The hosts stop when their block ends, however it ends; so also on SIGTERM.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _main(argv: Sequence[str]) -> int:
    options = parse(argv)
    command = shlex.join(["python", "scripts/bench", *argv])
    machine, version = machine_info(), versions()
    base = demo.cached_model(f"bench-{BASE}", BASE)
    made: CopyModel | None = None
    if options.copy_model == "lora":
        made = build_copy_model(options.work, LORA_SMOKE if options.smoke else LORA, options.retrain)
        model_path, name = Path(made.path), f"{BASE}-lora"
    else:
        model_path, name = build_copier(base, options.work / "copier"), f"{BASE}-copier"
    flags = host_flags()
    if "--speculate" not in flags:
        progress("warning: `mlxhost serve` takes no --speculate here: both host arms are the same host")
    top = max(options.concurrency)
    host_options = {arm: arm_options(arm, options.draft_tokens, flags, top) for arm in HOST_ARMS}

    progress(f"edit workload: {options.lines}-line files, on {model_path}")
    raw = RawCopy(model_path)
    parameters = raw.parameters
    edits = requests_of("edit", options, raw)
    runs, answers = measure("edit", model_path, raw, edits, options, host_options)
    copy = copy_figures(raw, edits, answers)
    first = raw.encode(edits[(0, options.concurrency[0], 0)].messages)
    width = options.draft_tokens + 1
    price = StepPrice(len(first), width, raw.step_seconds(first, 1), raw.step_seconds(first, width))

    progress(f"random workload: {RANDOM_WORDS}-word questions, on {base}")
    raw = RawCopy(base)
    questions = requests_of("random", options, raw)
    runs += measure("random", base, raw, questions, options, host_options)[0]

    edit_tokens = max(request.max_tokens for request in edits.values())
    workloads = {
        "edit": workload_of(
            "edit", f"a {options.lines}-line file and {EDITS} edits to it, answered with the file",
            edit_tokens, runs, options.concurrency,
        ),
        "random": workload_of(
            "random", f"{RANDOM_WORDS} random words, on the base model", options.max_tokens, runs,
            options.concurrency,
        ),
    }  # fmt: skip
    settings = Settings(
        copy_model=options.copy_model, model=str(model_path), parameters=parameters,
        file_lines=options.lines, edits_per_file=EDITS,
        random_prompt_words=RANDOM_WORDS, concurrency=options.concurrency, repeats=options.repeats,
        draft_tokens=options.draft_tokens, raw_draft_model="the served model itself",
        host_flags=sorted(flags), host_options=host_options, speculation_available="--speculate" in flags,
        smoke=options.smoke,
    )  # fmt: skip
    targets = targets_of(workloads)
    document = SpeculationDocument(
        command, machine, version, settings, made, copy, price, workloads, targets, runs
    )
    print_speculation(document)
    default = None if options.smoke else REPO_ROOT / "docs" / f"bench-speculation-{name}.json"
    path = options.json_path or default
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(json_safe(document.to_json()), indent=2) + "\n")
        progress(f"wrote {path}")
    return 0


def measure(
    workload: str,
    model: Path,
    raw: RawCopy,
    requests: dict[Key, Request],
    options: Options,
    host_options: dict[str, list[str]],
) -> tuple[list[Run], dict[Key, Answer]]:
    """Every round of the workload on its two hosts (started now, stopped however it ends) and in
    this process: the runs, and the raw arm's answers."""
    started: dict[str, hosts.Host] = {}
    states = tempfile.TemporaryDirectory(prefix="mlxhost-bench-speculation-")
    try:
        for arm in HOST_ARMS:
            progress(f"  starting the {arm} host ({' '.join(host_options[arm])})")
            # A state directory each: one host must not find the other's prompt caches on disk.
            state = [f"--state-dir={Path(states.name) / arm}"]
            max_batch = max(MAX_BATCH, *options.concurrency)
            started[arm] = hosts.start(arm, model, max_batch, [*host_options[arm], *state])
        return anyio.run(_rounds, workload, started, raw, requests, options)
    except BaseException:
        for host in started.values():
            progress(f"mlxhost ({host.name}) log, the last lines:\n{host.log_tail(40)}")
        raise
    finally:
        for host in started.values():
            host.stop()
        states.cleanup()


async def _rounds(
    workload: str,
    started: dict[str, hosts.Host],
    raw: RawCopy,
    requests: dict[Key, Request],
    options: Options,
) -> tuple[list[Run], dict[Key, Answer]]:
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    clients = {
        arm: httpx.AsyncClient(base_url=host.url, timeout=REQUEST_TIMEOUT_S, limits=limits)
        for arm, host in started.items()
    }
    try:
        warm = requests[(0, options.concurrency[0], 0)].messages
        for client in clients.values():  # the first request of a worker compiles and fills caches
            await batch(client, [(warm, 8)])
        raw.plain(raw.encode(warm), 8)
        raw.speculative(raw.encode(warm), 8, options.draft_tokens)
        runs: list[Run] = []
        raw_answers: dict[Key, Answer] = {}
        for number in range(options.repeats):
            for concurrency in options.concurrency:
                mine = [requests[(number, concurrency, stream)] for stream in range(concurrency)]
                arms = [*HOST_ARMS, "raw", "raw_speculative"] if concurrency == 1 else list(HOST_ARMS)
                shift = number % len(arms)
                for arm in arms[shift:] + arms[:shift]:
                    if arm in clients:
                        answers, wall = await batch(clients[arm], [(r.messages, r.max_tokens) for r in mine])
                    else:
                        answers = [_raw(raw, arm, mine[0], options.draft_tokens)]
                        wall = answers[0].end_s
                    if arm == "raw":
                        raw_answers[(number, concurrency, 0)] = answers[0]
                    figures = [AnswerFigures.of(answer) for answer in answers]
                    run = Run(workload, arm, concurrency, number, wall, figures)
                    runs.append(run)
                    progress(
                        f"  {workload} round {number + 1}/{options.repeats} c{concurrency} {arm}: "
                        f"{sum(a.tokens for a in figures)} tokens, {run.decode_tok_s:.1f} tok/s "
                        f"decoding, {run.tok_s:.1f} end to end"
                    )
        return runs, raw_answers
    finally:
        for client in clients.values():
            await client.aclose()


def _raw(raw: RawCopy, arm: str, request: Request, draft_tokens: int) -> Answer:
    prompt = raw.encode(request.messages)
    if arm == "raw":
        return raw.plain(prompt, request.max_tokens)
    return raw.speculative(prompt, request.max_tokens, draft_tokens)


def copy_figures(raw: RawCopy, requests: dict[Key, Request], answers: dict[Key, Answer]) -> CopyFigures:
    """How much of the expected answers the raw arm's greedy answers reproduce; teacher-forced on
    the first request."""
    shares = [copied_share(answer.tokens, requests[key].expected) for key, answer in sorted(answers.items())]
    first = requests[min(answers)] if answers else next(iter(requests.values()))
    return CopyFigures(
        greedy_copied_share=median(shares),
        greedy_copied_shares=shares,
        teacher_forced_share=raw.teacher_forced(raw.encode(first.messages), first.expected),
        expected_answer_tokens=median([len(requests[key].expected) for key in answers]),
        answer_tokens=median([answer.count for answer in answers.values()]),
    )
