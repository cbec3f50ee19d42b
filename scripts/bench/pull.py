"""--pull: pulling a model from a Hugging Face Hub, `mlxhost pull` against `hf download`, and
serving on a host while it pulls. Measured alone, in this order:

The repo. The tiny demo model (`mlxhost.demo`) and a file of random bytes, `filler.safetensors`,
of --pull-mb MiB (512 by default, 16 with --smoke; shrunk to what the disk holds, with the reason
said, or skipped where it holds too little), in a temporary folder. Every file of it is one that
`mlxhost pull` takes (`mlxhost.catalog.hub.choose_files`) and `hf download` takes every file, so
both fetch the same set: each pull's snapshot is listed and checked against the repo's files. It is
served by `python -m mlxhost.testing_hub` in a process of its own, on loopback, at the lowest CPU
priority (nice 19): it stands in for a remote hub, whose CPU is not this machine's; both clients
of the throughput part meet the same hub.

Throughput. Alternating rounds (max(--repeats, 3); 1 with --smoke), after one untimed pull of
each (not with --smoke): `python -m mlxhost pull REPO --quiet` and `hf download REPO --quiet` (the
`hf` of this venv), each a process of its own with an empty HF_HUB_CACHE, a temporary HF_HOME (no
saved token) and HF_HUB_DISABLE_UPDATE_CHECK=1; each timed from its start to its exit, the
interpreter's start and imports included, as a user waits for them. MB/s is the snapshot's bytes
over those seconds; the figure is mlxhost's median over hf's. Target: >= 0.95.

Serving while pulling. An isolated host on the run's model (`--model`, or the demo model), with
the hub as its HF_ENDPOINT and a cache of its own. A window is SERVING_LANES lanes of streamed chat
completions of the run's prompt at once, max_tokens each (`bench.streams`), each lane's streams
one after another for WINDOW_SHARE of `mlxhost pull`'s median time alone (a lane starts no
stream that would end past it, judged by its last one); its figure is the aggregate decode rate:
each lane's tokens over its streams' seconds (request to end: the prompt's prefill is
milliseconds; see `ServingWindow.decode_tok_s`), summed over the lanes. Alternating rounds (max(--repeats, 2); 1 with --smoke) of a window without a pull
and a window with one: POST /admin/models/pull of the repo right before the streams start, the
job's state read when the window ends (a window that outlasts the pull is counted, and said: a
pull beside serving takes longer than alone, so it should not); the job is then followed to its
end, its snapshot checked, and the repo's folder removed from the host's cache, so that every
pull starts from nothing. The pull's own MB/s while serving is the repo's bytes over the job's
started_at to ended_at (its process's start included, as a pull's is above). Target: with /
without >= 0.9. On this machine the hub's process and the pull's both take CPU from the host:
where cores are few, serving pays for both.

Of mlxhost the bench uses here its CLI, the hub-protocol server (`mlxhost.testing_hub`), the demo
model, the host harness (`mlxhost.testing`) and the admin client; it imports no MLX for this.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx

from bench import hosts
from bench.figures import at_least, median, number, print_table, progress, ratio, verdict
from bench.plan import Plan
from bench.results.pull import (
    PullDocument,
    PullRepo,
    PullRun,
    PullSummary,
    PullThroughput,
    ServingWhilePulling,
    ServingWindow,
)
from bench.runs import StreamRun
from bench.settings import MB, REPO_ROOT, REQUEST_TIMEOUT_S, SERVER_START_TIMEOUT_S, alternating
from bench.streams import HTTPBench, gather
from mlxhost import demo
from mlxhost.client.admin import AdminClient, Target
from mlxhost.testing import start_host
from mlxhost.wire.admin.jobs import JobRecord, JobState

__all__ = [
    "PULL_VS_HF_TARGET",
    "SERVING_WHILE_PULLING_TARGET",
    "PullDocument",
    "measure_pull",
    "print_pull",
]

PULL_VS_HF_TARGET = 0.95  # mlxhost pull / hf download, MB/s
SERVING_WHILE_PULLING_TARGET = 0.9  # aggregate decode tok/s with a pull running / without
PULL_MIN_ROUNDS = 3
SERVING_MIN_ROUNDS = 2
SERVING_LANES = 4  # streams at once
# A window lasts this share of `mlxhost pull`'s median time alone, and MIN_WINDOW_S at least.
WINDOW_SHARE = 0.85
MIN_WINDOW_S = 0.3
WARM_TOKENS = 16  # the host's warm-up batch
REPO_ID = "mlxhost-bench/filler"
FILLER = "filler.safetensors"
WRITE_CHUNK = 16 * MB
# The disk must hold the repo and one cache of it at a time (each is removed once measured); a
# third copy's room, and this much more, is asked for, so that the pulls never fill it.
DISK_COPIES = 3
DISK_MARGIN = 256 * MB
MIN_FILLER_MB = 8  # less than this would measure the processes' start, not a transfer
HUB_START_TIMEOUT_S = 120.0  # it hashes every file before it serves
PULL_TIMEOUT_S = 900.0
JOB_POLL_S = 0.05
STOP_TIMEOUT_S = 10.0
HOST_OPTIONS = ["--standby-workers=0"]  # besides --model, --host, --max-batch and the admin token


class PullBenchError(Exception):
    """A pull failed, or the clients fetched different files: nothing to compare."""


# -- the repo and its hub ------------------------------------------------------------------------


def filler_size(asked_mb: int, folder: Path) -> tuple[int, str | None]:
    """The filler's MiB the disk under `folder` holds room for (0: none), and why it is not
    `asked_mb`, if it is not."""
    free = shutil.disk_usage(folder).free
    if DISK_COPIES * asked_mb * MB + DISK_MARGIN <= free:
        return asked_mb, None
    fits = max(0, (free - DISK_MARGIN) // (DISK_COPIES * MB))
    said = (
        f"{folder} has {free / MB:,.0f} MiB free: {asked_mb} MiB of filler needs "
        f"{DISK_COPIES * asked_mb + DISK_MARGIN // MB:,} MiB (the repo, a cache of it, room to spare)"
    )
    if fits < MIN_FILLER_MB:
        return 0, f"{said}; {fits} MiB would fit, less than {MIN_FILLER_MB}: skipped"
    return int(fits), f"{said}; shrunk to {fits} MiB"


def make_repo(folder: Path, filler_mb: int) -> None:
    """The tiny demo model's files and `filler_mb` MiB of random bytes, in `folder`."""
    shutil.copytree(demo.ensure_demo_model(size="tiny"), folder)
    with (folder / FILLER).open("wb") as out:
        left = filler_mb * MB
        while left > 0:
            out.write(os.urandom(min(WRITE_CHUNK, left)))
            left -= WRITE_CHUNK


