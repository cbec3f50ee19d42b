"""The prompt cache's disk tier: kept KV caches outlive a crashed worker and a restarted host.

Each host here has its own state directory; the caches are under <state_dir>/prompt-cache/.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from mlxhost.testing import RunningHost, start_host, wait_until
from mlxhost.worker.cache.directory import LOCK_PATIENCE, free_floor
from mlxhost.worker.cache.folder import make_folder, model_fingerprint, store_folder
from tests.filesystems import small_tmpfs

SYSTEM = " ".join(["You are a careful harbour master who logs every ship, its cargo and its crew."] * 12)


def conversation(topic: str | None = None) -> list[dict[str, str]]:
    """A long prompt (a shared system prompt) no earlier request began with."""
    topic = topic or uuid.uuid4().hex
    return [
        {"role": "system", "content": f"{topic} {SYSTEM}"},
        {"role": "user", "content": "Who came in today?"},
    ]


def ask(
    client: openai.OpenAI, messages: list[dict[str, str]], salt: str | None = None, model: str = "tiny"
) -> tuple[str, int, int]:
    """(reply, prompt tokens, cached tokens) of a greedy chat completion."""
    extra = {"cache_salt": salt} if salt else {}
    reply = client.chat.completions.create(
        model=model,
        messages=messages,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        extra_body=extra,
    )
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    return (
        reply.choices[0].message.content or "",
        usage.prompt_tokens,
        usage.prompt_tokens_details.cached_tokens or 0,
    )


def disk(host: RunningHost) -> dict[str, Any]:
    return host.worker_health()["prompt_cache"]  # type: ignore[no-any-return]


def wait_written(host: RunningHost, writes: int) -> None:
    """Until the worker's writer thread has written `writes` entries in all."""
    wait_until(lambda: disk(host)["disk_writes"] >= writes)


def crash_worker(host: RunningHost) -> None:
    """SIGKILL the worker and wait until its replacement serves."""
    old = host.worker()
    os.kill(old["pid"], signal.SIGKILL)
    wait_until(lambda: (w := host.worker())["state"] == "ready" and w["pid"] not in (None, old["pid"]))


def cache_files(state_dir: Path) -> list[Path]:
    return [p for p in state_dir.glob("prompt-cache/*/*.safetensors") if not p.name.startswith(".")]


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def host(tiny_model: Path, state_dir: Path) -> Iterator[RunningHost]:
    # With the standby, as served by default: the turn after a crash is the case that matters.
    args = ("--model", str(tiny_model), "--state-dir", str(state_dir), "--standby-workers", "1")
    with start_host(*args) as running:
        yield running


@pytest.fixture
def client(host: RunningHost) -> Iterator[openai.OpenAI]:
    with host.client() as c:
        yield c


