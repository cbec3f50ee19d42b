"""The command line: what one run of the bench measures (`Plan`), from the options and their
defaults. Building the demo model, when no --model is given, happens here too (it is cached).

A run measures everything, or with one of the --*-only options one part alone (`Plan.only`): the
managed jobs, the agent scenario (on the bench model unless --size or --model says otherwise), the
closed-loop load, recovery, a worker group, or constrained decoding.

--family picks the demo model's variant (`mlxhost.demo.families`): the same weights with a model
family's chat template and tool-call syntax, which constrained decoding then forces its calls in."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.figures import progress
from bench.settings import MAX_BATCH
from mlxhost import demo
from mlxhost.demo.families import FAMILIES

DEFAULT_CONCURRENCY = [1, 4, 8, 16]
DEFAULT_MAX_TOKENS = {"tiny": 256, "bench": 64}
QUICK_MAX_TOKENS = {"tiny": 128, "bench": 32}
DEFAULT_SIZE = "tiny"
AGENT_SIZE = "bench"  # the agent scenario's default model: prefill costs what it costs on a real one
# The parts a run can measure alone: --jobs-only, --agent-only, --closed-loop-only, --recovery-only,
# --group-only, --constrained-only, --peers, --pull.
ONLY = ("jobs", "agent", "closed_loop", "recovery", "group", "constrained", "peers", "pull", "fairness")
# TTFT: single-stream requests after the throughput runs, the paths taking turns (bench.ttft).
TTFT_REQUESTS = {"full": 20, "quick": 10}
# mlx_lm.server listens with socketserver's backlog of 5: 8 or more connections at once overflow
# it, and the extra ones wait for the kernel's SYN retransmit (1 s), or are reset. It is given
# mlxhost's backlog (hypercorn's default, 100) unless --mlx-lm-server-backlog says otherwise.
MLX_LM_SERVER_BACKLOG = 100
CLOSED_LOOP_TOKENS = 400  # each closed-loop row's max_tokens, as in issue 14's profile
PULL_MB = {"full": 512, "smoke": 16}  # --pull: the repo's file of random bytes, MiB (--pull-mb)


@dataclass(frozen=True)
class Plan:
    model_path: Path
    size: str  # "tiny", "bench", or "custom" for --model
    max_tokens: int
    repeats: int
    concurrency: list[int]
    json_path: Path | None
    chart_path: Path
    ttft_requests: int
    mlx_lm_server_backlog: int
    quick: bool = False
    only: str | None = None  # one of ONLY: that part alone
    # Each closed-loop row's max_tokens: the profile (400), or --max-tokens when given.
    closed_loop_tokens: int = CLOSED_LOOP_TOKENS
    smoke: bool = False  # every part once, as short as it goes: for the test that the bench runs
    family: str = demo.DEFAULT_FAMILY  # the demo model's variant (--family); "custom" for --model
    install_vllm_mlx: bool = False  # --peers: install vllm-mlx into its venv if it is not there
    pull_mb: int = PULL_MB["full"]  # --pull: MiB of random bytes in the repo pulled (--pull-mb)

    def rounds(self, minimum: int) -> int:
        """Rounds of a part that alternates two arms: enough for medians (`minimum`), or one with
        --smoke."""
        return 1 if self.smoke else max(self.repeats, minimum)

    @property
    def jobs_only(self) -> bool:
        return self.only == "jobs"

    @property
    def max_batch(self) -> int:
        """Both paths decode at most this many rows per step: the server's default, or more."""
        return max(MAX_BATCH, *self.concurrency)