def listing(folder: Path) -> tuple[list[str], int]:
    """The files under `folder` (links followed), by path relative to it, and their bytes."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return [p.relative_to(folder).as_posix() for p in files], sum(p.stat().st_size for p in files)


def checkout_env() -> dict[str, str]:
    """This checkout's mlxhost first on the path, installed or not (as `bench.hosts` does)."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}


def client_env(endpoint: str, cache: Path, home: Path) -> dict[str, str]:
    """A Hub client's environment: the loopback hub, `cache`, no saved token, no update check."""
    return {
        **checkout_env(),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_CACHE": str(cache),
        "HF_HOME": str(home),
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_OFFLINE": "0",
        "HF_TOKEN": "",  # empty is none: the client falls back to HF_HOME's token file, which is not there
        "HUGGING_FACE_HUB_TOKEN": "",
    }


HUB_NICENESS = 19


@contextlib.contextmanager
def hub_process(repo_id: str, folder: Path, log: Path) -> Iterator[str]:
    """`python -m mlxhost.testing_hub` serving `folder` as `repo_id`, in a process of its own; its
    endpoint, once it serves. Stopped (SIGTERM, then SIGKILL) when the block ends."""
    command = [sys.executable, "-m", "mlxhost.testing_hub", f"--repo={repo_id}={folder}"]
    with log.open("w") as errors:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=errors, text=True, env={**os.environ, **checkout_env()},
            preexec_fn=lambda: os.nice(HUB_NICENESS),  # a remote hub's CPU is not ours (see the module)
        )  # fmt: skip
    try:
        lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            line = lines.get(timeout=HUB_START_TIMEOUT_S)
        except queue.Empty:
            raise PullBenchError(f"the hub did not serve within {HUB_START_TIMEOUT_S:g} s") from None
        if not line.startswith("HF_ENDPOINT="):
            process.wait(timeout=STOP_TIMEOUT_S)
            raise PullBenchError(f"the hub exited ({process.returncode}): {log.read_text()[-2000:]}")
        yield line.strip().partition("=")[2]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- throughput: mlxhost pull against hf download ------------------------------------------------


