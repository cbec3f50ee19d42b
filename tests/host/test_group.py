"""A worker group's engine: two ranks of the tiny model under `mlx.launch` (ring backend, loopback).

Rank 0 batches; rank 1 follows every call through MLX collectives (mlxhost/worker/group.py). The
group must answer exactly as one engine does, however the batch changes under it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

RANK = Path(__file__).parent / "workers" / "group_rank.py"
PROMPTS = ["a", "bb", "Tell me about the sea.", "Hi", "Write a poem about rain", "Why?", "ccc dd", "Go on"]
MAX_TOKENS = 30


def _free_ports(count: int) -> int:
    """The first of `count` consecutive free ports (the ring backend takes one per rank)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count > 65535:
            continue
        try:
            held = []
            for port in range(first, first + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
        return first
    raise RuntimeError("no consecutive free ports")


def _answers(tiny_model: Path, launch: bool, cancel: str = "") -> list[str]:
    command = [sys.executable, str(RANK), str(tiny_model), json.dumps(PROMPTS), str(MAX_TOKENS)]
    env = {**os.environ, "CANCEL": cancel}
    if launch:
        launcher = Path(sys.executable).parent / "mlx.launch"
        command = [
            str(launcher), "-n", "2", "--backend", "ring", "--starting-port", str(_free_ports(2)),
            "--env", f"CANCEL={cancel}", "--python", sys.executable, *command[1:],
        ]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    # mlx.launch exits 0 even when a rank failed: rank 0's answers are the proof.
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    answers: list[str] = json.loads(lines[-1])
    return answers


@pytest.fixture(scope="module")
def single(tiny_model: Path) -> list[str]:
    return _answers(tiny_model, launch=False)


def test_two_ranks_answer_as_one_engine(tiny_model: Path, single: list[str]) -> None:
    assert all(single), "every prompt makes some text"
    assert _answers(tiny_model, launch=True) == single
    _assert_no_rank_left()


def test_cancelled_sequences_leave_every_rank(tiny_model: Path, single: list[str]) -> None:
    # Two sequences cancelled after their first text: were rank 1 still stepping them, its batch
    # would no longer match rank 0's and every later answer would differ (or the ranks would hang).
    answers = _answers(tiny_model, launch=True, cancel="2,5")
    assert [a for i, a in enumerate(answers) if i not in (2, 5)] == [
        s for i, s in enumerate(single) if i not in (2, 5)
    ]
    # Run again after the cancellations, alone in the batch, they answer in full.
    assert answers[2] == single[2] and answers[5] == single[5]
    _assert_no_rank_left()


def _assert_no_rank_left() -> None:
    left = [p for p in psutil.process_iter(["cmdline"]) if str(RANK) in " ".join(p.info["cmdline"] or [])]
    assert not left, f"rank processes left: {[p.pid for p in left]}"
