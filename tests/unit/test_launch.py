"""The launch protocol on its own: the record the parent writes and the worker reads, the lines the
worker writes and the parent reads, and what the parent builds and refuses."""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mlxhost.config import Settings
from mlxhost.config_sources import settings_from_options
from mlxhost.host.workers.launch import MAX_LINE, launch_record, lines, refusal, worker_command
from mlxhost.catalog.spec import ModelSpec
from mlxhost.wire.launch import (
    PROTOCOL_VERSION,
    WORKER_EVENT,
    WORKER_OPTIONS,
    WORKER_READY,
    BadLaunchRecord,
    LaunchRecord,
    MemoryReading,
    ReadyLine,
    SessionProgress,
    SpeculationReading,
    WorkerOptions,
    parse_line,
)

RECORD = LaunchRecord(
    worker_id="chat",
    socket="/run/mlxhost/w-1.sock",
    model_path="/models/café 日本",
    model_id="chat",
    options=WorkerOptions(max_batch=4, stream_interval=0.02, log_level="info"),
)


# -- the launch record ---------------------------------------------------------------------


def test_a_launch_record_is_one_line_and_reads_back_equal() -> None:
    line = RECORD.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["version"] == PROTOCOL_VERSION
    assert LaunchRecord.decode(line) == RECORD
    assert LaunchRecord.decode(line.decode()) == RECORD  # str, as read from a text stream


def fields(**changes: object) -> bytes:
    """RECORD's JSON with `changes`; a field changed to `...` is left out."""
    data = {**dataclasses.asdict(RECORD), **changes}
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"", "not JSON"),
        (b"{truncated", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'"chat"', "not a JSON object"),
        (fields(version=...), "protocol version None"),
        (fields(version=PROTOCOL_VERSION + 1), f"protocol version {PROTOCOL_VERSION + 1}"),
        (fields(version=str(PROTOCOL_VERSION)), "protocol version '1'"),
        (fields(socket=...), "malformed launch record"),
        (fields(extra=1), "malformed launch record"),
        (fields(socket=""), "'socket' must be a non-empty string"),
        (fields(model_path=7), "'model_path' must be a non-empty string"),
        (fields(worker_id=None), "'worker_id' must be a non-empty string"),
        (fields(options=[]), "'options' must be an object"),
    ],
)
def test_a_bad_launch_record_is_refused_with_the_reason(line: bytes, why: str) -> None:
    with pytest.raises(BadLaunchRecord, match=f"^.*{why}"):
        LaunchRecord.decode(line)


def test_another_version_says_parent_and_worker_differ() -> None:
    with pytest.raises(BadLaunchRecord, match="different mlxhost versions"):
        LaunchRecord.decode(fields(version=PROTOCOL_VERSION + 1))


# -- what the worker says --------------------------------------------------------------------


def test_the_ready_line_and_events_read_back_equal() -> None:
    said: list[ReadyLine | MemoryReading | SessionProgress | SpeculationReading] = [
        ReadyLine(pid=42, socket=RECORD.socket, model_id="chat", version=PROTOCOL_VERSION, load_seconds=1.25),
        MemoryReading(active_bytes=1, cache_bytes=2, peak_bytes=3, rss_bytes=4),
        SessionProgress(session="s-1", tokens=10, tokens_per_s=2.5, prompt_tokens=7),
        SessionProgress(session="s-1", tokens=12, tokens_per_s=2.0, done=True),
        SessionProgress("s-2", tokens=9, tokens_per_s=3.0, done=True, drafted_tokens=8, accepted_tokens=5),
        SpeculationReading(drafted_tokens=8, accepted_tokens=5, verifications=3, verified_tokens=8),
    ]
    for message in said:
        line = message.encode()
        assert "\n" not in line
        assert parse_line(line) == message
    assert said[0].encode().startswith(WORKER_READY)
    assert all(m.encode().startswith(WORKER_EVENT) for m in said[1:])
    assert parse_line(said[2].encode()) != said[3]  # done is read, not defaulted


@pytest.mark.parametrize(
    "line",
    [
        "",
        "INFO: loading the model",
        "Traceback (most recent call last):",
        "MLXHOST-READY",  # no space, no JSON
        WORKER_READY + "not json",
        WORKER_READY + "[1]",
        WORKER_READY + json.dumps({"pid": 1}),  # fields missing
        WORKER_EVENT + json.dumps({"type": "worker.gpu", "bytes": 1}),  # a kind this host does not know
        WORKER_EVENT + json.dumps({"active_bytes": 1, "cache_bytes": 2, "peak_bytes": 3, "rss_bytes": 4}),
        WORKER_EVENT
        + json.dumps(
            {"type": "session.progress", "session": "s", "tokens": 1, "tokens_per_s": 1, "colour": "red"}
        ),  # a field this host does not know
        " " + WORKER_READY + json.dumps({"pid": 1}),
    ],
)
def test_lines_that_are_not_protocol_are_log_lines(line: str) -> None:
    assert parse_line(line) is None


