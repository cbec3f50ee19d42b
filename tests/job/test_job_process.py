"""The job process (`python -m mlxhost.job SPEC.json`) as the parent runs it: a real subprocess, the
real tiny model, real mlx-lm; its log read with the contract's own parser.

The tiny model's matrices are 64 and 128 wide, so quantizing uses a group size of 32. The first
fine-tune on a machine compiles MLX's CPU kernels for the training step (about a minute on two
cores; cached under the temp directory afterwards), hence the `slow` marks.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlxhost.job import (
    EXIT_BAD_SPEC,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_PARENT_GONE,
    EXIT_SUCCEEDED,
    PARENT_GONE,
    JobError,
)
from mlxhost.testing import wait_until
from mlxhost.wire.admin.jobs import JobLogEvent, JobProgress, LaunchedJob, parse_log_line

REPO = Path(__file__).resolve().parents[2]
GROUP_SIZE = 32  # divides the tiny model's widths (64 and 128)
PATIENCE = 600.0  # a guard against a hung job, not a measurement: a cold kernel cache takes minutes


def chat(i: int) -> dict[str, Any]:
    return {"messages": [
        {"role": "user", "content": f"What is {i} plus {i}?"},
        {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."},
    ]}  # fmt: skip


def write_dataset(directory: Path, train: list[str], valid: list[str] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "train.jsonl").write_text("".join(line + "\n" for line in train))
    if valid is not None:
        (directory / "valid.jsonl").write_text("".join(line + "\n" for line in valid))
    return directory


class Job:
    """A job's directory as the parent lays it out: spec.json, log.jsonl, output/, stderr.log."""

    def __init__(
        self, directory: Path, kind: str, model: Path, options: dict[str, Any], adapter: Path | None = None
    ):
        directory.mkdir(parents=True)
        self.directory = directory
        self.output = directory / "output"
        self.partial = directory / "output.partial"
        self.log = directory / "log.jsonl"
        spec = LaunchedJob(
            version=LaunchedJob.VERSION,
            id=directory.name,
            kind=kind,
            model_path=str(model),
            output=str(self.output),
            log=str(self.log),
            options=options,
            adapter_path=None if adapter is None else str(adapter),
        )
        self.spec = directory / "spec.json"
        self.spec.write_text(json.dumps(spec.to_json()))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        with (self.directory / "stderr.log").open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mlxhost.job", str(self.spec)],
                cwd=REPO,
                stdin=stdin,
                stdout=stderr,
                stderr=subprocess.STDOUT,
            )
        return self.process

    def run(self) -> int:
        return self.start().wait(timeout=PATIENCE)

    def wait(self) -> int:
        assert self.process is not None
        return self.process.wait(timeout=PATIENCE)

    def events(self) -> list[JobLogEvent]:
        if not self.log.exists():
            return []
        return [parse_log_line(line) for line in self.log.read_text().splitlines()]

    def progress(self) -> list[JobProgress]:
        return [p for p in (e.progress() for e in self.events()) if p is not None]

    def terminal(self) -> JobLogEvent:
        """The log's one terminal line, which is its last."""
        events = self.events()
        terminal = [e for e in events if e.terminal]
        assert len(terminal) == 1, events
        assert events[-1] is terminal[0]
        return terminal[0]

    def stderr(self) -> str:
        return (self.directory / "stderr.log").read_text(errors="replace")


def generate(model: Path, adapter: Path | None = None) -> str:
    import mlx_lm

    loaded, tokenizer = mlx_lm.load(str(model), adapter_path=None if adapter is None else str(adapter))[:2]
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 plus 3?"}], add_generation_prompt=True
    )
    text: str = mlx_lm.generate(loaded, tokenizer, prompt, max_tokens=8)
    return text


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("data")
    return write_dataset(
        directory, [json.dumps(chat(i)) for i in range(16)], [json.dumps(chat(i)) for i in range(16, 20)]
    )


def finetune_options(dataset: Path, **options: Any) -> dict[str, Any]:
    defaults = {"num_layers": -1, "batch_size": 4, "steps_per_report": 5, "steps_per_eval": 10}
    return {"data": str(dataset), **defaults, **options}


