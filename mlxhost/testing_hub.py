"""A Hugging Face Hub on loopback, for the tests and the benchmarks: local folders served as model
repos to the real `huggingface_hub` client, with faults to inject (a cut connection, corrupt bytes,
an error status, a hung answer, a slow link) and a count of the file bytes it sent.

What of the protocol it serves, as `huggingface_hub` 2.x asks for it (read from its source):

- `GET /api/models/{repo}[/revision/{rev}]` (`model_info`, `repo_info`, `snapshot_download`): `sha`,
  `siblings`, `config`..., and with `blobs=true` (`files_metadata=True`) each file's `size`, `blobId`
  (git's blob sha1) and `lfs` (sha256, size) for LFS files.
- `GET /api/models/{repo}/tree/{rev}[/{path}]` (`list_repo_tree`, `snapshot_download`): one page.
- `HEAD` and `GET /{repo}/resolve/{rev}/{file}` (`hf_hub_download`), served directly (no redirect):
  `X-Repo-Commit`, `ETag`, `X-Linked-Etag`/`X-Linked-Size` for LFS files, `Range` answered with 206.
  No `X-Xet-*` header is ever sent, so the client downloads over plain HTTP without `hf_xet`.
- Errors as the hub sends them (`X-Error-Code`, `X-Error-Message`, a JSON `error`): a missing or
  private repo is 401 `RepoNotFound`, a missing revision 404 `RevisionNotFound`, a missing file 404
  `EntryNotFound`, a gated repo's file 401 `GatedRepo`. Any `Authorization: Bearer` token opens
  private and gated repos. A revision is a branch given to `add_repo` or a commit sha it returned.

The client reads its settings once, when it is imported (`huggingface_hub.constants`: `ENDPOINT`,
`HUGGINGFACE_CO_URL_TEMPLATE`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`, `HF_HUB_ETAG_TIMEOUT`,
`HF_HUB_DOWNLOAD_TIMEOUT`, `HF_TOKEN_PATH`...). A subprocess gets them as environment variables
(`HF_ENDPOINT=hub.endpoint`, `HF_HUB_CACHE`, and `HF_HUB_DISABLE_UPDATE_CHECK=1` for the `hf` CLI,
which otherwise looks for updates on the internet); in this process, pass `endpoint=hub.endpoint`
and `cache_dir=` to each call, or patch `constants.ENDPOINT`, `HUGGINGFACE_CO_URL_TEMPLATE` and
`HF_HUB_CACHE` (the functions read those at each call).

`python -m mlxhost.testing_hub --repo ID=DIR [--repo ...] [--port N]` serves until SIGTERM or
SIGINT, and prints `HF_ENDPOINT=http://127.0.0.1:PORT` once it does. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["HubServer", "main"]

CHUNK = 64 * 1024  # bytes per socket write: the grain of the byte count and of the throttle
LFS_SUFFIXES = {".safetensors", ".bin", ".gguf", ".pth", ".pt"}
LFS_OVER = 1_000_000  # bytes: a bigger file is LFS whatever its name, as the hub would store it
FLIP = bytes(255 - i for i in range(256))  # `corrupt`'s translation: every bit flipped
DATE = "2024-01-01T00:00:00.000Z"  # the one format the client's parse_datetime reads

# On the raw path: a revision comes quoted whole ("refs%2Fpr%2F1"), so it never holds a "/".
RESOLVE = re.compile(r"^/(.+?)/resolve/([^/]+)/(.+)$")
TREE = re.compile(r"^/api/models/(.+?)/tree/([^/]+)(?:/(.+))?$")
REVISION = re.compile(r"^/api/models/(.+?)/revision/([^/]+)$")
INFO = re.compile(r"^/api/models/(.+)$")


@dataclass(frozen=True)
class Blob:
    path: Path
    size: int
    oid: str  # git's blob sha1: the tree's `oid`, the siblings' `blobId`, a small file's ETag
    sha256: str
    lfs: bool

    @classmethod
    def of(cls, path: Path) -> Blob:
        size = path.stat().st_size
        git, sha256 = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                git.update(chunk)
                sha256.update(chunk)
        lfs = path.suffix in LFS_SUFFIXES or size > LFS_OVER
        return cls(path, size, git.hexdigest(), sha256.hexdigest(), lfs)

    @property
    def etag(self) -> str:  # the name the client gives the blob in its cache
        return self.sha256 if self.lfs else self.oid


@dataclass(frozen=True)
class Snapshot:
    sha: str
    files: dict[str, Blob]
    config: dict[str, Any] | None


@dataclass
class Repo:
    refs: dict[str, Snapshot]  # a branch name, or a commit sha, to its files
    gated: bool
    private: bool


@dataclass
class Fault:
    kind: str  # "drop", "corrupt", "fail" or "stall"
    glob: str  # on the filename in the repo (drop, corrupt) or on the URL path (fail, stall)
    times: int  # uses left; -1 forever
    value: float = 0  # drop's byte count, fail's status, stall's seconds
    code: str | None = None  # fail's X-Error-Code


class HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def _config(folder: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    return {key: config[key] for key in ("model_type", "architectures") if key in config}


def _default_code(status: int, path: str) -> str | None:
    """The X-Error-Code the hub would send with `status` for that URL."""
    if status == 404 and RESOLVE.match(path):
        return "EntryNotFound"
    if status == 404 and (TREE.match(path) or REVISION.match(path)):
        return "RevisionNotFound"
    # 401 is the hub's answer to an anonymous client for a missing repo; 403 to a token not granted.
    return {401: "RepoNotFound", 403: "GatedRepo", 404: "RepoNotFound"}.get(status)  # 5xx: a bare status


def _range(header: str | None, size: int) -> tuple[int, int]:
    """`Range: bytes=N-`, `N-M` or `-K` as [start, end); the whole file without one."""
    match = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header or "")
    if match is None or match.groups() == ("", ""):
        return 0, size
    first, last = match.groups()
    if not first:  # the last `last` bytes
        start, end = max(size - int(last), 0), size
    else:
        start, end = int(first), min(int(last) + 1, size) if last else size
    if start >= end:
        raise HubError(416, None, "Requested range not satisfiable", {"Content-Range": f"bytes */{size}"})
    return start, end


def _info(repo_id: str, repo: Repo, snapshot: Snapshot, blobs: bool) -> dict[str, Any]:
    siblings = []
    for name, blob in sorted(snapshot.files.items()):
        sibling: dict[str, Any] = {"rfilename": name}
        if blobs:
            sibling |= {"size": blob.size, "blobId": blob.oid}
            if blob.lfs:
                sibling["lfs"] = {"sha256": blob.sha256, "size": blob.size, "pointerSize": 134}
        siblings.append(sibling)
    return {
        "_id": snapshot.sha[:24], "id": repo_id, "modelId": repo_id, "sha": snapshot.sha,
        "author": repo_id.split("/")[0] if "/" in repo_id else None,
        "lastModified": DATE, "createdAt": DATE, "private": repo.private,
        "gated": "auto" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
        "library_name": "mlx", "tags": ["mlx"], "cardData": None, "config": snapshot.config,
        "siblings": siblings, "spaces": [], "usedStorage": sum(b.size for b in snapshot.files.values()),
    }  # fmt: skip


def _tree(snapshot: Snapshot, folder: str, recursive: bool) -> list[dict[str, Any]]:
    prefix = folder.strip("/") + "/" if folder.strip("/") else ""
    files, folders = [], set()
    for name, blob in sorted(snapshot.files.items()):
        if not name.startswith(prefix):
            continue
        parts = name[len(prefix) :].split("/")
        if not recursive and len(parts) > 1:
            folders.add(prefix + parts[0])
            continue
        folders.update(prefix + "/".join(parts[:i]) for i in range(1, len(parts)))
        entry: dict[str, Any] = {"type": "file", "oid": blob.oid, "size": blob.size, "path": name}
        if blob.lfs:
            entry["lfs"] = {"oid": blob.sha256, "size": blob.size, "pointerSize": 134}
        files.append(entry)
    if prefix and not files and not folders:
        raise HubError(404, "EntryNotFound", f"{folder} does not exist on {snapshot.sha}")
    # A folder's oid needs only be stable: the client keeps it as `tree_id` and asks nothing of it.
    oid = lambda path: hashlib.sha1(f"tree {snapshot.sha} {path}".encode()).hexdigest()  # noqa: E731
    listed = [{"type": "directory", "oid": oid(path), "size": 0, "path": path} for path in sorted(folders)]
    return listed + files


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # `close` ends kept-alive connections itself: joining them would wait on clients
    hub: HubServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client gone away is no news
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's pool expects: every answer has a length
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.hub._lock:
            self.server.hub._handlers[self] = threading.current_thread()

    def finish(self) -> None:
        with self.server.hub._lock:
            self.server.hub._handlers.pop(self, None)
        try:
            super().finish()
        except OSError:
            pass  # the client, or a `drop`, closed it already

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: a test reads `hub.requests`

    def do_GET(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def _answer(self) -> None:
        hub, url = self.server.hub, urlsplit(self.path)
        with hub._lock:
            hub.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        try:
            if stall := hub._take("stall", unquote(url.path)):
                hub._closing.wait(stall.value)
            if fail := hub._take("fail", unquote(url.path)):
                status = int(fail.value)
                raise HubError(status, fail.code or _default_code(status, url.path), f"Injected {status}")
            self._route(url.path, parse_qs(url.query))
        except HubError as error:
            headers = {"X-Error-Message": error.message, **error.headers}
            if error.code:
                headers["X-Error-Code"] = error.code
            self._json({"error": error.message}, error.status, headers)
        except OSError:
            self.close_connection = True  # the client went away mid-answer

    def _route(self, path: str, query: dict[str, list[str]]) -> None:
        hub, authed = self.server.hub, self.headers.get("Authorization", "").startswith("Bearer ")
        flag = lambda name: query.get(name, [""])[-1].lower() in ("true", "1")  # noqa: E731
        if match := RESOLVE.match(path):
            repo_id, revision, filename = map(unquote, match.groups())
            repo, snapshot = hub._find(repo_id, revision, authed)
            if repo.gated and not authed:
                raise HubError(401, "GatedRepo", f"Access to model {repo_id} is restricted: log in first.")
            if filename not in snapshot.files:
                raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": snapshot.sha})
            return self._file(repo_id, filename, snapshot, snapshot.files[filename])
        if match := TREE.match(path):
            repo_id, revision, folder = (unquote(group or "") for group in match.groups())
            return self._json(_tree(hub._find(repo_id, revision, authed)[1], folder, flag("recursive")))
        if match := REVISION.match(path):
            repo_id, revision = map(unquote, match.groups())
        elif match := INFO.match(path):
            repo_id, revision = unquote(match.group(1)), "main"
        else:
            raise HubError(404, None, "Not found")
        repo, snapshot = hub._find(repo_id, revision, authed)
        self._json(_info(repo_id, repo, snapshot, flag("blobs")))

    def _file(self, repo_id: str, filename: str, snapshot: Snapshot, blob: Blob) -> None:
        start, end = _range(self.headers.get("Range"), blob.size)
        whole = (start, end) == (0, blob.size)
        self.send_response(200 if whole else 206)
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Length": str(end - start),
            "Accept-Ranges": "bytes",
            "ETag": f'"{blob.etag}"',
            "X-Repo-Commit": snapshot.sha,
            # The name the client shows in its progress bar (else the whole URL); quoted, as a
            # header holds latin-1 only.
            "Content-Disposition": f'inline; filename="{quote(filename.rsplit("/", 1)[-1])}";',
        }
        if blob.lfs:
            headers |= {"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(blob.size)}
        if not whole:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{blob.size}"
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == "GET":
            self._body(repo_id, filename, blob, start, end)

    def _body(self, repo_id: str, filename: str, blob: Blob, start: int, end: int) -> None:
        hub = self.server.hub
        drop, corrupt = hub._take("drop", filename), hub._take("corrupt", filename)
        cut = drop is not None and drop.value < end - start
        left = int(drop.value) if drop is not None and cut else end - start
        with blob.path.open("rb") as f:
            f.seek(start)
            while left > 0 and (chunk := f.read(min(hub._chunk(), left))):
                self.wfile.write(chunk.translate(FLIP) if corrupt else chunk)
                with hub._lock:  # counted once the socket took it: a cut connection counts what went out
                    hub._sent[(repo_id, filename)] = hub._sent.get((repo_id, filename), 0) + len(chunk)
                left -= len(chunk)
                if (rate := hub._rate) is not None:
                    hub._closing.wait(len(chunk) / rate)
        if cut:
            # FIN, not RST: the client gets exactly the bytes written, then a body cut short.
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    def _json(self, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class HubServer:
    """A context manager:
    `with HubServer() as hub: hub.add_repo(...); os.environ['HF_ENDPOINT'] = hub.endpoint`

    Each fault is spent once (or `times` times; -1 forever), by the first request it matches: a
    file fault's glob is matched (fnmatch) on the filename in the repo, a request fault's on the
    URL path (unquoted, without its query, e.g. "/org/model/resolve/main/config.json").
    """

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.endpoint = ""  # "http://127.0.0.1:PORT" once started
        # (method, path with its query, headers by lowercase name) of every request, in order
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._repos: dict[str, Repo] = {}
        self._faults: list[Fault] = []
        self._sent: dict[tuple[str, str], int] = {}
        self._rate: int | None = None
        self._lock = threading.Lock()
        self._closing = threading.Event()  # wakes the stalls and the throttled when the server closes
        self._handlers: dict[_Handler, threading.Thread] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None):
        self.close()

    def start(self) -> None:
        self._closing.clear()
        server = self._server = _Server(("127.0.0.1", self.port), _Handler)
        server.hub, self.port = self, server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # A short poll: `close` waits one for the loop to notice.
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="hub", daemon=True)
        self._thread.start()

    def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._closing.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            handlers = list(self._handlers.items())
        for handler, thread in handlers:
            try:  # wakes a handler waiting for the next request on a kept-alive connection
                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            thread.join(timeout=5)
        if self._thread is not None:
            self._thread.join()

    def add_repo(
        self,
        repo_id: str,
        folder: Path,
        *,
        revision: str = "main",
        gated: bool = False,
        private: bool = False,
    ) -> str:
        """Serve every file under `folder` (recursively, paths relative to it) as repo `repo_id` at
        `revision`; returns the commit sha (40 hex, deterministic from the files' contents). The
        files are hashed now and read as they are sent: they must not change meanwhile."""
        paths = sorted(p for p in Path(folder).rglob("*") if p.is_file())
        files = {p.relative_to(folder).as_posix(): Blob.of(p) for p in paths}
        listing = "".join(f"{name}\0{blob.oid}\n" for name, blob in files.items())
        snapshot = Snapshot(hashlib.sha1(listing.encode()).hexdigest(), files, _config(Path(folder)))
        with self._lock:
            repo = self._repos.setdefault(repo_id, Repo({}, gated, private))
            repo.gated, repo.private = gated, private
            repo.refs |= {revision: snapshot, snapshot.sha: snapshot}
        return snapshot.sha

    def sent(self, repo_id: str, filename: str) -> int:
        """The body bytes of that file written to sockets, over every GET (a HEAD sends none). The
        count is of what the kernel took: a client killed meanwhile may not have read the last."""
        with self._lock:
            return self._sent.get((repo_id, filename), 0)

    @property
    def total_sent(self) -> int:
        with self._lock:
            return sum(self._sent.values())

    def drop_after(self, filename_glob: str, nbytes: int, times: int = 1) -> None:
        """The next GET of a matching file sends `nbytes` of its body, then closes the connection."""
        self._add(Fault("drop", filename_glob, times, nbytes))

    def corrupt(self, filename_glob: str, times: int = 1) -> None:
        """The next GET of a matching file sends the right length of wrong bytes, as a bad mirror would."""
        self._add(Fault("corrupt", filename_glob, times))

    def fail(self, status: int, path_glob: str = "*", times: int = 1, code: str | None = None) -> None:
        """The next `times` requests whose URL path matches get `status` as the hub's error, with
        `code` as X-Error-Code: by default what the hub sends with that status for that URL (401
        RepoNotFound, 403 GatedRepo, 404 EntryNotFound/RevisionNotFound/RepoNotFound, 5xx none)."""
        self._add(Fault("fail", path_glob, times, status, code))

    def stall(self, seconds: float, path_glob: str = "*", times: int = 1) -> None:
        """The next matching request waits `seconds` before it is answered (a hung hub)."""
        self._add(Fault("stall", path_glob, times, seconds))

    def throttle(self, bytes_per_s: int | None) -> None:
        """Cap the rate of every file body sent from now on; None for no cap."""
        self._rate = bytes_per_s

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
        self._rate = None

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take(self, kind: str, subject: str) -> Fault | None:
        """The first fault of `kind` whose glob matches `subject`, one use of it spent."""
        with self._lock:
            for fault in self._faults:
                if fault.kind == kind and fnmatch(subject, fault.glob):
                    if fault.times > 0:
                        fault.times -= 1
                        if fault.times == 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _find(self, repo_id: str, revision: str, authed: bool) -> tuple[Repo, Snapshot]:
        with self._lock:
            repo = self._repos.get(repo_id)
        if repo is None or (repo.private and not authed):
            raise HubError(401, "RepoNotFound", "Repository not found")
        if revision not in repo.refs:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return repo, repo.refs[revision]

    def _chunk(self) -> int:
        # Throttled, smaller writes, so that the bytes come about 20 times a second.
        return CHUNK if self._rate is None else max(1024, min(CHUNK, self._rate // 20))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        "python -m mlxhost.testing_hub", description="Serve folders as Hub repos."
    )
    parser.add_argument("--repo", action="append", default=[], metavar="ID=DIR", help="serve DIR as repo ID")
    parser.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with HubServer(port=args.port) as hub:
        for spec in args.repo:
            repo_id, sep, folder = spec.partition("=")
            if not sep or not Path(folder).is_dir():
                parser.error(f"--repo {spec}: expected ID=DIR, DIR a folder")
            hub.add_repo(repo_id, Path(folder))
        print(f"HF_ENDPOINT={hub.endpoint}", flush=True)
        while not stop.wait(0.5):  # a timed wait, so that the signal handler runs promptly
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
