"""`mlxhost serve` as a process: signals, sockets, the demo default, and startup errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from mlxhost.testing import RunningHost, start_host

PROMPT = [{"role": "user", "content": "Hello"}]


def stream_in_background(server: RunningHost, max_tokens: int) -> tuple[threading.Thread, list[str], threading.Event]:
    lines: list[str] = []
    started = threading.Event()

    def run() -> None:
        body = {"messages": PROMPT, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        with server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                lines.append(line)
                if '"content"' in line:
                    started.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, lines, started


def events(lines: list[str]) -> list[object]:
    return [json.loads(line[6:]) if line != "data: [DONE]" else "[DONE]" for line in lines if line.startswith("data: ")]


def test_sigterm_lets_a_running_stream_finish_then_exits_0(tiny_model: Path, tmp_path: Path) -> None:
    socket = tmp_path / "s.sock"
    server = start_host("--model", str(tiny_model), "--unix", str(socket))
    thread, lines, started = stream_in_background(server, max_tokens=300)
    assert started.wait(10)
    assert server.stop(signal.SIGTERM) == 0
    thread.join(10)
    received = events(lines)
    assert received[-1] == "[DONE]"
    assert received[-2]["choices"][0]["finish_reason"] in ("length", "stop")  # type: ignore[index]
    assert not socket.exists()


def test_sigterm_past_the_grace_ends_streams_with_a_shutdown_error(tiny_model: Path, tmp_path: Path) -> None:
    socket = tmp_path / "s.sock"
    server = start_host(
        "--model", str(tiny_model), "--unix", str(socket), "--shutdown-grace", "1"
    )
    thread, lines, started = stream_in_background(server, max_tokens=4000)
    assert started.wait(10)
    server.process.send_signal(signal.SIGTERM)
    # While it drains, new work is refused.
    with server.http() as http:
        refused = http.post("/v1/chat/completions", json={"messages": PROMPT, "max_tokens": 2})
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down"
    assert server.process.wait(30) == 0
    thread.join(10)
    received = events(lines)
    assert received[-1] == "[DONE]"
    assert received[-2]["error"]["code"] == "shutting_down"  # type: ignore[index]
    assert not socket.exists()


def test_unix_socket_only(tiny_model: Path, tmp_path: Path) -> None:
    socket = tmp_path / "only.sock"
    server = start_host("--model", str(tiny_model), "--unix", str(socket), "--no-tcp", tcp=False)
    try:
        assert server.url is None
        with server.http() as http:
            assert http.get("/v1/models").status_code == 200
        # A second host on the same path is refused, and the first one keeps its address.
        second = run_serve("--model", str(tiny_model), "--unix", str(socket), "--no-tcp")
        assert second.returncode != 0
        assert f"cannot listen on unix:{socket}: another process is listening there" in second.stderr
        with server.http() as http:
            assert http.get("/v1/models").status_code == 200
    finally:
        assert server.stop() == 0
    assert not socket.exists()


def test_a_host_removes_only_its_own_socket_file(tiny_model: Path, tmp_path: Path) -> None:
    import socket as sockets

    path = tmp_path / "shared.sock"
    server = start_host("--model", str(tiny_model), "--unix", str(path), "--no-tcp", tcp=False)
    successor = sockets.socket(sockets.AF_UNIX)
    try:
        # Someone else's socket now lives at the path (the host's was removed under it).
        path.unlink()
        successor.bind(str(path))
        successor.listen()
    finally:
        assert server.stop() == 0
    try:
        assert path.exists(), "the host removed a socket file that was not its own"
    finally:
        successor.close()


def test_a_unix_path_too_long_for_a_socket_is_refused_naming_the_option(tiny_model: Path, tmp_path: Path) -> None:
    path = tmp_path / ("s" * 150 + ".sock")
    result = run_serve("--model", str(tiny_model), "--unix", str(path), "--no-tcp")
    assert result.returncode != 0
    assert "a Unix socket's may be at most 107" in result.stderr and "--unix" in result.stderr
    assert "None" not in result.stderr


def test_serve_without_a_model_serves_the_demo(tmp_path: Path) -> None:
    server = start_host(env={"XDG_CACHE_HOME": str(tmp_path)})
    try:
        with server.client() as client:
            served = [m.id for m in client.models.list().data]
            assert served == ["mlxhost-demo", "mlxhost-demo-embed", "mlxhost-demo-rerank"]
            reply = client.chat.completions.create(model="anything", messages=PROMPT, max_tokens=4)  # type: ignore[arg-type]
            assert reply.model == "mlxhost-demo"
            # Embeddings and rerank answer on a fresh machine too, each from its own demo model.
            vectors = client.embeddings.create(model="mlxhost-demo-embed", input=["a", "b"])
            assert len(vectors.data) == 2 and vectors.model == "mlxhost-demo-embed"
        with server.http() as http:
            ranked = http.post("/v1/rerank", json={"query": "cats", "documents": ["dogs", "a cat"]})
            assert ranked.status_code == 200 and ranked.json()["model"] == "mlxhost-demo-rerank"
    finally:
        server.stop()
    log = "".join(server.log)
    assert "demo model" in log and "random weights" in log and "--model" in log
    assert (tmp_path / "mlxhost").is_dir()


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "mlxhost", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("offline", [["--offline"], []], ids=["flag", "HF_HUB_OFFLINE"])
def test_offline_a_hub_id_not_in_the_cache_is_refused_without_downloading(tmp_path: Path, offline: list[str]) -> None:
    env = {"HF_HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}
    result = run_serve("--model", "someone/some-model", *offline, env=env | ({} if offline else {"HF_HUB_OFFLINE": "1"}))
    assert result.returncode != 0
    assert "not in the local Hugging Face cache" in result.stderr
    assert "mlxhost pull someone/some-model" in result.stderr


def test_a_missing_model_directory_is_refused(tmp_path: Path) -> None:
    result = run_serve("--model", str(tmp_path / "nope"))
    assert result.returncode != 0 and "no model directory" in result.stderr


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--port", "eighty"], {}, "'port' (from --port): 'eighty'"),
        (["--port", "70000"], {}, "<= 65535"),
        ([], {"MLXHOST_MAX_BATCH": "0"}, "'max_batch' (from MLXHOST_MAX_BATCH)"),
        (["--log-level", "loud"], {}, "one of debug, info, warning, error"),
        (["--no-tcp"], {}, "'no_tcp' needs option 'unix'"),
    ],
)
def test_bad_settings_stop_startup_with_a_clear_message(
    args: list[str], env: dict[str, str], named: str
) -> None:
    result = run_serve(*args, env=env)
    assert result.returncode != 0
    assert named in result.stderr


def test_a_port_in_use_is_reported(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model))
    try:
        assert server.url is not None
        port = server.url.rsplit(":", 1)[1]
        result = run_serve("--model", str(tiny_model), "--port", port)
        assert result.returncode != 0 and "cannot listen" in result.stderr
        assert httpx.get(f"{server.url}/health").status_code == 200
    finally:
        server.stop()


def test_streams_send_keepalive_comments_while_waiting(tiny_model: Path) -> None:
    server = start_host("--model", str(tiny_model), "--keepalive-seconds", "0.001")
    try:
        body = {"prompt": [100] * 3500, "max_tokens": 5, "temperature": 0, "stream": True}
        with server.http() as http, http.stream("POST", "/v1/completions", json=body) as response:
            lines = list(response.iter_lines())
    finally:
        server.stop()
    assert ": keep-alive" in lines
    assert lines[-2:] == ["data: [DONE]", ""] or lines[-1] == "data: [DONE]"


def test_a_model_that_cannot_be_split_that_way_is_refused_before_anything_starts(
    tiny_model: Path, tmp_path: Path
) -> None:
    # The tiny model is llama, which mlx-lm splits by tensor but does not pipeline.
    config = tmp_path / "group.toml"
    config.write_text(
        f'[[model]]\nid = "tiny"\npath = "{tiny_model}"\nranks = 2\nbackend = "ring"\nsharding = "pipeline"\n'
    )
    result = run_serve("--config", str(config))
    assert result.returncode != 0
    assert "model 'tiny': 'sharding' = \"pipeline\": mlx-lm cannot pipeline the 'llama' architecture" in result.stderr