def hf_command() -> list[str]:
    """The `hf` CLI of this interpreter's environment; its entry point run directly without one."""
    script = Path(sys.executable).parent / "hf"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from huggingface_hub.cli.hf import main; sys.exit(main())"]


def commands(repo_id: str) -> dict[str, list[str]]:
    return {
        "mlxhost": [sys.executable, "-m", "mlxhost", "pull", repo_id, "--quiet"],
        "hf": [*hf_command(), "download", repo_id, "--quiet"],
    }


def shown(command: list[str], repo_id: str) -> list[str]:
    """A command as the report shows it: no machine's paths, REPO for the repo's id."""
    words = ["python" if w == sys.executable else w for w in command]
    words = ["hf" if w == str(Path(sys.executable).parent / "hf") else w for w in words]
    return ["REPO" if w == repo_id else w for w in words]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pull_once(path: str, command: list[str], endpoint: str, work: Path, round_number: int) -> PullRun:
    """One pull into an empty cache, timed; its snapshot listed, then the cache removed."""
    cache, home = work / f"cache-{path}", work / f"home-{path}"
    for folder in (cache, home):
        shutil.rmtree(folder, ignore_errors=True)
    home.mkdir()
    env = {**os.environ, **client_env(endpoint, cache, home)}
    cpu = children_cpu_s()
    began = time.perf_counter()
    done = subprocess.run(
        command, cwd=work, env=env, capture_output=True, text=True, timeout=PULL_TIMEOUT_S, check=False
    )
    seconds = time.perf_counter() - began
    cpu_s = children_cpu_s() - cpu
    try:
        if done.returncode != 0:
            raise PullBenchError(
                f"{path}: {' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}"
            )
        printed = [line for line in done.stdout.splitlines() if line.strip()]
        snapshot = Path(printed[-1].strip()) if printed else None
        if snapshot is None or not snapshot.is_dir():
            raise PullBenchError(f"{path}: no snapshot folder on stdout: {done.stdout[-2000:]!r}")
        files, size = listing(snapshot)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    return PullRun(path, round_number, seconds, size, files, cpu_s)


def describe_pull(run: PullRun) -> str:
    return (
        f"{len(run.files)} files, {run.bytes / MB:,.1f} MiB in {run.seconds:.2f} s: {run.mb_per_s:,.1f} MB/s, "
        f"{run.cores:.2f} cores"
    )


def measure_throughput(plan: Plan, repo: PullRepo, endpoint: str, work: Path) -> list[PullRun]:
    """Every round of both clients (after a warm-up of each, but with --smoke); the runs."""
    rounds = plan.rounds(PULL_MIN_ROUNDS)
    ways = commands(repo.id)
    if not plan.smoke:
        for path in ("hf", "mlxhost"):
            progress(f"  warm-up: {path}: {describe_pull(pull_once(path, ways[path], endpoint, work, -1))}")
    runs: list[PullRun] = []
    for round_number, through_mlxhost in alternating(rounds):
        path = "mlxhost" if through_mlxhost else "hf"
        run = pull_once(path, ways[path], endpoint, work, round_number)
        if run.files != repo.files or run.bytes != repo.bytes:
            raise PullBenchError(
                f"{path} fetched {run.files} ({run.bytes} bytes); the repo holds {repo.files} "
                f"({repo.bytes} bytes): the two pulls would not compare"
            )
        runs.append(run)
        progress(f"  round {round_number + 1}/{rounds} {path}: {describe_pull(run)}")
    return runs


def throughput_figures(runs: list[PullRun], repo_id: str, warm_up: int) -> PullThroughput:
    def of(path: str) -> list[PullRun]:
        return sorted((r for r in runs if r.path == path), key=lambda r: r.round)

    mine, theirs = of("mlxhost"), of("hf")
    by_round = {r.round: r.mb_per_s for r in theirs}
    mlxhost_mb, hf_mb = median([r.mb_per_s for r in mine]), median([r.mb_per_s for r in theirs])
    vs_hf = ratio(mlxhost_mb, hf_mb)
    return PullThroughput(
        rounds=len(mine),
        warm_up_rounds=warm_up,
        commands={path: shown(command, repo_id) for path, command in commands(repo_id).items()},
        mlxhost_mb_per_s=mlxhost_mb,
        hf_mb_per_s=hf_mb,
        mlxhost_s=median([r.seconds for r in mine]),
        hf_s=median([r.seconds for r in theirs]),
        mlxhost_vs_hf=vs_hf,
        mlxhost_vs_hf_by_round=[ratio(r.mb_per_s, by_round[r.round]) for r in mine if r.round in by_round],
        mlxhost_cores=median([r.cores for r in mine]),
        hf_cores=median([r.cores for r in theirs]),
        same_files=len({tuple(r.files) for r in runs}) == 1,
        target=PULL_VS_HF_TARGET,
        meets_target=at_least(vs_hf, PULL_VS_HF_TARGET),
    )


