"""Pulling a model from the Hugging Face Hub: which files, whether they fit, the bytes, their check.

Everything that speaks to the hub is `huggingface_hub`'s: its cache layout (so `hf`, mlx-lm and
transformers find what mlxhost pulled, and the other way round), resumption from its `.incomplete`
files, its retries of a dropped connection, `HF_TOKEN` and the token `hf auth login` saved,
`HF_ENDPOINT`, `HF_HUB_OFFLINE`, xet where the hub serves it. What is ours:

    plan(repo)     the repo's listing at one commit, cut to the files an MLX model needs (weights as
                   safetensors, config, tokenizer, chat template, generation config, an adapter's),
                   never a duplicate .bin/.pth/.gguf; what the cache already holds is not missing
    check_space    the missing bytes against the cache's free space, before the first byte
    fetch(plan)    the missing files, several at once, each reported as it grows; every LFS file's
                   bytes checked against its sha256 (the hub's ETag): a file that does not match is
                   removed and fetched again, never served
    PullError      what went wrong, naming the repo, with what to do

A cancel (`stop` set) ends each transfer at its next chunk; what arrived stays in the cache's
`.incomplete` files, and the next pull sends only the rest. Nothing here imports MLX.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import queue
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "Cancelled",
    "HubUnreachable",
    "NotAnMLXModel",
    "NotEnoughSpace",
    "PullError",
    "PullPlan",
    "PullProgress",
    "RepoFile",
    "RepoGated",
    "RepoNotFound",
    "RevisionNotFound",
    "cache_dir",
    "check_space",
    "choose_files",
    "fetch",
    "parse_reference",
    "plan",
    "pull",
    "pull_logged",
]

# What mlx-lm loads (its own `_download` takes about these): configs and tokenizer files of every
# kind, the weights as safetensors, a chat template, custom tokenizer code (Kimi's tiktoken).
WANTED = (
    "*.json", "*.safetensors", "*.py", "tokenizer.model", "*.tiktoken", "tiktoken.model", "*.txt",
    "*.jinja", "*.jsonl",
)  # fmt: skip
# Weights in other formats, which mlx-lm does not read: a repo that has them beside safetensors
# would cost their bytes twice for nothing.
NEVER = ("*.bin", "*.pth", "*.pt", "*.gguf", "*.ckpt", "*.h5", "*.msgpack", "*.onnx", "*.ot", "*.tflite")
# Mistral's repos carry `consolidated.safetensors` beside `model-*.safetensors`: the same weights
# in Mistral's own layout, which mlx-lm does not load.
DUPLICATE_SAFETENSORS = ("consolidated*.safetensors",)
WORKERS = 8  # files at once, as `snapshot_download`
RATE_WINDOW = 5.0  # seconds of transfer a rate is measured over
CHUNK_HASH = 1 << 20
# huggingface_hub reads a transfer in pieces of its DOWNLOAD_CHUNK_SIZE (10 MB): progress and a
# cancel act between pieces, so a smaller one makes both prompt (a 10 MB piece on a slow link is
# seconds) at no measurable cost in throughput.
TRANSFER_CHUNK = 1 << 20
HASH_QUEUE = 16  # pieces written and not yet hashed: at most this many megabytes held


class PullError(Exception):
    """A pull that cannot go on; the message names the repo and says what to do."""

    def __init__(self, repo: str, message: str) -> None:
        super().__init__(message)
        self.repo = repo


class RepoNotFound(PullError):
    pass


class RevisionNotFound(PullError):
    pass


class RepoGated(PullError):
    """Gated or private: a token, or the licence accepted, would open it."""


class HubUnreachable(PullError):
    pass


class NotAnMLXModel(PullError):
    pass


class NotEnoughSpace(PullError):
    def __init__(self, repo: str, needed: int, free: int, folder: Path) -> None:
        super().__init__(
            repo,
            f"not enough disk space to pull {repo}: it needs {_size(needed)} ({needed} bytes) more, "
            f"and {folder} has {_size(free)} ({free} bytes) free. Free some space (mlxhost models rm "
            "REPO removes a pulled model), or point HF_HUB_CACHE at a larger disk.",
        )
        self.needed = needed
        self.free = free
        self.folder = folder


class Cancelled(PullError):
    pass


@dataclass(frozen=True)
class RepoFile:
    name: str  # its path in the repo
    size: int
    sha256: str | None  # an LFS file's: what its bytes must hash to


@dataclass(frozen=True)
class PullPlan:
    repo: str
    revision: str  # as asked: a branch, a tag or a commit
    commit: str  # what it resolved to
    files: tuple[RepoFile, ...]
    present: int  # bytes the cache already holds (whole files and `.incomplete` parts)

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def missing(self) -> int:
        return max(0, self.total - self.present)


@dataclass(frozen=True)
class PullProgress:
    """Where a pull is: bytes of the whole plan (those present before it began count as done)."""

    repo: str
    file: str | None  # the file most recently fetched from
    done: int
    total: int
    rate: float  # bytes per second, over the last few seconds
    files_done: int
    files_total: int
    finished_file: str | None = None  # set on the report that ends a file

    @property
    def eta(self) -> float | None:
        """Seconds left at the current rate; None while no rate is known."""
        return (self.total - self.done) / self.rate if self.rate > 0 else None


def parse_reference(reference: str) -> tuple[str, str]:
    """`REPO[@REVISION]` as (repo, revision); ValueError when it is not `owner/name`."""
    repo, _, revision = reference.partition("@")
    parts = repo.split("/")
    if len(parts) != 2 or not all(parts) or reference.startswith((".", "/", "~")):
        raise ValueError(f"{reference!r} is not a Hugging Face repo id (owner/name, optionally @revision)")
    return repo, revision or "main"


def cache_dir() -> Path:
    """The Hugging Face cache mlxhost pulls into (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def choose_files(names: Iterable[str]) -> list[str]:
    """The names among `names` an MLX model needs, in their order."""
    names = list(names)
    wanted = [n for n in names if _matches(n, WANTED) and not _matches(n, NEVER)]
    if any(_matches(n, ("model*.safetensors",)) for n in wanted):
        wanted = [n for n in wanted if not _matches(n, DUPLICATE_SAFETENSORS)]
    return wanted


def _matches(name: str, patterns: Iterable[str]) -> bool:
    base = name.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(base, p) for p in patterns)


