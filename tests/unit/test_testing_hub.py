"""The loopback Hub (`mlxhost.testing_hub`) against the real `huggingface_hub` client, and what that
client does when the Hub misbehaves: each fault test asserts the client's behaviour as it is."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest
from huggingface_hub import HfApi, constants, file_download, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import _http

from mlxhost.testing_hub import HubServer

pytestmark = pytest.mark.unit

REPO = "org/tiny"
WEIGHTS = "model.safetensors"
SIZE = 3_000_000
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}


def client_env(endpoint: str, tmp_path: Path) -> dict[str, str]:
    """What a client process needs in its environment, which huggingface_hub reads at import."""
    return {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp_path / "home"),
        "HF_HUB_CACHE": str(tmp_path / "cache"),
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",  # the `hf` CLI's look for a new version, on the internet
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A model folder with a weights file in each format a client could choose from."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    (folder / WEIGHTS).write_bytes(os.urandom(SIZE))
    (folder / "model.bin").write_bytes(os.urandom(1000))
    (folder / "weights.gguf").write_bytes(os.urandom(1000))
    return folder


@pytest.fixture
def hub(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with HubServer() as hub:
        hub.add_repo(REPO, model)
        # A subprocess would read these from its environment as it imports huggingface_hub...
        for name, value in client_env(hub.endpoint, tmp_path).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        # ...this process imported it already: its constants are patched (the calls read them).
        url = hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "home" / "token"))
        yield hub


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's retry sleeps, recorded instead of slept (they are its only uses of `time`)."""
    sleeps: list[float] = []
    fake = SimpleNamespace(sleep=sleeps.append)
    monkeypatch.setattr(file_download, "time", fake)
    monkeypatch.setattr(_http, "time", fake)
    return sleeps


def gets(hub: HubServer, filename: str) -> list[dict[str, str]]:
    """The headers of each GET of that file."""
    return [
        headers
        for method, path, headers in hub.requests
        if method == "GET" and path.endswith(f"/{filename}")
    ]


def test_snapshot_download_fetches_exactly_the_allowed_files(hub: HubServer, model: Path) -> None:
    folder = Path(snapshot_download(REPO, allow_patterns=["*.json", "*.safetensors"]))
    wanted = ["config.json", WEIGHTS, "tokenizer.json"]
    assert sorted(p.name for p in folder.iterdir()) == wanted
    assert folder.is_relative_to(constants.HF_HUB_CACHE)
    for name in wanted:
        assert (folder / name).read_bytes() == (model / name).read_bytes()
        assert hub.sent(REPO, name) == (model / name).stat().st_size
    assert hub.sent(REPO, "model.bin") == hub.sent(REPO, "weights.gguf") == 0
    assert hub.total_sent == sum((model / name).stat().st_size for name in wanted)


def test_model_info_gives_each_files_size_blob_and_lfs_sha256(hub: HubServer, model: Path) -> None:
    info = HfApi().model_info(REPO, files_metadata=True)
    assert info.config == CONFIG
    assert info.gated is False and info.private is False
    siblings = {s.rfilename: s for s in info.siblings or []}
    assert sorted(siblings) == sorted(p.name for p in model.iterdir())
    weights, tokenizer = (model / WEIGHTS).read_bytes(), (model / "tokenizer.json").read_bytes()
    assert siblings[WEIGHTS].size == SIZE
    assert siblings[WEIGHTS].lfs is not None
    assert siblings[WEIGHTS].lfs.sha256 == hashlib.sha256(weights).hexdigest()
    assert siblings["tokenizer.json"].lfs is None
    git_sha1 = hashlib.sha1(b"blob %d\0" % len(tokenizer) + tokenizer).hexdigest()
    assert siblings["tokenizer.json"].blob_id == git_sha1
    # The tree listing says the same, at the branch and at the commit the branch names.
    tree = {f.path: f for f in HfApi().list_repo_tree(REPO, recursive=True, revision=info.sha)}
    assert {path: f.size for path, f in tree.items()} == {name: s.size for name, s in siblings.items()}
    assert HfApi().repo_info(REPO, revision="main").sha == info.sha


