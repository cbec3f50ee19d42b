"""`mlxhost pull` as a user runs it: the real command and the real huggingface_hub client against a
hub-protocol server on loopback (`mlxhost.testing_hub`), which counts the bytes it sends.

Faults come from that server: a connection dropped mid-file, a SIGINT, corrupt bytes, error
statuses, a hung answer; and a full filesystem from a real tmpfs.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxhost.testing import wait_until
from mlxhost.testing_hub import HubServer
from tests.filesystems import small_tmpfs

REPO = "mlx-community/tiny"
BIG = "org/big"  # the tiny model and an 8 MiB file: long enough to watch, to cut and to resume
BIG_FILE = "filler.json"  # wanted (every *.json is) and an LFS file, so its sha256 is checked
BIG_SIZE = 8 * 1024 * 1024
SLACK = 1024 * 1024 + 65536  # bytes a cut may cost twice: the transfer's piece (hub.TRANSFER_CHUNK), the server's write
IN_FLIGHT = 2 * 1024 * 1024  # and a killed client: what sat in the loopback's socket buffers too


@pytest.fixture(scope="module")
def repo_folders(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("repos")
    plain = base / "tiny"
    shutil.copytree(tiny_model, plain)
    # What a repo carries beside its safetensors and mlx-lm never reads: a pull must skip them.
    (plain / "pytorch_model.bin").write_bytes(b"\0" * 2048)
    (plain / "model.gguf").write_bytes(b"\0" * 2048)
    (plain / "README.md").write_text("# tiny\n")
    big = base / "big"
    shutil.copytree(tiny_model, big)
    (big / BIG_FILE).write_bytes(os.urandom(BIG_SIZE))
    not_mlx = base / "not-mlx"
    not_mlx.mkdir()
    (not_mlx / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (not_mlx / "pytorch_model.bin").write_bytes(b"\0" * 1024)
    return {"tiny": plain, "big": big, "not-mlx": not_mlx}


@pytest.fixture
def hub(repo_folders: dict[str, Path]) -> Iterator[HubServer]:
    with HubServer() as server:
        server.add_repo(REPO, repo_folders["tiny"])
        server.add_repo(BIG, repo_folders["big"])
        server.add_repo("org/gated", repo_folders["tiny"], gated=True)
        server.add_repo("org/not-mlx", repo_folders["not-mlx"])
        yield server


@pytest.fixture
def env(hub: HubServer, tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    return clean | {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(tmp_path / "hf-home"),  # no token the machine may have saved
        "HF_HUB_CACHE": str(tmp_path / "cache"),
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def pull(env: dict[str, str], *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlxhost", "pull", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_pull_fetches_the_files_an_mlx_model_needs_and_no_other(
    hub: HubServer, env: dict[str, str], repo_folders: dict[str, Path]
) -> None:
    done = pull(env, REPO)
    assert done.returncode == 0, done.stderr
    snapshot = Path(done.stdout.strip())
    assert snapshot.is_dir() and snapshot.parent.name == "snapshots"
    source = repo_folders["tiny"]
    wanted = sorted(p.name for p in source.iterdir() if p.suffix in (".json", ".safetensors"))
    assert sorted(p.name for p in snapshot.iterdir()) == wanted
    for name in wanted:
        assert (snapshot / name).read_bytes() == (source / name).read_bytes()
    # Never the duplicate weights nor the card: not one byte of them left the server.
    assert hub.sent(REPO, "pytorch_model.bin") == hub.sent(REPO, "model.gguf") == hub.sent(REPO, "README.md") == 0
    assert hub.total_sent == sum((source / n).stat().st_size for n in wanted)
    # Into a pipe: a plain line per file, and where to serve it from.
    lines = done.stderr.splitlines()
    assert sum(1 for line in lines if line.startswith("  ")) == len(wanted)
    assert f"mlxhost serve --model {REPO}" in done.stderr
    # A second pull finds it all in the cache and sends nothing.
    before = hub.total_sent
    again = pull(env, REPO)
    assert again.returncode == 0 and Path(again.stdout.strip()) == snapshot
    assert hub.total_sent == before


def test_a_terminal_shows_a_progress_bar(hub: HubServer, env: dict[str, str]) -> None:
    hub.throttle(4 * 1024 * 1024)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns, as a terminal
    process = subprocess.Popen(
        [sys.executable, "-m", "mlxhost", "pull", BIG],
        env=env, stdin=follower, stdout=subprocess.PIPE, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    screen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        screen += chunk
    assert process.wait(timeout=30) == 0
    os.close(leader)
    text = screen.decode(errors="replace")
    redraws = [part for part in text.split("\r") if "%|" in part]
    assert len(redraws) >= 3, text  # the bar was redrawn as the bytes came
    assert any(BIG_FILE in part for part in redraws)  # the file being fetched
    last = redraws[-1]
    assert "100%" in last and re.search(r"[\d.]+M/[\d.]+M", last) and "B/s" in last  # total bytes, a rate
    assert any("<" in part for part in redraws)  # time left


def test_quiet_prints_only_the_folder(env: dict[str, str]) -> None:
    done = pull(env, REPO, "--quiet")
    assert done.returncode == 0 and done.stderr == ""
    assert Path(done.stdout.strip()).is_dir()


def test_a_connection_dropped_mid_file_resumes_without_resending(hub: HubServer, env: dict[str, str]) -> None:
    hub.drop_after(BIG_FILE, 1_500_000)
    done = pull(env, BIG)
    assert done.returncode == 0, done.stderr
    # The client resumed from the bytes it had (a Range request), not from the start.
    assert BIG_SIZE <= hub.sent(BIG, BIG_FILE) <= BIG_SIZE + SLACK
    assert any("range" in {k.lower() for k in h} for m, p, h in hub.requests if p.endswith(BIG_FILE) and m == "GET")


def test_sigint_stops_the_pull_and_the_next_one_sends_only_the_rest(hub: HubServer, env: dict[str, str]) -> None:
    hub.throttle(1024 * 1024)
    process = subprocess.Popen(
        [sys.executable, "-m", "mlxhost", "pull", BIG], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_until(lambda: hub.sent(BIG, BIG_FILE) > 3_000_000, timeout=30)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert "run the same command to resume" in err
    first = hub.sent(BIG, BIG_FILE)
    assert first < BIG_SIZE
    hub.throttle(None)
    done = pull(env, BIG)
    assert done.returncode == 0, done.stderr
    # Only the rest, give or take what was in flight when it stopped (the client's unwritten piece
    # and the sockets' buffers): less than the whole file again.
    resent = hub.sent(BIG, BIG_FILE) - first
    assert resent <= BIG_SIZE - first + IN_FLIGHT
    assert resent < BIG_SIZE


def test_corrupt_bytes_are_fetched_again_and_never_kept(
    hub: HubServer, env: dict[str, str], repo_folders: dict[str, Path]
) -> None:
    hub.corrupt(BIG_FILE)
    done = pull(env, BIG)
    assert done.returncode == 0, done.stderr
    snapshot = Path(done.stdout.strip())
    assert (snapshot / BIG_FILE).read_bytes() == (repo_folders["big"] / BIG_FILE).read_bytes()
    assert hub.sent(BIG, BIG_FILE) >= 2 * BIG_SIZE  # sent twice: once wrong, once right
    blobs = Path(env["HF_HUB_CACHE"], "models--org--big", "blobs")
    assert not [b for b in blobs.iterdir() if b.name.endswith(".incomplete")]


def test_corrupt_bytes_twice_fail_and_leave_nothing_to_serve(hub: HubServer, env: dict[str, str]) -> None:
    hub.corrupt(BIG_FILE, times=2)
    done = pull(env, BIG)
    assert done.returncode == 1
    assert "do not match the hub's checksum" in done.stderr and BIG in done.stderr
    snapshots = Path(env["HF_HUB_CACHE"], "models--org--big", "snapshots")
    assert not list(snapshots.rglob(BIG_FILE))


@pytest.mark.parametrize(
    ("reference", "said"),
    [
        ("org/nothing", "org/nothing was not found"),
        (f"{REPO}@v9", "has no revision 'v9'"),
        ("org/gated", "org/gated is gated: accept its licence"),
        ("org/not-mlx", "org/not-mlx is not an MLX model: its weights are only in .bin files"),
        ("not-a-repo", "is not a Hugging Face repo id"),
    ],
)
def test_errors_name_the_repo_and_what_to_do(env: dict[str, str], reference: str, said: str) -> None:
    done = pull(env, reference)
    assert done.returncode in (1, 2)
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_failing_hub_is_said_with_the_endpoint(hub: HubServer, env: dict[str, str]) -> None:
    hub.fail(500, times=-1)
    done = pull(env, REPO, timeout=120)
    assert done.returncode == 1
    assert "answered 500" in done.stderr and hub.endpoint in done.stderr


def test_a_hub_that_does_not_answer_times_out_clearly(hub: HubServer, env: dict[str, str]) -> None:
    hub.stall(60, times=-1)
    started = time.monotonic()
    done = pull(env | {"HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}, REPO, timeout=90)
    assert done.returncode == 1
    assert "did not answer in time" in done.stderr and "HF_ENDPOINT" in done.stderr, done.stderr
    assert time.monotonic() - started < 60


def test_an_unreachable_hub_says_so(env: dict[str, str]) -> None:
    done = pull(env | {"HF_ENDPOINT": "http://127.0.0.1:9"}, REPO)
    assert done.returncode == 1
    assert "cannot be reached" in done.stderr and "--offline" in done.stderr


def test_offline_mode_refuses_to_pull(env: dict[str, str]) -> None:
    done = pull(env | {"HF_HUB_OFFLINE": "1"}, REPO)
    assert done.returncode == 1
    assert "HF_HUB_OFFLINE" in done.stderr


def test_too_little_space_is_refused_before_any_byte(hub: HubServer, env: dict[str, str], tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "small", 4096) as small:  # 4 MiB: less than the 8 MiB file
        done = pull(env | {"HF_HUB_CACHE": str(small / "cache")}, BIG)
        assert done.returncode == 1
        assert "not enough disk space" in done.stderr and str(small / "cache") in done.stderr
        assert "bytes free" in done.stderr or "free" in done.stderr
        assert hub.total_sent == 0


def test_quantize_converts_a_plain_checkpoint_into_a_model_of_its_own(
    hub: HubServer, env: dict[str, str], tmp_path: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from mlxhost.demo import make_model

    plain = make_model(tmp_path_factory.mktemp("plain") / "q", size="quantizable")
    hub.add_repo("org/plain", plain)
    done = pull(env, "org/plain", "--quantize", "4", "--state-dir", str(tmp_path / "state"), timeout=240)
    assert done.returncode == 0, done.stderr
    output = Path(done.stdout.strip())
    assert output == tmp_path / "state" / "models" / "org--plain-q4"
    config = json.loads((output / "config.json").read_text())
    assert config["quantization"]["bits"] == 4
    assert json.loads((output / "source.json").read_text())["repo"] == "org/plain"


def test_a_pulled_repo_serves_offline_by_its_name(env: dict[str, str]) -> None:
    """The branch's ref is written as huggingface_hub's own downloads write it, so an offline
    lookup of the repo by name finds what was pulled by commit."""
    assert pull(env, REPO).returncode == 0
    found = subprocess.run(
        [sys.executable, "-c", f"from mlxhost.catalog.sources import resolve_model; print(resolve_model({REPO!r}))"],
        env=env | {"HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_dir()


def test_a_token_opens_a_gated_repo(hub: HubServer, env: dict[str, str]) -> None:
    """HF_TOKEN (as `hf auth login` saves one) reaches the hub as the client's bearer token."""
    done = pull(env | {"HF_TOKEN": "hf_test_token"}, "org/gated")
    assert done.returncode == 0, done.stderr
    assert any(h.get("authorization") == "Bearer hf_test_token" for _, p, h in hub.requests if "org/gated" in p)
