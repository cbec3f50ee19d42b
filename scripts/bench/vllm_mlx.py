"""The second peer: vllm-mlx (PyPI), an OpenAI-compatible server over mlx-lm's `BatchGenerator`,
in a virtual environment of its own, on a free port. Used by `bench.peers` (--peers).

It gets a venv of its own (VENV, under the user's cache folder) because it pins its own mlx-lm
(0.6.0 pulls mlx-lm 0.31, and torch, transformers and gradio beside it: about 7 GB on Linux, where
pip resolves torch's CUDA wheels). It is installed only on request (--install-vllm-mlx:
`python3 -m venv`, then `pip install` of REQUIREMENTS, as tried on Linux x86-64 with Python 3.11);
without it, or where the install or the start fails, `VllmMlxUnavailable` says why and the caller
skips the peer.

It runs as `vllm-mlx serve MODEL_DIR --continuous-batching` with the batch sizes the other servers
use (--max-num-seqs and --completion-batch-size the decode batch, --prefill-batch-size the prefill
batch) and --max-tokens max_tokens; its own defaults otherwise (prefix cache on, a frame per
token). HOME points at a temporary folder for the run: it saves its prefix cache under
~/.cache/vllm-mlx at shutdown and loads it at start, which would let one bench run hit the cache
of the one before. Its requests must name a model (`served_model`). It is started in a session of
its own and stopped by signalling that whole process group.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.figures import progress
from bench.mlx_lm_server import free_port
from bench.peer_process import PeerProcess
from bench.settings import PREFILL_BATCH

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlxhost-bench"
VENV = CACHE / "vllm-mlx-venv"
VERSION = "0.6.0"
# mlx pinned to the version this bench's own mlx-lm runs on, so that both peers compute alike;
# on Linux MLX's CPU backend is the `cpu` extra (mlx-cpu), on macOS mlx itself.
MLX_REQUIREMENT = f"mlx[cpu]=={importlib.metadata.version('mlx')}" if sys.platform == "linux" else "mlx"
REQUIREMENTS = (f"vllm-mlx=={VERSION}", MLX_REQUIREMENT)
INSTALL_TIMEOUT_S = 1800.0  # the download is large
STOP_TIMEOUT_S = 15.0
START_ATTEMPTS = 3  # a start that lost its port to someone else is retried


class VllmMlxUnavailable(RuntimeError):
    """vllm-mlx cannot be used here: not installed, the install failed, or it did not start."""


def executable(venv: Path = VENV) -> Path:
    return venv / "bin" / "vllm-mlx"


def installed_versions(venv: Path = VENV) -> dict[str, str]:
    """vllm-mlx's, mlx's and mlx-lm's versions in the venv; empty when vllm-mlx is not there."""
    python = venv / "bin" / "python"
    if not executable(venv).exists() or not python.exists():
        return {}
    script = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({p: m.version(p) for p in ('vllm-mlx', 'mlx', 'mlx-lm')}))"
    )
    run = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    if run.returncode != 0:
        return {}
    versions: dict[str, str] = json.loads(run.stdout)
    return versions