# -- serving while the host pulls ----------------------------------------------------------------


def start_serving_host(plan: Plan, endpoint: str, cache: Path, home: Path) -> hosts.Host:
    """An isolated host on the run's model, pulling from the loopback hub into `cache`."""
    running = start_host(
        f"--model={plan.model_path}", "--host=127.0.0.1", f"--max-batch={plan.max_batch}", *HOST_OPTIONS,
        hosts.admin_token_option(), env=client_env(endpoint, cache, home), timeout=SERVER_START_TIMEOUT_S,
    )  # fmt: skip
    return hosts.Host("pull", running)


def remove_cached(cache: Path, repo_id: str) -> None:
    """The repo's folder in the host's cache, gone: the next pull starts from nothing."""
    shutil.rmtree(cache / ("models--" + repo_id.replace("/", "--")), ignore_errors=True)


async def finished(admin: AdminClient, job_id: str) -> JobRecord:
    """The job once it has ended."""
    deadline = time.monotonic() + PULL_TIMEOUT_S
    while True:
        record = await admin.job(job_id)
        if record.job_state.terminal:
            return record
        if time.monotonic() > deadline:
            raise PullBenchError(f"the pull job {job_id} did not end within {PULL_TIMEOUT_S:g} s")
        await anyio.sleep(JOB_POLL_S)


def snapshot_of(record: JobRecord) -> Path:
    """The snapshot a succeeded pull job made (its output's source.json names it)."""
    assert record.result is not None
    return Path(json.loads((Path(record.result.path) / "source.json").read_text())["path"])


async def lane(http: HTTPBench, began: float, target_s: float) -> list[StreamRun]:
    """Streams one after another, until the next would end past `target_s` after `began` (judged by
    the last one's length); one at least."""
    runs: list[StreamRun] = []
    while True:
        run = await http.stream()
        runs.append(run)
        if time.perf_counter() - began + run.total_s > target_s:
            return runs


async def window(
    http: HTTPBench,
    admin: AdminClient,
    repo: PullRepo,
    cache: Path,
    round_number: int,
    pulling: bool,
    target_s: float,
) -> ServingWindow:
    """One window of SERVING_LANES lanes of streams, with a pull of the repo started right before
    it or not."""
    job: JobRecord | None = None
    if pulling:
        remove_cached(cache, repo.id)
        job = await admin.pull_model(repo.id)
    began = time.perf_counter()
    lanes = await gather([functools.partial(lane, http, began, target_s) for _ in range(SERVING_LANES)])
    window_s = time.perf_counter() - began
    tokens = [run.tokens for runs in lanes for run in runs]
    lane_tokens = [sum(run.tokens for run in runs) for runs in lanes]
    lane_s = [sum(run.total_s for run in runs) for runs in lanes]
    if job is None:
        return ServingWindow(round_number, False, target_s, tokens, lane_tokens, lane_s, window_s)
    at_end = await admin.job(job.id)
    record = await finished(admin, job.id)
    if record.job_state is not JobState.SUCCEEDED:
        raise PullBenchError(f"the host's pull of {repo.id} ({job.id}) ended {record.state}: {record.error}")
    files, size = listing(snapshot_of(record))
    remove_cached(cache, repo.id)
    assert record.started_at is not None and record.ended_at is not None
    return ServingWindow(
        round_number, True, target_s, tokens, lane_tokens, lane_s, window_s,
        job=job.id,
        job_state_at_end=at_end.state,
        pulled_bytes_at_end=None if at_end.progress is None else at_end.progress.iteration,
        pull_s=(record.ended_at - record.started_at) / 1e3,
        pull_bytes=size,
        pull_same_files=files == repo.files and size == repo.bytes,
    )  # fmt: skip