def _token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def plan(repo: str, revision: str = "main") -> PullPlan:
    """What pulling `repo` at `revision` means: its files, and how much the cache holds already."""
    from huggingface_hub import HfApi

    try:
        from huggingface_hub import constants

        # Its client waits forever by default: a hub that hangs must be an error, not a hang.
        info = HfApi().model_info(
            repo, revision=revision, files_metadata=True, token=_token(), timeout=constants.HF_HUB_ETAG_TIMEOUT
        )
    except Exception as exc:
        raise hub_error(repo, revision, exc) from None
    siblings = {s.rfilename: s for s in info.siblings or ()}
    names = choose_files(siblings)
    files = []
    for name in names:
        sibling = siblings[name]
        lfs = sibling.lfs
        files.append(RepoFile(name, int(sibling.size or 0), lfs.sha256 if lfs is not None else None))
    commit = str(info.sha)
    check_model_files(repo, names, list(siblings))
    found = PullPlan(repo, revision, commit, tuple(files), present=0)
    return PullPlan(repo, revision, commit, found.files, present=_present(found))


def check_model_files(repo: str, chosen: list[str], listed: list[str]) -> None:
    """NotAnMLXModel unless the repo holds a config.json and safetensors weights (or an adapter)."""
    has_config = "config.json" in chosen or "adapter_config.json" in chosen
    has_weights = any(n.endswith(".safetensors") for n in chosen)
    if has_config and has_weights:
        return
    others = sorted({n.rsplit(".", 1)[-1] for n in listed if _matches(n, NEVER)})
    if not has_config:
        why = "it has no config.json, so it is not a model mlx-lm can load"
    elif others:
        why = f"its weights are only in {', '.join('.' + o for o in others)} files, which mlx-lm does not read"
    else:
        why = "it has no safetensors weights"
    raise NotAnMLXModel(
        repo,
        f"{repo} is not an MLX model: {why}. Look for a safetensors copy of it (often under "
        "mlx-community/); a transformers repo with safetensors weights is pulled and converted by "
        f"`mlxhost pull {repo} --quantize 4`.",
    )


