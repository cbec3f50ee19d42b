"""The peer: mlx-lm's own server, `python -m mlx_lm server` from the installed mlx-lm, on a free
port. Not mlxhost, so it is started here rather than through `mlxhost.testing`.

It gets --decode-concurrency and --prompt-concurrency set to the batch sizes the others use (its
own defaults, 32 and 8, unless a concurrency above 32 is asked for) and --max-tokens to
max_tokens; HF_HUB_OFFLINE=1 (it loads the local directory and needs no network). Its listening
socket gets mlxhost's backlog, 100 (--mlx-lm-server-backlog; 0 runs it as shipped): it is started
as `python -c`, setting ThreadingHTTPServer.request_queue_size and calling mlx_lm.server's main().
As shipped the backlog is socketserver's 5, and a burst of 8 or more connections overflows it: the
extra ones wait for the kernel's SYN retransmit (1 s) or are reset (see `bench.streams`, which
tries such a stream again). It batches: requests that arrive together go into one
BatchGenerator. It reports usage in a stream when asked, so it is read exactly as mlxhost is. Its
prompt cache stays on (its default): a repeated prompt is served from cached KV, which the usage
chunk shows as prompt_tokens_details.cached_tokens (recorded in the JSON).

It is ready once it answered one short chat request: it loads the model in its generation thread
after /health is already up.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from bench.figures import progress
from bench.peer_process import PeerProcess
from bench.settings import PREFILL_BATCH

LAUNCHER = (
    "import sys, http.server; http.server.ThreadingHTTPServer.request_queue_size = {backlog}; "
    "sys.argv[0] = 'mlx_lm.server'; from mlx_lm.server import main; main()"
)
START_ATTEMPTS = 3  # a start that lost its port to someone else is retried


def free_port() -> int:
    """A TCP port free now (mlx_lm.server takes no port 0); a start that lost it is retried."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MlxLmServer(PeerProcess):
    """mlx-lm's own server, `python -m mlx_lm server`, on a free port; its log is kept."""

    label = "mlx_lm.server"

    def __init__(self, model_path: Path, max_batch: int, max_tokens: int, backlog: int) -> None:
        self.name = "mlx_lm_server"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backlog = backlog or 5  # 0: as shipped, socketserver's 5
        env = dict(os.environ)
        # The model is a local directory: nothing to fetch, and nothing should be tried.
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
        if backlog:
            # mlx_lm.server's own main(), its listening socket's backlog set first.
            launch = ["-c", LAUNCHER.format(backlog=int(backlog))]
        else:
            launch = ["-m", "mlx_lm", "server"]
        self.command = [
            sys.executable, *launch,
            "--model", str(model_path), "--host", "127.0.0.1", "--port", str(self.port),
            "--decode-concurrency", str(max_batch), "--prompt-concurrency", str(PREFILL_BATCH),
            "--max-tokens", str(max_tokens),
        ]  # fmt: skip
        self.spawn(self.command, env)

    def stop(self) -> None:
        """SIGTERM (it has no handler: the process ends), SIGKILL if need be."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_mlx_lm_server(
    model_path: Path, max_batch: int, max_tokens: int, backlog: int, prompt: str
) -> MlxLmServer:
    """A ready mlx_lm.server; a start that lost its port to someone else is retried."""
    for attempt in range(START_ATTEMPTS):
        server = MlxLmServer(model_path, max_batch, max_tokens, backlog)
        try:
            server.wait_ready(prompt)
            return server
        except BaseException as exc:
            server.stop()
            lost_port = "Address already in use" in server.log_tail(50)
            if not lost_port or attempt + 1 == START_ATTEMPTS or not isinstance(exc, RuntimeError):
                raise
            progress(f"mlx_lm.server: port {server.port} was taken; retrying")
    raise AssertionError("unreachable")