def describe_window(found: ServingWindow) -> str:
    said = (
        f"{len(found.tokens)} streams, {sum(found.tokens)} tokens, {found.decode_tok_s:,.1f} decode tok/s "
        f"aggregate, window {found.window_s:.2f} s"
    )
    if not found.pulling:
        return said + ", no pull"
    within = "within the pull" if found.within_pull else f"OUTLASTED the pull ({found.job_state_at_end})"
    return f"{said}, {within}; the pull {found.pull_s:.2f} s, {found.pull_mb_per_s:,.1f} MB/s"


async def serve_while_pulling(
    plan: Plan, prompt: str, host: hosts.Host, repo: PullRepo, cache: Path, target_s: float
) -> list[ServingWindow]:
    rounds = plan.rounds(SERVING_MIN_ROUNDS)
    limits = httpx.Limits(max_connections=SERVING_LANES + 4, max_keepalive_connections=SERVING_LANES + 4)
    target = Target(url=host.url, token=hosts.ADMIN_TOKEN)
    windows: list[ServingWindow] = []
    async with (
        httpx.AsyncClient(base_url=host.url, timeout=REQUEST_TIMEOUT_S, limits=limits) as client,
        AdminClient(target, timeout=30.0) as admin,
    ):
        http = HTTPBench(client, prompt, plan.max_tokens)
        await http.stream()  # warm-up: one stream, then a short batch (which opens the connections)
        await http.batch(SERVING_LANES, min(plan.max_tokens, WARM_TOKENS))
        for round_number, pulling in alternating(rounds):
            found = await window(http, admin, repo, cache, round_number, pulling, target_s)
            windows.append(found)
            which = "with" if pulling else "without"
            progress(f"  round {round_number + 1}/{rounds} {which} a pull: {describe_window(found)}")
    return windows


def window_target_s(throughput: PullThroughput) -> float:
    """A window's length: a share of the pull's time alone (a pull beside serving takes longer),
    so that it ends before the host's pull does; MIN_WINDOW_S at least."""
    return max(MIN_WINDOW_S, WINDOW_SHARE * throughput.mlxhost_s)


def serving_figures(plan: Plan, windows: list[ServingWindow]) -> ServingWhilePulling:
    without = [w for w in windows if not w.pulling]
    pulled = [w for w in windows if w.pulling]
    rate_without = {w.round: w.decode_tok_s for w in without}
    decode_without = median([w.decode_tok_s for w in without])
    decode_with = median([w.decode_tok_s for w in pulled])
    with_vs_without = ratio(decode_with, decode_without)
    return ServingWhilePulling(
        rounds=len(pulled),
        lanes=SERVING_LANES,
        max_tokens=plan.max_tokens,
        window_target_s=windows[0].target_s,
        host_options=[f"--max-batch={plan.max_batch}", *HOST_OPTIONS],
        decode_tok_s_without=decode_without,
        decode_tok_s_with=decode_with,
        with_vs_without=with_vs_without,
        with_vs_without_by_round=[
            ratio(w.decode_tok_s, rate_without[w.round]) for w in pulled if w.round in rate_without
        ],
        total_tok_s_without=median([w.total_tok_s for w in without]),
        total_tok_s_with=median([w.total_tok_s for w in pulled]),
        window_s_without=median([w.window_s for w in without]),
        window_s_with=median([w.window_s for w in pulled]),
        streams_per_window=median([len(w.tokens) for w in windows]),
        pull_mb_per_s_while_serving=median([w.pull_mb_per_s for w in pulled]),
        pull_s_while_serving=median([w.pull_s for w in pulled if w.pull_s is not None]),
        windows_within_pull=sum(1 for w in pulled if w.within_pull),
        windows_with_pull=len(pulled),
        pull_same_files=all(w.pull_same_files for w in pulled),
        target=SERVING_WHILE_PULLING_TARGET,
        meets_target=at_least(with_vs_without, SERVING_WHILE_PULLING_TARGET),
    )


# -- the whole part ------------------------------------------------------------------------------