def test_after_a_worker_crash_a_prompt_starts_from_disk_with_the_same_answer(
    host: RunningHost, client: openai.OpenAI
) -> None:
    again, extended = conversation(), conversation()
    written = disk(host)["disk_writes"]
    cold, again_tokens, _ = ask(client, again)
    reply, first_tokens, _ = ask(client, extended)
    wait_written(host, written + 2)
    crash_worker(host)

    assert disk(host)["entries"] == 0  # a new process: nothing in memory
    warm, _, cached = ask(client, again)
    assert cached == again_tokens - 1
    assert warm == cold  # greedy from a loaded cache, as from a cold prefill
    follow_up = [*extended, {"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
    _, prompt_tokens, cached = ask(client, follow_up)
    assert first_tokens <= cached < prompt_tokens
    stats = disk(host)
    assert (
        stats["disk"]
        and stats["disk_hits"] >= 2
        and stats["disk_cached_tokens"] >= again_tokens + first_tokens - 1
    )


def test_callers_never_share_what_is_on_disk(host: RunningHost, client: openai.OpenAI) -> None:
    question = conversation()
    alice, bob = uuid.uuid4().hex, uuid.uuid4().hex
    written = disk(host)["disk_writes"]
    _, prompt_tokens, _ = ask(client, question, salt=alice)
    wait_written(host, written + 1)
    crash_worker(host)
    assert ask(client, question, salt=bob)[2] < prompt_tokens / 2
    assert ask(client, question, salt=alice)[2] == prompt_tokens - 1


def test_a_corrupt_file_is_removed_and_the_request_just_prefills(
    host: RunningHost, client: openai.OpenAI, state_dir: Path
) -> None:
    question = conversation()
    written = disk(host)["disk_writes"]
    answer, prompt_tokens, _ = ask(client, question)
    wait_written(host, written + 1)
    folder = cache_files(state_dir)[0].parent
    restarts = host.worker()["restarts"]
    (folder / f"{'0' * 32}-garbage.safetensors").write_bytes(
        b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"
    )
    crash_worker(host)
    assert disk(host)["disk_removed_files"] >= 1  # the garbage, at the new worker's start
    for path in cache_files(state_dir):  # cut short after the index was read: found on load
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    again, _, cached = ask(client, question)
    assert again == answer and cached < prompt_tokens / 2
    assert disk(host)["disk_removed_files"] >= 2
    assert host.worker()["restarts"] == restarts + 1  # the crash above, none from a file


def test_the_cache_outlives_the_host_and_stays_under_its_bound(tiny_model: Path, tmp_path: Path) -> None:
    bound = 1 << 20
    args = ("--model", str(tiny_model), "--state-dir", str(tmp_path), "--prompt-cache-disk-mb", "1")
    question = conversation()
    with start_host(*args) as first, first.client() as client:
        for _ in range(5):  # each entry is over 300 KiB: well past the bound in all
            ask(client, conversation())
        answer, prompt_tokens, _ = ask(client, question)
        wait_until(lambda: (d := disk(first))["disk_writes"] + d["disk_dropped_writes"] >= 6)
        stats = disk(first)
        assert (
            0
            < stats["disk_bytes"]
            <= bound
            < stats["disk_writes"] * stats["disk_bytes"] / stats["disk_entries"]
        )
    assert 0 < sum(p.stat().st_size for p in cache_files(tmp_path)) <= bound
    with start_host(*args) as second, second.client() as client:
        again, _, cached = ask(client, question)
        assert (again, cached) == (answer, prompt_tokens - 1)
        assert disk(second)["disk_hits"] == 1


def test_a_sliding_window_model_reuses_the_end_of_the_prompt(sliding_model: Path) -> None:
    running = start_host("--model", str(sliding_model), "--prompt-cache-disk-mb", "0")
    with running, running.client() as client:
        question = conversation()
        reply, first_tokens, _ = ask(client, question, model="sliding")
        follow_up = [
            *question,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "And then?"},
        ]
        _, prompt_tokens, cached = ask(client, follow_up, model="sliding")
    # The snapshot at the prompt's end holds all of it but its last token: a full window
    # cannot be trimmed, so the finished generation's own entry alone would give nothing.
    assert first_tokens - 1 <= cached < prompt_tokens


# -- hardening: what the disk tier must never trust, and the room it must leave ------------------

NAN = {"F32": b"\x00\x00\xc0\x7f", "F16": b"\x00\x7e", "BF16": b"\xc0\x7f"}


def poison(path: Path) -> None:
    """Overwrite every floating-point tensor of a safetensors file with NaN, its header intact."""
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    for name, info in header.items():
        if name != "__metadata__" and info["dtype"] in NAN:
            start, end = (8 + length + offset for offset in info["data_offsets"])
            nan = NAN[info["dtype"]]
            data[start:end] = nan * ((end - start) // len(nan))
    path.write_bytes(bytes(data))


def finite(path: Path) -> bool:
    import mlx.core as mx

    arrays = mx.load(str(path))
    assert isinstance(arrays, dict)
    return all(mx.all(mx.isfinite(a)).item() for a in arrays.values() if mx.issubdtype(a.dtype, mx.floating))


def answers(running: RunningHost, prompts: list[list[dict[str, str]]]) -> list[str]:
    with running.client() as client:
        return [ask(client, prompt)[0] for prompt in prompts]


@pytest.mark.slow
def test_a_file_overwritten_with_nan_is_removed_and_poisons_no_answer(tiny_model: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    args = ("--model", str(tiny_model), "--state-dir", str(state))
    question, unrelated = conversation(), conversation()
    with start_host(*args) as first:
        answers(first, [question])
        wait_written(first, 1)
    (path,) = cache_files(state)
    poison(path)  # as a bad disk or a stray write would: the header still says it is ours
    with start_host(*args) as second:
        served = answers(second, [question, unrelated])
        wait_until(lambda: disk(second)["disk_writes"] >= 2)  # both kept again, as caches of their own
        removed = disk(second)["disk_removed_files"]
        log = "".join(second.log)
    with start_host("--model", str(tiny_model), "--prompt-cache-disk-mb", "0") as fresh:
        expected = answers(fresh, [question, unrelated])
    assert served == expected
    assert removed == 1 and f"removing {path.name}: BadFile: its tensors do not match their checksum" in log
    assert cache_files(state) and all(finite(p) for p in cache_files(state))  # replaced by a good one


def test_a_fifo_in_the_cache_folder_never_holds_the_worker(tiny_model: Path, tmp_path: Path) -> None:
    folder = store_folder(tmp_path, tiny_model, model_fingerprint(tiny_model))
    make_folder(folder, tiny_model, None, model_fingerprint(tiny_model))
    fifo = folder / f"{'0' * 32}-fifo.safetensors"
    os.mkfifo(fifo)
    os.mkfifo(folder / ".signature.json")  # read before the store opens: as blocking as the other
    with start_host("--model", str(tiny_model), "--state-dir", str(tmp_path)) as running:
        with running.client() as client:
            ask(client, conversation())  # answered: the worker started and serves
        wait_until(lambda: not fifo.exists())
        log = "".join(running.log)
    assert f"removing {fifo.name}: BadFile: not a regular file" in log


def test_a_worker_waiting_for_its_cache_folder_still_stops_on_sigterm(tiny_model: Path, tmp_path: Path) -> None:
    folder = store_folder(tmp_path, tiny_model, model_fingerprint(tiny_model))
    make_folder(folder, tiny_model, None, model_fingerprint(tiny_model))
    held = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a worker that never lets go would
    try:
        with start_host("--model", str(tiny_model), "--state-dir", str(tmp_path)) as running:
            wait_until(lambda: "is used by another worker; waiting for it" in "".join(running.log))
            pid = running.worker()["pid"]
            os.kill(pid, signal.SIGTERM)
            # It used to wait out LOCK_PATIENCE (60 s) for the lock, until the supervisor found it
            # hung and killed it; now it ends by itself, as any idle worker does.
            ended = f"pid {pid} exited ("
            line = wait_until(lambda: next((x for x in running.log if ended in x), None), timeout=LOCK_PATIENCE)
    finally:
        os.close(held)
    assert f"{ended}exit code 0)" in line
    assert "stopped waiting for" in "".join(running.log)


@pytest.mark.slow
def test_a_small_filesystem_keeps_its_floor_free_and_every_request_is_answered(
    tiny_model: Path, tmp_path: Path
) -> None:
    with small_tmpfs(tmp_path / "state", 3 << 10) as state:
        info = os.statvfs(state)
        floor = free_floor(info.f_blocks * info.f_frsize)
        lowest = [info.f_bavail * info.f_frsize]
        done = threading.Event()

        def watch() -> None:  # the lowest free space seen at any moment, not only between requests
            while not done.is_set():
                now = os.statvfs(state)
                lowest[0] = min(lowest[0], now.f_bavail * now.f_frsize)
                time.sleep(0.002)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            with start_host("--model", str(tiny_model), "--state-dir", str(state)) as running:
                with running.client() as client:
                    for _ in range(60):
                        ask(client, conversation())  # raises unless answered 200
                wait_until(lambda: (d := disk(running))["disk_writes"] + d["disk_dropped_writes"] >= 60)
                stats = disk(running)
                log = "".join(running.log)
        finally:
            done.set()
            watcher.join()
    assert lowest[0] >= floor
    assert stats["disk_writes"] >= 60 and stats["disk_entries"] >= 1  # evicted to make room, not refused
    assert "could not write" not in log


@pytest.mark.slow
def test_one_bound_for_every_model_and_a_gone_models_folder_is_removed(tiny_model: Path, tmp_path: Path) -> None:
    import shutil

    bound = 1 << 20
    gone = shutil.copytree(tiny_model, tmp_path / "models" / "pruned-fine-tune")
    state = tmp_path / "state"
    config = tmp_path / "models.toml"
    config.write_text(f'[[model]]\npath = "{tiny_model}"\n[[model]]\nid = "pruned"\npath = "{gone}"\n')
    both = ("--config", str(config), "--state-dir", str(state), "--prompt-cache-disk-mb", "1")
    with start_host(*both) as first, first.client() as client:
        for model in ("tiny", "pruned"):
            for _ in range(4):  # each entry is over 300 KiB: two models' worth is past the bound
                ask(client, conversation(), model=model)
            wait_until(lambda m=model: (d := disk_of(first, m))["disk_writes"] + d["disk_dropped_writes"] >= 4)
        assert disk_of(first, "pruned")["disk_writes"] >= 3  # room was made, in the other's folder too
    folders = {p for p in (state / "prompt-cache").iterdir() if p.is_dir()}
    assert len(folders) == 2
    # One bound for the whole directory (one LRU across its folders), not one for each folder.
    assert 0 < sum(p.stat().st_size for p in cache_files(state)) <= bound
    assert any("pruned-fine-tune" in p.parent.name for p in cache_files(state))

    shutil.rmtree(gone)  # the fine-tune's job was pruned
    with start_host("--model", str(tiny_model), "--state-dir", str(state), "--prompt-cache-disk-mb", "1") as second:
        with second.client() as client:
            ask(client, conversation())
        left = {p for p in (state / "prompt-cache").iterdir() if p.is_dir()}
        assert len(left) == 1 and left < folders and "pruned-fine-tune" not in next(iter(left)).name
    assert "pruned-fine-tune" in "".join(second.log)  # said why the folder went


def disk_of(host: RunningHost, model: str) -> dict[str, Any]:
    return host.worker_health(model)["prompt_cache"]  # type: ignore[no-any-return]