def _repo_folder(repo: str) -> Path:
    return cache_dir() / ("models--" + repo.replace("/", "--"))


def _present(plan: PullPlan) -> int:
    """Bytes of the plan the cache holds: files of this commit, and the `.incomplete` parts of others."""
    folder = _repo_folder(plan.repo)
    present = 0
    for file in plan.files:
        if (folder / "snapshots" / plan.commit / file.name).is_file():
            present += file.size
        elif file.sha256 is not None:
            blob = folder / "blobs" / file.sha256
            if blob.is_file():
                present += min(blob.stat().st_size, file.size)
            else:
                partial = blob.with_name(blob.name + ".incomplete")
                if partial.is_file():
                    present += min(partial.stat().st_size, file.size)
    return present


def check_space(plan: PullPlan) -> None:
    """NotEnoughSpace when the missing bytes exceed the cache's free space, before any byte moves."""
    folder = cache_dir()
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the cache may not exist yet: its nearest folder that does
    free = shutil.disk_usage(probe).free
    if plan.missing > free:
        raise NotEnoughSpace(plan.repo, plan.missing, free, folder)


class _Meter:
    """The plan's bytes as its transfers report them, from any thread; `report` throttled by the caller."""

    def __init__(self, plan: PullPlan, on_progress: Callable[[PullProgress], None], stop: threading.Event) -> None:
        self.plan = plan
        self.on_progress = on_progress
        self.stop = stop
        self.lock = threading.Lock()
        self.done = plan.present
        self.files_done = 0
        self.file: str | None = None
        self.samples: deque[tuple[float, int]] = deque([(time.monotonic(), self.done)])

    def add(self, file: str, count: int, cancels: bool = True) -> None:
        if cancels:
            self.check()
        with self.lock:
            self.done += count
            self.file = file

    def check(self) -> None:
        """Cancelled once `stop` is set: raised inside huggingface_hub's transfer loop, which lets
        it through, so that the transfer ends at its next piece."""
        if self.stop.is_set():
            raise Cancelled(self.plan.repo, f"the pull of {self.plan.repo} was cancelled")

    def file_done(self, file: str) -> None:
        with self.lock:
            self.files_done += 1
            self.file = file
        self.report(finished=file)

    def progress(self, finished: str | None = None) -> PullProgress:
        now = time.monotonic()
        with self.lock:
            done, file, files_done = self.done, self.file, self.files_done
            self.samples.append((now, done))
            while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW:
                self.samples.popleft()
            first_at, first = self.samples[0]
        rate = (done - first) / (now - first_at) if now - first_at > 0.05 else 0.0
        total = self.plan.total
        return PullProgress(
            self.plan.repo, file, min(done, total), total, max(0.0, rate), files_done, len(self.plan.files), finished
        )

    def report(self, finished: str | None = None) -> None:
        self.on_progress(self.progress(finished))