def measure_pull(plan: Plan, prompt: str) -> PullSummary:
    """The whole --pull run (see the module's docstring), the hub and the host stopped however it ends."""
    with tempfile.TemporaryDirectory(prefix="mlxhost-bench-pull-") as folder:
        work = Path(folder)
        filler_mb, note = filler_size(plan.pull_mb, work)
        hub_name = "python -m mlxhost.testing_hub, a process of its own on loopback"
        if filler_mb == 0:
            progress(f"pull: {note}")
            empty = PullRepo(REPO_ID, [], 0, FILLER, 0, plan.pull_mb, note, hub_name)
            return PullSummary(repo=empty, skipped=note)
        if note:
            progress(f"pull: {note}")
        progress(f"pull: making the repo: the tiny demo model and {filler_mb} MiB of random bytes")
        source = work / "repo"
        make_repo(source, filler_mb)
        files, size = listing(source)
        repo = PullRepo(REPO_ID, files, size, FILLER, filler_mb, plan.pull_mb, note, hub_name)
        progress(f"pull: serving {REPO_ID} ({len(files)} files, {size / MB:,.1f} MiB) from a hub process")
        with hub_process(REPO_ID, source, work / "hub.log") as endpoint:
            progress(f"pull: mlxhost pull against hf download, from {endpoint}")
            runs = measure_throughput(plan, repo, endpoint, work)
            throughput = throughput_figures(runs, REPO_ID, 0 if plan.smoke else 1)
            progress(f"pull: starting an isolated host on {plan.model_path}, pulling from {endpoint}")
            cache, home = work / "host-cache", work / "host-home"
            home.mkdir()
            host = start_serving_host(plan, endpoint, cache, home)
            with hosts.running(host):
                target_s = window_target_s(throughput)
                windows = anyio.run(serve_while_pulling, plan, prompt, host, repo, cache, target_s)
    return PullSummary(
        repo=repo, throughput=throughput, serving=serving_figures(plan, windows), runs=runs, windows=windows
    )


def print_pull(summary: PullSummary) -> None:
    repo = summary.repo
    print(f"\npull: {repo.id} from {repo.hub}")
    if summary.skipped is not None:
        print(f"  skipped: {summary.skipped}")
        return
    print(
        f"  {len(repo.files)} files, {repo.bytes / MB:,.1f} MiB: the tiny demo model and {repo.filler_mb} MiB "
        f"of random bytes ({repo.filler_file})" + (f"; {repo.size_note}" if repo.size_note else "")
    )
    throughput = summary.throughput
    if throughput is not None:
        print(
            f"  each into an empty cache, a process of its own, start to exit; medians of "
            f"{throughput.rounds} alternating rounds"
        )
        header = ["client", "MB/s", "s", "cores", "command"]
        rows = [
            ["mlxhost pull", number(throughput.mlxhost_mb_per_s), number(throughput.mlxhost_s, 2),
             number(throughput.mlxhost_cores, 2), " ".join(throughput.commands["mlxhost"])],
            ["hf download", number(throughput.hf_mb_per_s), number(throughput.hf_s, 2),
             number(throughput.hf_cores, 2), " ".join(throughput.commands["hf"])],
        ]  # fmt: skip
        print_table(header, rows, ["<", ">", ">", ">", "<"], indent="  ")
        print(
            f"  mlxhost / hf: {number(throughput.mlxhost_vs_hf, 3)} (>= {throughput.target:g}: "
            f"{verdict(throughput.meets_target)}); same files: {'yes' if throughput.same_files else 'NO'}"
        )
    serving = summary.serving
    if serving is not None:
        print(
            f"  serving while the host pulls: {serving.lanes} streams at once, max_tokens {serving.max_tokens}, "
            f"windows of ~{serving.window_target_s:.2f} s ({number(serving.streams_per_window, 0)} streams); "
            f"medians of {serving.rounds} alternating rounds"
        )
        header = ["window", "decode tok/s (aggregate)", "total tok/s", "window s"]
        rows = [
            ["without a pull", number(serving.decode_tok_s_without), number(serving.total_tok_s_without),
             number(serving.window_s_without, 2)],
            ["with a pull", number(serving.decode_tok_s_with), number(serving.total_tok_s_with),
             number(serving.window_s_with, 2)],
        ]  # fmt: skip
        print_table(header, rows, ["<", ">", ">", ">"], indent="  ")
        print(
            f"  with / without: {number(serving.with_vs_without, 3)} (>= {serving.target:g}: "
            f"{verdict(serving.meets_target)}); the pull while serving: "
            f"{number(serving.pull_mb_per_s_while_serving)} MB/s ({number(serving.pull_s_while_serving, 2)} s, "
            f"the job's own); windows within the pull: {serving.windows_within_pull}/{serving.windows_with_pull}"
            + ("" if serving.pull_same_files else "; the host's snapshot DIFFERED from the repo")
        )
        if serving.windows_within_pull < serving.windows_with_pull:
            print("  (a window that outlasted its pull measured serving partly without one: raise --pull-mb)")