def test_a_cut_body_is_fetched_again_from_the_start_within_the_same_call(
    hub: HubServer, model: Path, slept: list[float]
) -> None:
    """http_get retries a body cut short (RemoteProtocolError) after 1 s, but with what it wrote to
    its file: httpx2's iter_bytes hands over DOWNLOAD_CHUNK_SIZE (10 MiB) at a time, so the bytes of
    a chunk not yet whole when the cut came are lost, and the retry starts at 0 without a Range."""
    hub.drop_after(WEIGHTS, 1_000_000)
    path = hf_hub_download(REPO, WEIGHTS)
    assert Path(path).read_bytes() == (model / WEIGHTS).read_bytes()
    assert slept == [1]
    assert [headers.get("range") for headers in gets(hub, WEIGHTS)] == [None, None]
    assert hub.sent(REPO, WEIGHTS) == SIZE + 1_000_000


def test_a_cut_body_resumes_from_the_last_whole_chunk(
    hub: HubServer, model: Path, slept: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    hub.drop_after(WEIGHTS, 1_000_000)
    path = hf_hub_download(REPO, WEIGHTS)
    assert Path(path).read_bytes() == (model / WEIGHTS).read_bytes()
    kept = 1_000_000 // (64 * 1024) * (64 * 1024)
    assert [headers.get("range") for headers in gets(hub, WEIGHTS)] == [None, f"bytes={kept}-"]
    assert SIZE < hub.sent(REPO, WEIGHTS) == SIZE + 1_000_000 - kept < SIZE + 64 * 1024


def test_a_failed_download_leaves_nothing_for_the_next_call_to_resume(
    hub: HubServer, model: Path, slept: list[float]
) -> None:
    """Each call downloads into a file of its own (`<etag>.<uuid>.incomplete`) and deletes it when it
    fails: the next call starts again at byte 0."""
    hub.drop_after(WEIGHTS, 1_000_000, times=-1)
    with pytest.raises(httpx2.RemoteProtocolError):
        hf_hub_download(REPO, WEIGHTS)
    assert slept == [1] * 5  # 5 retries while no byte reaches the file, then it gives up
    assert hub.sent(REPO, WEIGHTS) == 6 * 1_000_000
    assert list(Path(constants.HF_HUB_CACHE).rglob("*.incomplete")) == []
    hub.clear_faults()
    path = hf_hub_download(REPO, WEIGHTS)
    assert Path(path).read_bytes() == (model / WEIGHTS).read_bytes()
    assert hub.sent(REPO, WEIGHTS) == 6 * 1_000_000 + SIZE
    assert [headers.get("range") for headers in gets(hub, WEIGHTS)] == [None] * 7


def test_a_killed_download_leaves_a_part_no_later_call_reads(
    hub: HubServer, model: Path, tmp_path: Path
) -> None:
    """A process killed mid-file leaves `<etag>.<8 hex>.incomplete`: a name no other call picks."""
    hub.throttle(2_000_000)
    env = {**os.environ, **client_env(hub.endpoint, tmp_path)}
    env.pop("HF_TOKEN", None)
    hf = str(Path(sys.executable).with_name("hf"))
    download = subprocess.Popen([hf, "download", REPO, WEIGHTS], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while hub.sent(REPO, WEIGHTS) < 500_000 and download.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    download.kill()
    download.wait()
    sent = -1
    while sent != hub.sent(REPO, WEIGHTS):  # until the server's write in flight has failed
        sent = hub.sent(REPO, WEIGHTS)
        time.sleep(0.2)
    [part] = Path(constants.HF_HUB_CACHE).rglob("*.incomplete")
    sha256 = hashlib.sha256((model / WEIGHTS).read_bytes()).hexdigest()
    assert re.fullmatch(sha256 + r"\.[0-9a-f]{8}\.incomplete", part.name)
    hub.throttle(None)
    assert 0 < sent < SIZE
    hf_hub_download(REPO, WEIGHTS)
    assert hub.sent(REPO, WEIGHTS) == sent + SIZE and part.exists()  # sent again whole; the part stays
    assert [headers.get("range") for headers in gets(hub, WEIGHTS)] == [None, None]


def test_a_download_cancelled_from_its_progress_bar_keeps_no_part(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception raised in `tqdm_class.update` (a cancel) ends the transfer, and the part file
    goes with it all the same: the next call sends the whole file."""

    class Cancelled(Exception):
        pass

    class CancelAtOnce:
        def __init__(self, **kwargs: object) -> None:
            pass

        def __enter__(self) -> CancelAtOnce:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, n: int) -> None:
            raise Cancelled

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256 * 1024)
    with pytest.raises(Cancelled):
        hf_hub_download(REPO, WEIGHTS, tqdm_class=CancelAtOnce)  # type: ignore[arg-type]
    assert list(Path(constants.HF_HUB_CACHE).rglob("*.incomplete")) == []
    hf_hub_download(REPO, WEIGHTS)
    assert [headers.get("range") for headers in gets(hub, WEIGHTS)] == [None, None]


def test_corrupt_bytes_are_kept_unchecked(hub: HubServer, model: Path) -> None:
    """http_get checks only the length; nothing compares the bytes with the ETag's sha256, which
    names the blob all the same. `verify_repo_checksums` (`hf cache verify`) finds it afterwards."""
    hub.corrupt(WEIGHTS)
    path = Path(hf_hub_download(REPO, WEIGHTS))
    expected = hashlib.sha256((model / WEIGHTS).read_bytes()).hexdigest()
    assert path.stat().st_size == SIZE and path.read_bytes() != (model / WEIGHTS).read_bytes()
    assert path.resolve().name == expected  # the cache's blob, named by a hash it does not have
    check = HfApi().verify_repo_checksums(REPO)
    assert [(m["path"], m["expected"]) for m in check.mismatches] == [(WEIGHTS, expected)]


def test_hub_errors_become_the_clients_exceptions(hub: HubServer, model: Path) -> None:
    api = HfApi()
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("nope/nope")
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="nope")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO, "missing.json")
    hub.fail(404, "*/config.json")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO, "config.json")
    hub.fail(404, "/api/models/*/revision/*")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(REPO)
    hub.fail(401, "/api/*")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(REPO)

    hub.add_repo("org/gated", model, gated=True)
    assert api.model_info("org/gated").gated == "auto"  # its card is public, its files are not
    with pytest.raises(GatedRepoError):
        hf_hub_download("org/gated", "config.json")
    assert Path(hf_hub_download("org/gated", "config.json", token="hf_any")).is_file()
    hub.add_repo("org/private", model, private=True)
    with pytest.raises(RepositoryNotFoundError) as missing:
        api.model_info("org/private")
    assert not isinstance(missing.value, GatedRepoError)
    assert api.model_info("org/private", token="hf_any").private is True


def test_server_errors(hub: HubServer, slept: list[float]) -> None:
    """model_info does not retry; a file's HEAD is asked again at once, then with backoff."""
    hub.fail(500, "/api/*")
    with pytest.raises(HfHubHTTPError) as error:
        HfApi().model_info(REPO)
    assert error.value.response.status_code == 500 and len(hub.requests) == 1

    hub.fail(503, "*/config.json")
    assert Path(hf_hub_download(REPO, "config.json")).is_file()
    assert slept == []  # the second HEAD follows the first without a wait

    hub.fail(502, "*/tokenizer.json", times=-1)
    with pytest.raises(LocalEntryNotFoundError) as gone:
        hf_hub_download(REPO, "tokenizer.json")
    assert isinstance(gone.value.__cause__, HfHubHTTPError)
    assert slept == [1, 2, 4, 8, 8]  # 23 s unpatched
    assert len([1 for method, path, _ in hub.requests if path.endswith("/tokenizer.json")]) == 7

    slept.clear()
    hub.fail(500, "*/tree/*", times=-1)
    with pytest.raises(HfHubHTTPError):
        list(HfApi().list_repo_tree(REPO))
    assert slept == [1, 2, 4, 8, 8]


def test_a_stalled_hub_times_out(hub: HubServer, monkeypatch: pytest.MonkeyPatch, slept: list[float]) -> None:
    """HfApi calls wait forever unless given `timeout=`; hf_hub_download's HEAD waits
    HF_HUB_ETAG_TIMEOUT, then once more with a fixed 60 s (`_ETAG_RETRY_TIMEOUT`) and backoff."""
    hub.stall(5, "/api/*")
    started = time.monotonic()
    with pytest.raises(httpx2.ReadTimeout):
        HfApi().model_info(REPO, timeout=0.3)
    assert time.monotonic() - started < 2

    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 0.3)  # the env var, read at import
    hub.stall(5, "*/config.json")
    started = time.monotonic()
    assert Path(hf_hub_download(REPO, "config.json")).is_file()  # the second HEAD was answered
    assert time.monotonic() - started < 2

    monkeypatch.setattr(file_download, "_ETAG_RETRY_TIMEOUT", 0.3)
    hub.stall(5, "*/tokenizer.json", times=-1)
    started = time.monotonic()
    with pytest.raises(LocalEntryNotFoundError) as gone:
        hf_hub_download(REPO, "tokenizer.json")
    assert isinstance(gone.value.__cause__, httpx2.ReadTimeout)
    assert time.monotonic() - started < 4 and slept == [1, 2, 4, 8, 8]


def test_a_stalled_body_times_out_after_five_retries(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch, slept: list[float]
) -> None:
    """The GET waits HF_HUB_DOWNLOAD_TIMEOUT, then http_get retries it after 1 s, 5 times."""
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 2)  # the HEAD outwaits the stall...
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.2)  # ...the GETs do not
    hub.stall(0.4, "*/config.json", times=-1)
    with pytest.raises(httpx2.ReadTimeout):
        hf_hub_download(REPO, "config.json")
    assert slept == [1] * 5 and len(gets(hub, "config.json")) == 6