def _bar_class(meter: _Meter, name: str, cancels: bool = True) -> type:
    """A tqdm class for one file's transfer that shows nothing and counts into `meter` (and
    cancels the transfer there, unless its file does: see `_Hashing`)."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Counted(hf_tqdm):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            # huggingface_hub rolls a count back (a negative n) when a server ignored a resume.
            meter.add(name, int(n or 0), cancels)
            return None

    return Counted


def fetch(
    plan: PullPlan,
    on_progress: Callable[[PullProgress], None] = lambda p: None,
    stop: threading.Event | None = None,
    every: float = 0.2,
) -> Path:
    """Bring the plan's files into the cache, checked; the snapshot's folder.

    `on_progress` is called from the transfer threads at most every `every` seconds, and once as
    each file ends. A set `stop` ends every transfer at its next chunk (Cancelled).
    """
    from huggingface_hub import constants

    constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, TRANSFER_CHUNK)
    stop = stop or threading.Event()
    meter = _Meter(plan, on_progress, stop)
    ticking = threading.Event()

    def tick() -> None:
        while not ticking.wait(every):
            meter.report()

    ticker = threading.Thread(target=tick, name="pull-progress", daemon=True)
    ticker.start()
    try:
        with ThreadPoolExecutor(WORKERS, thread_name_prefix="pull") as pool:
            futures = [pool.submit(_fetch_file, plan, file, meter) for file in plan.files]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                stop.set()  # the others end at their next chunk
                for future in futures:
                    future.cancel()
                raise
    finally:
        ticking.set()
        ticker.join()
    meter.report()
    _remember_revision(plan)
    return _repo_folder(plan.repo) / "snapshots" / plan.commit


def _remember_revision(plan: PullPlan) -> None:
    """`refs/<revision>` names the commit, as huggingface_hub's own downloads leave it: files
    fetched by commit leave none, and an offline lookup of the branch (`serve --offline`, mlx-lm,
    transformers) finds the snapshot through it."""
    if plan.revision == plan.commit:
        return
    ref = _repo_folder(plan.repo) / "refs" / plan.revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    if not ref.is_file() or ref.read_text().strip() != plan.commit:
        ref.write_text(plan.commit)


def _fetch_file(plan: PullPlan, file: RepoFile, meter: _Meter) -> None:
    from huggingface_hub import hf_hub_download

    snapshot = _repo_folder(plan.repo) / "snapshots" / plan.commit / file.name
    for _attempt in range(2):
        if meter.stop.is_set():
            raise Cancelled(plan.repo, f"the pull of {plan.repo} was cancelled")
        try:
            # An LFS file's blob, resumed and checked as it arrives (or checked as found); one the
            # hub serves over xet goes through huggingface_hub's xet client, which resumes from
            # its own chunk cache, and is checked once it is in.
            xet = file.sha256 is not None and not snapshot.is_file() and _served_by_xet(plan, file)
            checked = file.sha256 is None or snapshot.is_file() or xet or _fetch_blob(plan, file, meter)
            if not checked:
                # The bytes are not what the hub's checksum says (a bad mirror, a disk that lied):
                # they are gone, never linked or served, and the file is fetched once more.
                with meter.lock:
                    meter.done -= file.size
                continue
            # An LFS file's blob is in place (linking it costs a HEAD, no body); a small file comes whole.
            path = hf_hub_download(
                plan.repo, file.name, revision=plan.commit, token=_token(), tqdm_class=_bar_class(meter, file.name)
            )
            if xet and _sha256(Path(path)) != file.sha256:
                _unlink_cached(Path(path))
                with meter.lock:
                    meter.done -= file.size
                continue
        except PullError:
            raise
        except Exception as exc:
            raise hub_error(plan.repo, plan.revision, exc, file.name) from None
        meter.file_done(file.name)
        return
    raise PullError(
        plan.repo,
        f"{file.name} of {plan.repo} arrived twice with bytes that do not match the hub's checksum "
        f"(sha256 {file.sha256}); nothing of it is kept. Try again later, or check HF_ENDPOINT.",
    )


def _served_by_xet(plan: PullPlan, file: RepoFile) -> bool:
    """Whether the hub serves `file` over xet and this machine has the xet client (a HEAD)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils._runtime import is_xet_available  # not re-exported by utils

    if constants.HF_HUB_DISABLE_XET or not is_xet_available():
        return False
    url = hf_hub_url(plan.repo, file.name, revision=plan.commit, endpoint=constants.ENDPOINT)
    return get_hf_file_metadata(url, token=_token()).xet_file_data is not None


def _unlink_cached(link: Path) -> None:
    """A snapshot's file and the blob it links to, both gone."""
    blob = link.resolve()
    link.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)