def install(venv: Path = VENV) -> dict[str, str]:
    """Create the venv and pip-install REQUIREMENTS into it; the pip log is kept beside it. Raises
    VllmMlxUnavailable with pip's last lines when it fails."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    log_path = venv.parent / "vllm-mlx-install.log"
    progress(f"vllm-mlx: installing {' '.join(REQUIREMENTS)} into {venv} (large: torch comes with it)")
    with log_path.open("w") as log:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        ]
        for step in steps:
            try:
                run = subprocess.run(
                    step, stdout=log, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=False
                )
            except subprocess.TimeoutExpired:
                raise VllmMlxUnavailable(f"`{' '.join(step)}` took over {INSTALL_TIMEOUT_S:.0f} s") from None
            if run.returncode != 0:
                tail = "\n".join(log_path.read_text().splitlines()[-15:])
                raise VllmMlxUnavailable(
                    f"`{' '.join(step)}` failed with code {run.returncode} (log: {log_path}):\n{tail}"
                )
    versions = installed_versions(venv)
    if versions.get("vllm-mlx") != VERSION:
        raise VllmMlxUnavailable(f"pip finished but vllm-mlx {VERSION} is not in {venv} (log: {log_path})")
    return versions


def ensure_installed(install_if_missing: bool, venv: Path = VENV) -> dict[str, str]:
    """The venv's versions, installing it first when asked to; VllmMlxUnavailable otherwise."""
    versions = installed_versions(venv)
    if versions:
        return versions
    if not install_if_missing:
        raise VllmMlxUnavailable(
            f"vllm-mlx is not installed in {venv}; --install-vllm-mlx installs vllm-mlx {VERSION} "
            "there (about 7 GB with torch)"
        )
    return install(venv)


class VllmMlxServer(PeerProcess):
    """`vllm-mlx serve MODEL_DIR --continuous-batching` on a free port; its log is kept."""

    label = "vllm-mlx"
    failure = VllmMlxUnavailable
    poll_interval = 0.2

    def __init__(self, model_path: Path, max_batch: int, max_tokens: int, venv: Path = VENV) -> None:
        self.name = "vllm_mlx"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.served_model = str(model_path)  # the name its requests must give (its default)
        self.home = tempfile.mkdtemp(prefix="mlxhost-bench-vllm-mlx-")
        env = dict(os.environ)
        # A local directory: nothing to fetch. HOME: see the module's docstring.
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": self.home})
        self.command = [
            str(executable(venv)), "serve", str(model_path), "--continuous-batching",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-num-seqs", str(max_batch), "--completion-batch-size", str(max_batch),
            "--prefill-batch-size", str(PREFILL_BATCH), "--max-tokens", str(max_tokens),
        ]  # fmt: skip
        try:
            self.spawn(self.command, env, start_new_session=True)
        except OSError as exc:
            shutil.rmtree(self.home, ignore_errors=True)
            raise VllmMlxUnavailable(f"could not run {self.command[0]}: {exc}") from exc

    def body_extra(self) -> dict[str, Any]:
        """What every request to it adds to the common chat body: it rejects one without a model."""
        return {"model": self.served_model}

    def stop(self) -> None:
        """SIGTERM to its process group (it saves its prefix cache and exits), SIGKILL if need be;
        its temporary HOME goes."""
        try:
            if self.process.poll() is None:
                self._signal_group(signal.SIGTERM)
                try:
                    self.process.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    progress(f"vllm-mlx did not stop in {STOP_TIMEOUT_S:.0f} s; killing it")
                    self._signal_group(signal.SIGKILL)
                    self.process.wait()
            # Anything it started that outlived it, in its session.
            self._signal_group(signal.SIGKILL)
        finally:
            shutil.rmtree(self.home, ignore_errors=True)

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)  # its own session: the group's id is its pid
        except ProcessLookupError:
            pass


def start_vllm_mlx(
    model_path: Path, max_batch: int, max_tokens: int, prompt: str, install_if_missing: bool
) -> tuple[VllmMlxServer, dict[str, str]]:
    """A ready vllm-mlx and its venv's versions; VllmMlxUnavailable with the reason otherwise."""
    versions = ensure_installed(install_if_missing)
    for attempt in range(START_ATTEMPTS):
        server = VllmMlxServer(model_path, max_batch, max_tokens)
        try:
            server.wait_ready(prompt)
            return server, versions
        except BaseException as exc:
            server.stop()
            lost_port = "address already in use" in server.log_tail(50).lower()
            if not lost_port or attempt + 1 == START_ATTEMPTS or not isinstance(exc, VllmMlxUnavailable):
                raise
            progress(f"vllm-mlx: port {server.port} was taken; retrying")
    raise AssertionError("unreachable")