def test_progress_comes_a_download_chunk_at_a_time(hub: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tqdm_class` gets `update(n)` for each DOWNLOAD_CHUNK_SIZE (10 MiB unless patched) received."""
    updates: list[int] = []

    class Progress:
        def __init__(self, **kwargs: object) -> None:
            assert kwargs["total"] == SIZE and kwargs["initial"] == 0

        def __enter__(self) -> Progress:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, n: int) -> None:
            updates.append(n)

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256 * 1024)
    hub.throttle(10_000_000)
    started = time.monotonic()
    hf_hub_download(REPO, WEIGHTS, tqdm_class=Progress)  # type: ignore[arg-type]
    assert time.monotonic() - started >= 0.25
    assert sum(updates) == SIZE and len(updates) == -(-SIZE // (256 * 1024))


def test_the_command_serves_until_terminated(model: Path, tmp_path: Path) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "mlxhost.testing_hub", "--repo", f"{REPO}={model}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        assert line.startswith("HF_ENDPOINT=http://127.0.0.1:")
        env = {**os.environ, **client_env(line.removeprefix("HF_ENDPOINT="), tmp_path)}
        env.pop("HF_TOKEN", None)
        hf = str(Path(sys.executable).with_name("hf"))
        command = [hf, "download", REPO, "config.json", "--quiet"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).read_bytes() == (model / "config.json").read_bytes()
    finally:
        server.terminate()
        assert server.wait(timeout=10) == 0