class _Hashing:
    """The file `http_get` writes into, hashing each piece as it is written, in a thread of its
    own (hashlib lets go of the GIL): checking a weights file then costs no second read of it (a
    second or more per GB here) and no time on the transfer's thread. A rewind (a server that
    ignored the range) makes the running digest void: the file is read again at the end."""

    def __init__(self, out: BinaryIO, digest: Any, meter: _Meter) -> None:
        self.out = out
        self.digest = digest
        self.meter = meter
        self.valid = True
        self._pieces: queue.Queue[bytes | None] = queue.Queue(maxsize=HASH_QUEUE)
        self._hasher = threading.Thread(target=self._hash, name="pull-hash", daemon=True)
        self._hasher.start()

    def _hash(self) -> None:
        while (piece := self._pieces.get()) is not None:
            self.digest.update(piece)

    def write(self, data: bytes) -> int:
        self._pieces.put(data)
        written = self.out.write(data)
        # huggingface_hub counts a piece before it writes it: a cancel raised in the count would
        # lose the piece (a megabyte), so it is raised here, once the piece is on disk.
        self.meter.check()
        return written

    def hexdigest(self) -> str:
        """The digest of all that was written (waits for the hashing thread)."""
        self.close()
        return str(self.digest.hexdigest())

    def close(self) -> None:
        if self._hasher.is_alive():
            self._pieces.put(None)
            self._hasher.join()

    def tell(self) -> int:
        return self.out.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        self.valid = False
        return self.out.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        self.valid = False
        return self.out.truncate(size)

    def flush(self) -> None:
        self.out.flush()


def _fetch_blob(plan: PullPlan, file: RepoFile, meter: _Meter) -> bool:
    """An LFS file's bytes into `blobs/<sha256>`, resumed from `blobs/<sha256>.incomplete`; False
    (and nothing kept) when they do not hash to its sha256.

    huggingface_hub 2.x resumes a transfer within one call, but downloads into a file named for
    its process and deletes it when the call fails: after a Ctrl-C, a kill or a pull given up on,
    it starts from the first byte. A model's weights are most of its bytes, so these are ours:
    the cache's own layout (the blob named by its sha256, which is the hub's ETag for LFS files),
    filled by huggingface_hub's own `http_get` from where the part on disk ends, hashed as it is
    written, then moved into place for `hf_hub_download` to link. A blob already there (another
    client's download, which checks only its length) is read and checked once.
    """
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    assert file.sha256 is not None
    blobs = _repo_folder(plan.repo) / "blobs"
    blob = blobs / file.sha256
    if blob.is_file():
        if _sha256(blob) == file.sha256:
            return True
        blob.unlink(missing_ok=True)
        return False
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blob.with_name(blob.name + ".incomplete")
    digest = hashlib.sha256()
    with partial.open("a+b") as out:
        have = out.tell()
        if have > file.size:  # not this file's: start again
            out.seek(0)
            out.truncate()
            have = 0
        if have:
            out.seek(0)
            _update(digest, out, have)  # the part kept from before: read once, to go on hashing
        hashing = _Hashing(out, digest, meter)
        try:
            if have < file.size:
                url = hf_hub_url(plan.repo, file.name, revision=plan.commit, endpoint=constants.ENDPOINT)
                http_get(
                    url, hashing, resume_size=have, headers=build_hf_headers(token=_token()),  # type: ignore[arg-type]
                    expected_size=file.size, displayed_filename=file.name,
                    tqdm_class=_bar_class(meter, file.name, cancels=False),
                )  # fmt: skip
        finally:
            hashing.close()
    matches = hashing.hexdigest() == file.sha256 if hashing.valid else _sha256(partial) == file.sha256
    if not matches:
        partial.unlink(missing_ok=True)
        return False
    os.replace(partial, blob)
    return True


def _update(digest: Any, source: BinaryIO, count: int) -> None:
    while count > 0 and (chunk := source.read(min(CHUNK_HASH, count))):
        digest.update(chunk)
        count -= len(chunk)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK_HASH):
            digest.update(chunk)
    return digest.hexdigest()


