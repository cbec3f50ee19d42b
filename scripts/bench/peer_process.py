"""A peer server's process (`bench.mlx_lm_server`, `bench.vllm_mlx`): started with its output
kept, and waited for until it answers a chat request, as each peer is."""

from __future__ import annotations

import collections
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

from bench.settings import SERVER_START_TIMEOUT_S
from bench.streams import CHAT_PATH, chat_body

ANSWER_TIMEOUT_S = 60.0  # the first request, which waits for the model to load


class PeerProcess:
    """The process of a peer server at `url`: its log kept, and `wait_ready` for its first answer."""

    label = "the peer"  # as messages name it
    failure: type[Exception] = RuntimeError  # what `wait_ready` raises when it never answers
    poll_interval = 0.1  # seconds between two asks of /health
    name: str
    url: str

    def spawn(self, command: Sequence[str], env: dict[str, str], **popen: Any) -> None:
        """Start `command`; its output goes into `log`, read by a thread of its own."""
        self.log: collections.deque[str] = collections.deque(maxlen=5000)
        self.started = time.perf_counter()
        self.ready_s: float | None = None  # start to the first answer (the model loaded)
        self.process = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, env=env, **popen,
        )  # fmt: skip
        self.pid = self.process.pid
        threading.Thread(target=self._read_log, name=f"{self.name}-log", daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.log.append(line.rstrip("\n"))

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(list(self.log)[-lines:])

    def body_extra(self) -> dict[str, Any]:
        """What every request to it adds to the common chat body."""
        return {}

    def wait_ready(self, prompt: str, timeout: float = SERVER_START_TIMEOUT_S) -> str:
        """Poll /health until it answers 200, then send one short chat request: a server may load
        its model after /health is already up."""
        deadline = time.perf_counter() + timeout
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            while True:
                if self.process.poll() is not None:
                    raise self.failure(
                        f"{self.label} exited with code {self.process.returncode}:\n{self.log_tail()}"
                    )
                if time.perf_counter() > deadline:
                    raise self.failure(f"{self.label} did not answer in {timeout:.0f} s:\n{self.log_tail()}")
                try:
                    if client.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(self.poll_interval)
            body = {**chat_body(prompt, 1, stream=False), **self.body_extra()}
            response = client.post(CHAT_PATH, json=body, timeout=ANSWER_TIMEOUT_S)
            if response.status_code != 200:
                raise self.failure(
                    f"{self.label} answered {response.status_code}: {response.text}\n{self.log_tail()}"
                )
        self.ready_s = time.perf_counter() - self.started
        return self.url
