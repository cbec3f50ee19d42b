"""The records of --pull (`bench.pull`): pulls of one repo from a hub on loopback, `mlxhost pull`
against `hf download`, and serving on a host while it pulls, against the same host not pulling;
and the document --pull --json writes (`PullDocument`).

A megabyte here is 2**20 bytes (`bench.settings.MB`), as everywhere in the bench. A figure that
could not be had is NaN, written as null."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.figures import ratio
from bench.results.record import OPTIONAL, Record, run_list
from bench.results.serving import Machine, Model, PartSettings, Versions
from bench.settings import MB


@dataclass(frozen=True)
class PullRun:
    """One pull of the whole repo into an empty cache, by one client in a process of its own,
    timed from its start to its exit."""

    path: str  # "mlxhost" (`mlxhost pull REPO --quiet`) or "hf" (`hf download REPO --quiet`)
    round: int
    seconds: float
    bytes: int  # of the files in the snapshot it printed
    files: list[str]  # their paths in the snapshot, sorted
    cpu_s: float  # the process's user + system CPU seconds

    @property
    def mb_per_s(self) -> float:
        return ratio(self.bytes / MB, self.seconds)

    @property
    def cores(self) -> float:
        return ratio(self.cpu_s, self.seconds)


@dataclass(frozen=True)
class ServingWindow:
    """Streamed chat completions on the host in `lanes` lanes at once, each lane's streams one
    after another for about `target_s`; with or without a pull of the repo by the same host
    (POST /admin/models/pull, sent right before the streams)."""

    round: int
    pulling: bool
    target_s: float  # a lane starts no stream that would end past it (it runs one at least)
    tokens: list[int]  # per stream, as its usage chunk counted them
    lane_tokens: list[int]  # per lane: its streams' tokens
    lane_stream_s: list[float]  # per lane: its streams' seconds, each from its request to its end
    window_s: float  # the first stream's start to the last one's end
    # The pull, when there is one: its job, its state and bytes when the window ended (a window
    # that outlasted the pull measured serving partly without it), and the job's own seconds
    # (the host's started_at to ended_at) and bytes.
    job: str | None = None
    job_state_at_end: str | None = None
    pulled_bytes_at_end: int | None = None
    pull_s: float | None = None
    pull_bytes: int | None = None
    pull_same_files: bool | None = None  # the host's snapshot holds the repo's files, no more, no less

    @property
    def lanes(self) -> int:
        return len(self.lane_stream_s)

    @property
    def decode_tok_s(self) -> float:
        """Aggregate decode tok/s: each lane's tokens over its streams' seconds, summed over the
        lanes. A stream's seconds run from its request to its end: its prompt is the run's (~20
        tokens), whose prefill takes milliseconds; from its first token instead, the rate would be
        biased up under load, when the host's first frame (it coalesces the tokens of 50 ms) comes
        later and carries more tokens."""
        return sum(ratio(t, s) for t, s in zip(self.lane_tokens, self.lane_stream_s, strict=True))

    @property
    def total_tok_s(self) -> float:
        return ratio(sum(self.tokens), self.window_s)

    @property
    def within_pull(self) -> bool | None:
        """The pull had not ended when the window did; None without a pull."""
        if not self.pulling:
            return None
        return self.job_state_at_end in ("queued", "running")

    @property
    def pull_mb_per_s(self) -> float:
        if self.pull_bytes is None or self.pull_s is None:
            return float("nan")
        return ratio(self.pull_bytes / MB, self.pull_s)


@dataclass(frozen=True)
class PullRepo(Record):
    """The repo both clients pull: the tiny demo model and a file of random bytes."""

    id: str
    files: list[str]
    bytes: int
    filler_file: str
    filler_mb: int  # as made, after any shrinking for the disk
    filler_mb_asked: int  # --pull-mb, or its default
    size_note: str | None  # why the filler is smaller than asked, if it is
    hub: str  # what serves it


@dataclass(frozen=True)
class PullThroughput(Record):
    """`mlxhost pull` against `hf download`, alternating rounds, each into an empty cache."""

    rounds: int
    warm_up_rounds: int  # one untimed pull of each first (imports, page cache); none with --smoke
    commands: dict[str, list[str]]  # by path, REPO as the repo's id
    mlxhost_mb_per_s: float  # medians over the rounds
    hf_mb_per_s: float
    mlxhost_s: float
    hf_s: float
    mlxhost_vs_hf: float  # the medians' ratio (MB/s)
    mlxhost_vs_hf_by_round: list[float]  # each round's
    mlxhost_cores: float  # CPU seconds / wall seconds, medians
    hf_cores: float
    same_files: bool  # both snapshots hold the repo's files, every round
    target: float
    meets_target: bool | None


@dataclass(frozen=True)
class ServingWhilePulling(Record):
    """Aggregate decode tok/s of `lanes` lanes of streams on the host, without a pull and with one
    running, alternating rounds; a fresh cache (the repo's folder removed) for every pull."""

    rounds: int
    lanes: int  # streams at once
    max_tokens: int
    window_target_s: float  # each window's `target_s`
    host_options: list[str]
    decode_tok_s_without: float  # medians over the rounds
    decode_tok_s_with: float
    with_vs_without: float  # the medians' ratio
    with_vs_without_by_round: list[float]
    total_tok_s_without: float
    total_tok_s_with: float
    window_s_without: float
    window_s_with: float
    streams_per_window: float  # median, of both kinds
    pull_mb_per_s_while_serving: float  # the host's pull jobs' own, median
    pull_s_while_serving: float
    windows_within_pull: int  # of the windows with a pull, those that ended before it did
    windows_with_pull: int
    pull_same_files: bool  # every host pull's snapshot held the repo's files
    target: float
    meets_target: bool | None


@dataclass(frozen=True)
class PullTargets(Record):
    pull_vs_hf_min: float
    pull_ok: bool | None
    serving_while_pulling_min: float
    serving_while_pulling_ok: bool | None


@dataclass(frozen=True)
class PullSummary(Record):
    repo: PullRepo
    throughput: PullThroughput | None = field(default=None, metadata=OPTIONAL)
    serving: ServingWhilePulling | None = field(default=None, metadata=OPTIONAL)
    skipped: str | None = None  # why nothing was measured (the disk too full), if so
    runs: list[PullRun] = field(default_factory=list, metadata=run_list("mb_per_s", "cores"))
    windows: list[ServingWindow] = field(
        default_factory=list, metadata=run_list("decode_tok_s", "total_tok_s", "within_pull", "pull_mb_per_s")
    )

    def top_level(self) -> dict[str, Any]:
        return {
            "pull": self.to_json(),
            "pull_vs_hf": None if self.throughput is None else self.throughput.mlxhost_vs_hf,
            "serving_while_pulling": None if self.serving is None else self.serving.with_vs_without,
        }

    def targets(self, pull_min: float, serving_min: float) -> PullTargets:
        return PullTargets(
            pull_min,
            None if self.throughput is None else self.throughput.meets_target,
            serving_min,
            None if self.serving is None else self.serving.meets_target,
        )


@dataclass(frozen=True)
class PullDocument(Record):
    """What --pull --json writes: machine, versions, the model the host serves, settings, then
    `pull` (PullSummary), `pull_vs_hf` and `serving_while_pulling` (copies of its two ratios), and
    `targets` (PullTargets)."""

    machine: Machine
    versions: Versions
    model: Model
    settings: PartSettings
    pull: PullSummary
    targets: PullTargets

    def to_json(self) -> dict[str, Any]:
        return {
            "machine": self.machine.to_json(),
            "versions": self.versions.to_json(),
            "model": self.model.to_json(),
            "settings": self.settings.to_json(),
            **self.pull.top_level(),
            "targets": self.targets.to_json(),
        }