@pytest.fixture(scope="module")
def finetuned(tiny_model: Path, dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Job:
    job = Job(
        tmp_path_factory.mktemp("jobs") / "finetune",
        "finetune",
        tiny_model,
        finetune_options(dataset, iters=20),
    )
    assert job.run() == EXIT_SUCCEEDED, job.stderr()
    return job


@pytest.mark.slow
def test_a_finetune_logs_its_progress_and_leaves_an_adapter(finetuned: Job) -> None:
    events = finetuned.events()
    assert events[0].type == "started"
    assert events[0].data["kind"] == "finetune" and isinstance(events[0].data["pid"], int)
    assert finetuned.terminal().type == "succeeded"
    assert finetuned.terminal().data == {"output": str(finetuned.output)}
    assert any(
        e.type == "message" and "16 training and 4 validation examples" in e.data["text"] for e in events
    )

    progress = finetuned.progress()
    # A validation report at the start, at 10 and at the end; a training report every 5 iterations.
    assert [p.iteration for p in progress if p.train_loss is None] == [0]
    assert [p.iteration for p in progress] == [0, 5, 9, 10, 15, 19, 20]
    assert all(p.total == 20 for p in progress)
    last = progress[-1]
    assert last.fraction == 1.0
    assert last.train_loss is not None and last.val_loss is not None and last.learning_rate is not None
    assert last.iterations_per_s and last.tokens_per_s and last.peak_memory_bytes
    assert last.train_loss < progress[1].train_loss  # type: ignore[operator]  # it learned something

    assert sorted(p.name for p in finetuned.output.iterdir()) == [
        "adapter_config.json",
        "adapters.safetensors",
    ]
    config = json.loads((finetuned.output / "adapter_config.json").read_text())
    assert config["num_layers"] == -1 and config["lora_parameters"]["rank"] == 8 and config["iters"] == 20
    assert not finetuned.partial.exists()


@pytest.mark.slow
def test_mlx_lm_serves_the_adapter(finetuned: Job, tiny_model: Path) -> None:
    assert isinstance(generate(tiny_model, finetuned.output), str)


@pytest.mark.slow
def test_fuse_the_finetune_into_its_model(finetuned: Job, tiny_model: Path, tmp_path: Path) -> None:
    job = Job(tmp_path / "fuse", "fuse", tiny_model, {}, adapter=finetuned.output)
    assert job.run() == EXIT_SUCCEEDED, job.stderr()
    assert job.terminal().data == {"output": str(job.output)}
    assert [(p.iteration, p.total) for p in job.progress()] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert (job.output / "config.json").is_file() and not job.partial.exists()
    # The fused model answers as the model with its adapter does (greedy decoding, same weights).
    assert generate(job.output) == generate(tiny_model, finetuned.output)


def test_quantize(tiny_model: Path, tmp_path: Path) -> None:
    job = Job(tmp_path / "quantize", "quantize", tiny_model, {"bits": 4, "group_size": GROUP_SIZE})
    assert job.run() == EXIT_SUCCEEDED, job.stderr()
    assert job.terminal().data == {"output": str(job.output)}
    assert job.progress()[-1].fraction == 1.0
    config = json.loads((job.output / "config.json").read_text())
    assert config["quantization"] == {"group_size": GROUP_SIZE, "bits": 4, "mode": "affine"}
    assert isinstance(generate(job.output), str)


@pytest.fixture
def training(tiny_model: Path, dataset: Path, tmp_path: Path) -> Iterator[Job]:
    """A fine-tune that would run for hours, once it reports its first training loss."""
    options = finetune_options(dataset, iters=1_000_000, steps_per_report=1, steps_per_eval=1_000_000)
    job = Job(tmp_path / "long", "finetune", tiny_model, options)
    yield job
    if job.process is not None and job.process.poll() is None:
        job.process.kill()
        job.process.wait()


def wait_for_training(job: Job) -> None:
    assert job.process is not None
    process = job.process
    wait_until(
        lambda: process.poll() is not None or any(p.train_loss for p in job.progress()), timeout=PATIENCE
    )
    assert process.poll() is None, job.stderr()


@pytest.mark.slow
def test_sigterm_cancels_between_iterations(training: Job) -> None:
    process = training.start()
    wait_for_training(training)
    process.send_signal(signal.SIGTERM)
    assert training.wait() == EXIT_CANCELLED
    assert training.terminal().type == "cancelled"
    assert training.terminal().data == {"error": "cancelled"}
    assert not training.output.exists() and not training.partial.exists()


@pytest.mark.slow
def test_the_end_of_stdin_means_the_host_is_gone(training: Job) -> None:
    process = training.start(stdin=subprocess.PIPE)
    wait_for_training(training)
    assert process.stdin is not None
    process.stdin.close()
    assert training.wait() == EXIT_PARENT_GONE
    assert training.terminal().type == "interrupted"
    assert training.terminal().data == {"error": PARENT_GONE}
    assert not training.output.exists() and not training.partial.exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_loading_cancels_at_once(
    tiny_model: Path, tmp_path: Path, signum: signal.Signals
) -> None:
    """Before training (here: importing mlx-lm) there is no safe point to wait for: it stops at once.

    The tiny model's quantize can be done before a signal sent after `started` lands (on a busy
    machine CI met that): a job that made its result ignores a late stop, as documented. Such a
    try proves nothing either way, so it is checked for what it is and the test tries again.
    """
    for attempt in range(5):
        job = Job(
            tmp_path / f"quantize-{attempt}", "quantize", tiny_model, {"bits": 4, "group_size": GROUP_SIZE}
        )
        process = job.start()
        wait_until(lambda: job.events() or process.poll() is not None, timeout=PATIENCE)
        process.send_signal(signum)
        code = job.wait()
        if code == 0:
            assert job.terminal().type == "succeeded" and job.output.exists()
            continue
        assert code == EXIT_CANCELLED, job.stderr()
        assert job.terminal().type == "cancelled"
        assert not job.output.exists() and not job.partial.exists()
        return
    pytest.fail("every quantize finished before the signal reached it")


GOOD = json.dumps(chat(1))


@pytest.mark.parametrize(
    ("train", "valid", "error"),
    [
        (None, [GOOD] * 4, "no train.jsonl in "),
        ([GOOD, GOOD, '{"messages": [', GOOD], [GOOD] * 4, "train.jsonl line 3: not JSON"),
        ([GOOD] * 3, [GOOD] * 4, "has 3 examples, fewer than batch_size=4"),
        ([GOOD, GOOD, "", GOOD, json.dumps({"text": "plain"})], None, "train.jsonl line 5: no 'messages'"),
        ([json.dumps({"question": "?"})] * 4, None, "train.jsonl line 1: Unsupported data format"),
        # The file grew a 2 MiB example after the host checked it: the job reads no more of it than
        # the limit, and says so, instead of tokenizing it (a 20 MB line took a job to 3.3 GB).
        (
            [GOOD, json.dumps({"messages": [{"role": "user", "content": "a" * (2 << 20)}]}), GOOD, GOOD],
            None,
            "train.jsonl line 2: longer than 1,048,576 bytes",
        ),
        ([GOOD] * 4, [], "valid.jsonl has no examples"),
    ],
    ids=["missing", "malformed", "too-few", "mixed-formats", "unknown-format", "too-long", "empty-valid"],
)
def test_a_bad_dataset_fails_naming_the_file_and_line(
    tiny_model: Path, tmp_path: Path, train: list[str] | None, valid: list[str] | None, error: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    if train is not None:
        write_dataset(data, train, valid)
    elif valid is not None:
        (data / "valid.jsonl").write_text("".join(line + "\n" for line in valid))
    job = Job(tmp_path / "job", "finetune", tiny_model, finetune_options(data, iters=2))
    assert job.run() == EXIT_FAILED, job.stderr()
    failed = job.terminal()
    assert failed.type == "failed"
    assert error in failed.data["error"] and "\n" not in failed.data["error"]
    assert not job.output.exists() and not job.partial.exists()


def test_the_job_reads_a_dataset_as_the_host_checked_it(tmp_path: Path) -> None:
    """The job's reader is the host's (`mlxhost.wire.admin.dataset_lines`): a byte order mark the host
    accepted at submission is accepted here too, and a deeply nested line is named, not a bare
    RecursionError."""
    from mlxhost.job.dataset import read_lines  # imports mlx-lm

    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + f"{GOOD}\n\n{GOOD}\n".encode())
    split = read_lines(path)
    assert split.examples == [chat(1), chat(1)] and split.lines == [1, 3]
    path.write_bytes(GOOD.encode() + b"\n" + b"[" * 100_000 + b"\n")
    with pytest.raises(JobError, match=r"train\.jsonl line 2: nests too deeply"):
        read_lines(path)


def test_more_layers_than_the_model_has_fails(tiny_model: Path, dataset: Path, tmp_path: Path) -> None:
    job = Job(tmp_path / "job", "finetune", tiny_model, finetune_options(dataset, iters=2, num_layers=16))
    assert job.run() == EXIT_FAILED
    assert job.terminal().data == {"error": "num_layers=16, but the model has 2 layers (-1 trains all)"}


def test_a_spec_of_another_version_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    job = Job(tmp_path / "job", "quantize", tiny_model, {})
    job.spec.write_text(json.dumps({**json.loads(job.spec.read_text()), "version": 99}))
    assert job.run() == EXIT_BAD_SPEC
    assert [e.type for e in job.events()] == ["failed"]
    assert "version 99" in job.terminal().data["error"]


def test_an_unreadable_spec_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text("{not json")
    result = subprocess.run(
        [sys.executable, "-m", "mlxhost.job", str(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == EXIT_BAD_SPEC
    assert "cannot read the job spec" in result.stderr


def test_an_existing_output_is_left_alone(tiny_model: Path, tmp_path: Path) -> None:
    job = Job(tmp_path / "job", "quantize", tiny_model, {"group_size": GROUP_SIZE})
    job.output.mkdir()
    (job.output / "keep").write_text("mine")
    assert job.run() == EXIT_FAILED
    assert "already exists" in job.terminal().data["error"]
    assert (job.output / "keep").read_text() == "mine"


def test_the_job_package_imports_no_mlx_until_a_job_runs() -> None:
    code = (
        "import sys, mlxhost.job.run, mlxhost.job.__main__;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mlx', 'mlx_lm'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