# -- what the parent builds and refuses ------------------------------------------------------


def test_the_worker_command_is_this_python_unless_configured() -> None:
    assert worker_command(Settings()) == [sys.executable, "-P", "-m", "mlxhost.worker"]
    configured = Settings(worker_command="/opt/py -X dev 'my worker.py' --flag")
    assert worker_command(configured) == ["/opt/py", "-X", "dev", "my worker.py", "--flag"]
    with pytest.raises(ValueError, match="empty"):
        worker_command(Settings(worker_command="   "))


def test_the_launch_record_carries_the_serving_options_with_the_model_s_own_limits() -> None:
    settings = Settings(
        max_batch=16,
        max_tokens_limit=4096,
        stream_interval=0.05,
        keepalive_seconds=3.0,
        state_dir="/var/mh",
        kv_layout="padded",
        kv_bits=8,
        kv_group_size=32,
        prefill_chunk_ms=20.0,
    )
    plain = launch_record(ModelSpec("chat", "/models/a"), Path("/models/a"), settings, Path("/run/w.sock"))
    assert plain == LaunchRecord(
        worker_id="chat",
        socket="/run/w.sock",
        model_path="/models/a",
        model_id="chat",
        # The state directory goes resolved: every worker files its prompt caches in one place.
        options=WorkerOptions(
            **{name: getattr(settings, name) for name in WORKER_OPTIONS if name != "state_dir"},
            state_dir="/var/mh",
        ),
    )
    assert plain.options.max_batch == 16 and plain.options.stream_interval == 0.05
    assert (plain.options.kv_layout, plain.options.kv_bits, plain.options.kv_group_size) == ("padded", 8, 32)
    assert plain.options.prefill_chunk_ms == 20.0
    # Every option the worker reads comes from the operator's settings (body_timeout was left out).
    assert plain.options.body_timeout == settings.body_timeout
    own = ModelSpec("big", "org/big", max_batch=2, max_tokens_limit=128, kv_bits=4, kv_group_size=128)
    record = launch_record(own, Path("/cache/big"), settings, Path("/run/b.sock"))
    assert record.model_path == "/cache/big" and record.model_id == "big"
    assert record.options.max_batch == 2 and record.options.max_tokens_limit == 128
    assert record.options.kv_bits == 4 and record.options.kv_group_size == 128
    assert record.options.kv_layout == "padded"  # the host's: a model has no kv_layout of its own
    # A model's 0 is its own value too: its KV is not quantized, whatever the host's kv_bits.
    off = launch_record(ModelSpec("small", "/s", kv_bits=0), Path("/s"), settings, Path("/run/s.sock"))
    assert off.options.kv_bits == 0 and off.options.kv_group_size == 32
    assert record.options.keepalive_seconds == 3.0
    # What the parent writes, the worker reads back whole, and every option names a setting.
    assert LaunchRecord.decode(record.encode()) == record
    assert set(WORKER_OPTIONS) <= {f.name for f in dataclasses.fields(Settings)}
    assert settings_from_options(record.options.given()).body_timeout == settings.body_timeout


@pytest.mark.parametrize(("bits", "engine_bits"), [(0, None), (4, 4), (8, 8)])
def test_the_worker_s_engine_takes_the_kv_options_its_launch_record_carries(
    bits: int, engine_bits: int | None
) -> None:
    from mlxhost.worker.serve import engine_options  # the worker's side: it imports MLX

    settings = Settings(kv_layout="per_row", kv_bits=8, kv_group_size=64, prefill_chunk_ms=50.0)
    spec = ModelSpec("m", "/m", kv_bits=bits, kv_group_size=32)
    record = LaunchRecord.decode(launch_record(spec, Path("/m"), settings, Path("/run/m.sock")).encode())
    options = engine_options(settings_from_options(record.options.given()), sharding=record.sharding)
    assert options.kv_layout == "per_row" and options.kv_bits == engine_bits  # 0: not quantized
    assert options.kv_group_size == 32 and options.prefill_chunk_seconds == pytest.approx(0.05)
    padded = engine_options(Settings(kv_layout="padded", prefill_chunk_ms=200.0))
    assert padded.kv_layout == "padded" and padded.kv_bits is None and padded.prefill_chunk_seconds == 0.2