def pull(
    repo: str,
    revision: str = "main",
    on_progress: Callable[[PullProgress], None] = lambda p: None,
    on_plan: Callable[[PullPlan], None] = lambda p: None,
    stop: threading.Event | None = None,
) -> tuple[PullPlan, Path]:
    """`plan`, `check_space`, `fetch`: the repo's snapshot folder, every file in it checked."""
    found = plan(repo, revision)
    check_space(found)
    on_plan(found)
    return found, fetch(found, on_progress, stop)


def pull_logged(reference: str) -> Path:
    """Pull `reference` (REPO[@REVISION]) with a log line every tenth of the way; StartupError
    naming the repo when it cannot be."""
    from mlxhost.errors import StartupError

    repo, revision = parse_reference(reference)
    logger = logging.getLogger("mlxhost.pull")
    tenths = -1

    def progress(p: PullProgress) -> None:
        nonlocal tenths
        step = int(p.done * 10 / p.total) if p.total else 10
        if step > tenths:
            tenths = step
            logger.info("pulling %s: %d%% of %s at %s/s", repo, step * 10, _size(p.total), _size(p.rate))

    try:
        return pull(repo, revision, progress)[1]
    except PullError as exc:
        raise StartupError(str(exc)) from None


def hub_error(repo: str, revision: str, exc: BaseException, file: str | None = None) -> PullError:
    """What huggingface_hub raised, as the PullError a user can act on."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
    if isinstance(exc, GatedRepoError):
        return RepoGated(
            repo,
            f"{repo} is gated: accept its licence at {endpoint}/{repo} while logged in, then log in "
            "here (`hf auth login`, or set HF_TOKEN) and pull again",
        )
    if isinstance(exc, RepositoryNotFoundError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403) and _token() is None:
            return RepoNotFound(
                repo,
                f"{repo} was not found on {endpoint}: check the name; if it is private or gated, log in "
                "(`hf auth login`, or set HF_TOKEN) and accept its licence on its page",
            )
        return RepoNotFound(
            repo, f"{repo} was not found on {endpoint}, or the token given cannot read it: check the name"
        )
    if isinstance(exc, RevisionNotFoundError):
        return RevisionNotFound(repo, f"{repo} has no revision {revision!r} (a branch, tag or commit)")
    if isinstance(exc, RemoteEntryNotFoundError):
        return PullError(repo, f"{repo} lists {file} but the hub has no such file at {revision}")
    if isinstance(exc, OfflineModeIsEnabled | LocalEntryNotFoundError) and constants.HF_HUB_OFFLINE:
        return HubUnreachable(
            repo, f"{repo} cannot be pulled: HF_HUB_OFFLINE is set (offline mode); unset it to pull"
        )
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status in (401, 403):
            return RepoGated(
                repo,
                f"{endpoint} refused {repo} ({status}): log in (`hf auth login`, or set HF_TOKEN) and accept "
                "its licence on its page if it is gated",
            )
        return HubUnreachable(
            repo, f"{endpoint} answered {status} for {repo}{' (' + file + ')' if file else ''}: try again later"
        )
    if isinstance(exc, OSError) and "Consistency check failed" in str(exc):
        return HubUnreachable(
            repo, f"the connection to {endpoint} kept breaking while fetching {file} of {repo}: pull again to resume"
        )
    name = type(exc).__name__
    if isinstance(exc, TimeoutError) or "Timeout" in name:
        what = "did not answer in time"
    elif isinstance(exc, ConnectionError | OSError) or "Connect" in name or "Protocol" in name or "Network" in name:
        what = "cannot be reached"
    else:
        return PullError(repo, f"pulling {repo} failed: {name}: {exc}")
    return HubUnreachable(
        repo,
        f"the hub at {endpoint} {what} ({name}) while pulling {repo}: check the network or HF_ENDPOINT, "
        "or serve what is already on disk with --offline",
    )


def _size(count: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count} bytes"