def parse_concurrency(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        message = f"not a comma-separated list of integers: {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be integers >= 1")
    return values


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench",
        description="Benchmark mlxhost over HTTP against raw mlx-lm and mlx_lm.server, one model.",
    )
    parser.add_argument("--model", type=Path, help="mlx-lm model directory (default: a demo model)")
    parser.add_argument(
        "--size",
        choices=sorted(DEFAULT_MAX_TOKENS),
        help=f"demo model to build in the cache when --model is not given (default: {DEFAULT_SIZE}; "
        f"{AGENT_SIZE} with --agent-only)",
    )
    parser.add_argument(
        "--family",
        choices=sorted(FAMILIES),
        help=f"the demo model's variant when --model is not given: a model family's chat template "
        f"and tool-call syntax, in which constrained decoding forces its calls (default: "
        f"{demo.DEFAULT_FAMILY}, whose constrained streams carry a response_format instead)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        help="tokens per generation (default: 256 for tiny, 64 for bench; halved by --quick)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        help="runs of each measurement; medians are reported (default: 3, 1 with --quick)",
    )
    parser.add_argument(
        "--concurrency",
        type=parse_concurrency,
        default=list(DEFAULT_CONCURRENCY),
        help="comma-separated stream counts; 1 is the single-stream test "
        f"(default: {','.join(map(str, DEFAULT_CONCURRENCY))})",
    )
    parser.add_argument(
        "--ttft-requests",
        type=int,
        help="single-stream TTFT requests per path after the throughput runs "
        f"(default: {TTFT_REQUESTS['full']}, {TTFT_REQUESTS['quick']} with --quick)",
    )
    parser.add_argument(
        "--mlx-lm-server-backlog",
        type=int,
        default=MLX_LM_SERVER_BACKLOG,
        help="listen backlog for mlx_lm.server, set before its main() runs; 0: as shipped "
        f"(socketserver's 5, which drops connections past it) (default: {MLX_LM_SERVER_BACKLOG}, "
        "mlxhost's)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one repeat, fewer tokens; a shorter agent scenario (an 800-token system prompt, 6 turns)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="--quick, and every part once and as short as it goes (one round where medians want "
        "several, shorter windows and fine-tunes): that the bench runs and writes every figure, for "
        "its test; the figures themselves mean little",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--jobs-only",
        action="store_const",
        const="jobs",
        dest="only",
        help="measure only the managed jobs: a fine-tune through mlxhost against mlx_lm.lora, and "
        "serving before and after a job (bench.jobs)",
    )
    only.add_argument(
        "--agent-only",
        action="store_const",
        const="agent",
        dest="only",
        help="measure only the agent scenario: TTFT per turn of a tool-calling conversation on raw "
        "mlx-lm, mlx_lm.server and mlxhost, with a worker kill and a host restart (bench.agent)",
    )
    only.add_argument(
        "--closed-loop-only",
        action="store_const",
        const="closed_loop",
        dest="only",
        help="measure only the closed-loop load: raw BatchGenerator and the isolated server with "
        "every finished row replaced at once (bench.closed_loop)",
    )
    only.add_argument(
        "--recovery-only",
        action="store_const",
        const="recovery",
        dest="only",
        help="measure only recovery: kill -9 of the isolated server's worker to the next 200 "
        "(bench.recovery)",
    )
    only.add_argument(
        "--group-only",
        action="store_const",
        const="group",
        dest="only",
        help="measure only a worker group: the model split across two ranks (mlx.launch, ring, "
        "loopback) against one worker, at 1 and 8 streams (bench.group)",
    )
    only.add_argument(
        "--constrained-only",
        action="store_const",
        const="constrained",
        dest="only",
        help="measure only constrained decoding: free and mixed runs of 8 streams on an isolated "
        "server, and grammar compiles (bench.constrained)",
    )
    # --peers (bench.peers): mlxhost against vllm-mlx and mlx_lm.server, paired rounds.
    only.add_argument(
        "--peers",
        action="store_const",
        const="peers",
        dest="only",
        help="measure only mlxhost against its peers, vllm-mlx and mlx_lm.server: aggregate tok/s at "
        "each concurrency in 5 alternating rounds, distinct prompts, every reply max_tokens long "
        "(bench.peers)",
    )
    # --join-gap (bench.join_gap): a running stream's largest token gap while a long prompt joins.
    only.add_argument(
        "--join-gap",
        action="store_const",
        const="join_gap",
        dest="only",
        help="measure only how long running streams wait for a token while a 4,000-token prompt joins "
        "them: the padded KV layout (before) against per_row (after), each on a server of its own, at "
        "1, 4 and 8 running streams (or --concurrency), alternating rounds (bench.join_gap)",
    )
    # --batch-kv (bench.batch_kv): raw BatchGenerator against RowBatch, in this process.
    only.add_argument(
        "--batch-kv",
        action="store_const",
        const="batch_kv",
        dest="only",
        help="measure only mlx-lm's BatchGenerator against mlxhost's RowBatch in this process, decode "
        "only: aligned against mixed-length rows, KV bytes (and with kv_bits=4), rows inserted one "
        "per step against all at once; alternating rounds, medians (bench.batch_kv)",
    )
    # --embeddings (bench.embeddings): POST /v1/embeddings against the raw forward, in this process.
    only.add_argument(
        "--embeddings",
        action="store_const",
        const="embeddings",
        dest="only",
        help="measure only POST /v1/embeddings on an isolated server against the raw forward of the "
        "same embedding model in this process: short and mixed-length inputs in requests of 1, 16 "
        "and 64, and 1,000 code chunks; alternating rounds, medians (bench.embeddings)",
    )
    # --fairness (bench.fairness): pooled work beside other work, through an isolated host.
    only.add_argument(
        "--fairness",
        action="store_const",
        const="fairness",
        dest="only",
        help="measure only how pooled work shares a worker: a one-token embeddings request's time "
        "behind 6 inputs of 3,900 ids, and a chat stream's largest gap between frames when 64 inputs "
        "of 200 tokens arrive first (bench.fairness)",
    )
    # --pull (bench.pull): mlxhost pull against hf download, and serving while the host pulls.
    only.add_argument(
        "--pull",
        action="store_const",
        const="pull",
        dest="only",
        help="measure only pulls from a Hugging Face Hub on loopback (mlxhost.testing_hub): mlxhost pull "
        "against hf download of the same repo (the tiny demo model and --pull-mb of random bytes), MB/s, "
        "alternating rounds; and a host's aggregate decode tok/s of 4 streams while it pulls the repo "
        "(POST /admin/models/pull) against without (bench.pull)",
    )
    parser.add_argument(
        "--pull-mb",
        type=int,
        help=f"with --pull: MiB of random bytes in the repo pulled (default: {PULL_MB['full']}, "
        f"{PULL_MB['smoke']} with --smoke; shrunk to what the disk holds)",
    )
    parser.add_argument(
        "--install-vllm-mlx",
        action="store_true",
        help="with --peers: install vllm-mlx into a venv of its own under ~/.cache/mlxhost-bench if it "
        "is not there (about 7 GB; without it a missing vllm-mlx is skipped)",
    )
    parser.add_argument("--json", type=Path, help="also write every figure and ratio to this file")
    parser.add_argument(
        "--chart",
        type=Path,
        help="PNG of total tok/s against concurrency (default: beside --json with .png, else "
        "bench.png; needs matplotlib: pip install -e '.[bench]')",
    )
    return parser


def parse_args(argv: Sequence[str] | None) -> Plan:
    options = parser()
    args = options.parse_args(argv)
    size = args.size or (AGENT_SIZE if args.only == "agent" else DEFAULT_SIZE)
    args.quick = args.quick or args.smoke
    defaults = QUICK_MAX_TOKENS if args.quick else DEFAULT_MAX_TOKENS
    max_tokens = args.max_tokens if args.max_tokens is not None else defaults[size]
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    if max_tokens < 2:
        options.error("--max-tokens must be at least 2 (a decode rate needs two tokens)")
    if repeats < 1:
        options.error("--repeats must be at least 1")
    ttft_requests = args.ttft_requests
    if ttft_requests is None:
        ttft_requests = TTFT_REQUESTS["quick" if args.quick else "full"]
    if ttft_requests < 0:
        options.error("--ttft-requests must be at least 0")
    if args.mlx_lm_server_backlog < 0:
        options.error("--mlx-lm-server-backlog must be at least 0")
    pull_mb = args.pull_mb if args.pull_mb is not None else PULL_MB["smoke" if args.smoke else "full"]
    if pull_mb < 1:
        options.error("--pull-mb must be at least 1")
    if args.chart is not None:
        chart_path = args.chart
    elif args.json is not None:
        chart_path = args.json.with_suffix(".png")
    else:
        chart_path = Path("bench.png")
    family = args.family or demo.DEFAULT_FAMILY
    if args.model is not None:
        if not args.model.is_dir():
            options.error(f"--model: {args.model} is not a directory")
        if args.family is not None:
            options.error(
                "--family picks a demo model's variant: a --model's family is the one mlx-lm infers"
            )
        model_path, size, family = args.model.resolve(), "custom", "custom"
    else:
        variant = "" if family == demo.DEFAULT_FAMILY else f" ({family} variant)"
        progress(f"building the {size} demo model{variant} (once; it is cached)")
        name = f"bench-{size}" if family == demo.DEFAULT_FAMILY else f"bench-{size}-{family}"
        model_path = demo.cached_model(name, size, family=family)
    return Plan(
        model_path, size, max_tokens, repeats, args.concurrency, args.json, chart_path,
        ttft_requests, args.mlx_lm_server_backlog, args.quick, args.only,
        CLOSED_LOOP_TOKENS if args.max_tokens is None else max_tokens, args.smoke, family,
        args.install_vllm_mlx, pull_mb,
    )  # fmt: skip