def test_the_worker_s_engine_speculates_as_its_model_or_the_host_says() -> None:
    from mlxhost.worker.serve import engine_options  # the worker's side: it imports MLX

    settings = Settings(speculate="lookup", draft_tokens=8)

    def engine_of(spec: ModelSpec) -> tuple[str, int]:
        record = LaunchRecord.decode(launch_record(spec, Path("/m"), settings, Path("/run/m.sock")).encode())
        options = engine_options(settings_from_options(record.options.given()))
        return options.speculate, options.draft_tokens

    assert engine_of(ModelSpec("m", "/m")) == ("lookup", 8)  # the host's
    assert engine_of(ModelSpec("m", "/m", speculate="off")) == ("off", 8)
    assert engine_of(ModelSpec("m", "/m", draft_tokens=2)) == ("lookup", 2)
    assert (engine_options(Settings()).speculate, engine_options(Settings()).draft_tokens) == ("lookup", 6)


def test_a_launch_record_with_an_option_the_worker_does_not_take_is_refused() -> None:
    line = RECORD.encode().replace(b'"options": {', b'"options": {"api_key": "s3cret", ', 1)
    with pytest.raises(BadLaunchRecord, match="unknown options 'api_key'"):
        LaunchRecord.decode(line)


def _settings_read_in(folder: Path) -> set[str]:
    """Every `settings.NAME` (and `x.settings.NAME`) the code under `folder` reads."""
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Attribute):
                continue
            holder = node.value
            if (isinstance(holder, ast.Name) and holder.id == "settings") or (
                isinstance(holder, ast.Attribute) and holder.attr == "settings"
            ):
                names.add(node.attr)
    return names


def test_the_launch_record_carries_every_setting_the_worker_reads() -> None:
    read = _settings_read_in(Path(__file__).resolve().parents[2] / "mlxhost" / "worker")
    assert {"max_batch", "stall_timeout", "max_connections", "body_timeout"} <= read  # the scan sees them
    # What only a worker that is its own host reads (`--in-process`): a launched one's one client is
    # its parent, whose admission bounds its connections (worker/serve.py).
    own_host = {"in_process", "max_connections"}
    assert read - own_host <= set(WORKER_OPTIONS), "settings the worker reads but is not sent"


def ready(**changes: Any) -> ReadyLine:
    line = ReadyLine(pid=9, socket="/run/w.sock", model_id="chat", version=PROTOCOL_VERSION, load_seconds=0.5)
    return dataclasses.replace(line, **changes)


def test_a_ready_line_that_answers_the_launch_record_is_accepted() -> None:
    assert refusal(ready(), Path("/run/w.sock")) is None


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (
            ready(version=PROTOCOL_VERSION + 1),
            f"protocol version {PROTOCOL_VERSION + 1}, this host {PROTOCOL_VERSION}",
        ),
        (ready(version=str(PROTOCOL_VERSION)), "protocol version '1', this host 1"),  # the string "1", quoted
        (ready(version=True), "protocol version True"),  # a bool is not the int 1
        (ready(socket="/run/other.sock"), "names the socket '/run/other.sock', not its own '/run/w.sock'"),
        (ready(socket="\x1b[2J" + "x" * 1000), "names the socket '\\x1b[2Jxxx"),  # inert, and cut short
    ],
)
def test_a_ready_line_that_does_not_answer_is_refused(line: ReadyLine, why: str) -> None:
    reason = refusal(line, Path("/run/w.sock"))
    assert reason is not None and why in reason
    assert len(reason) < 400 and "\x1b" not in reason


class Chunks(anyio.abc.ByteReceiveStream):
    """A worker's stdout, arriving in the chunks given."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            raise anyio.EndOfStream
        return self._chunks.pop(0)

    async def aclose(self) -> None:
        pass


async def read_lines(*chunks: bytes) -> list[str]:
    return [line async for line in lines(Chunks(*chunks))]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_output_is_read_line_by_line_however_it_arrives() -> None:
    ready_line = ready().encode().encode()
    assert await read_lines(
        b"log one\r\nlog ", b"two\n" + ready_line[:10], ready_line[10:] + b"\n", b"tail"
    ) == [
        "log one",
        "log two",
        ready().encode(),
        "tail",  # the last line, unterminated, at the end of the output
    ]
    assert await read_lines(b"caf\xc3", b"\xa9 \xff\n") == ["café \ufffd"]
    assert await read_lines() == []


@pytest.mark.anyio
async def test_a_runaway_line_is_cut_not_held() -> None:
    chunk = b"x" * 65536
    count = MAX_LINE // len(chunk) + 2
    got = await read_lines(*[chunk] * count, b"\nnext\n")
    assert len(got[0]) > MAX_LINE and len(got[0]) <= MAX_LINE + len(chunk)
    assert "".join(got[:-1]) == "x" * (len(chunk) * count) and got[-1] == "next"
