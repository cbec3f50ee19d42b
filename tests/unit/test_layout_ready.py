"""The host's ready record: what `mlxhost serve` writes for `mlxhost.testing`, read back the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlxhost.errors import StartupError
from mlxhost.runtime.ready import report_ready, write_ready
from mlxhost.wire.layout import READY_FILE_ENV, HostReady


@pytest.mark.parametrize(
    "record",
    [
        HostReady(123, "http://127.0.0.1:8000", "/run/mlxhost.sock", ("tiny", "other")),
        HostReady(1, None, "/tmp/s", ("tiny",)),
        HostReady(1, "http://[::1]:9", None, ()),
        HostReady(1, "http://127.0.0.1:9", None, ("tiny",), load_s=0.25),
    ],
)
def test_a_ready_record_round_trips_through_json(record: HostReady) -> None:
    assert HostReady.from_json(record.to_json()) == record


def test_the_record_takes_the_first_address_of_each_kind() -> None:
    addresses = ["unix:/tmp/a.sock", "http://127.0.0.1:8000", "http://[::1]:8000", "unix:/tmp/b.sock"]
    record = HostReady.from_addresses(7, ["tiny"], addresses)
    assert record == HostReady(7, "http://127.0.0.1:8000", "/tmp/a.sock", ("tiny",))
    assert HostReady.from_addresses(7, ["tiny"], ["http://127.0.0.1:1"]).unix is None
    assert HostReady.from_addresses(7, ["tiny"], ["http://127.0.0.1:1"], load_s=1.5).load_s == 1.5


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"pid": 1, "url": null, "unix": null}',
        '{"pid": 1, "url": null, "unix": null, "models": [], "extra": 1, "load_s": null}',
        '{"pid": "1", "url": null, "unix": null, "models": [], "load_s": null}',
        '{"pid": true, "url": null, "unix": null, "models": [], "load_s": null}',
        '{"pid": 1, "url": 5, "unix": null, "models": [], "load_s": null}',
        '{"pid": 1, "url": null, "unix": null, "models": "tiny", "load_s": null}',
        '{"pid": 1, "url": null, "unix": null, "models": [1], "load_s": null}',
        '{"pid": 1, "url": null, "unix": null, "models": []}',
        '{"pid": 1, "url": null, "unix": null, "models": [], "load_s": "0.5"}',
        '{"pid": 1, "url": null, "unix": null, "models": [], "load_s": true}',
        '{"pid": 1, "url": null',
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        HostReady.from_json(text)


def test_the_record_is_written_whole_and_replaces_an_old_one(tmp_path: Path) -> None:
    path = tmp_path / "ready.json"
    path.write_text("stale")
    record = HostReady(9, "http://127.0.0.1:1", None, ("tiny",))
    write_ready(path, record)
    assert HostReady.from_json(path.read_text()) == record
    assert [p.name for p in tmp_path.iterdir()] == ["ready.json"]  # no temporary file left


def test_report_ready_writes_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(READY_FILE_ENV, raising=False)
    report_ready(["tiny"], ["http://127.0.0.1:1"])
    assert list(tmp_path.iterdir()) == []
    path = tmp_path / "ready.json"
    monkeypatch.setenv(READY_FILE_ENV, str(path))
    report_ready(["tiny"], ["http://127.0.0.1:1"])
    assert json.loads(path.read_text())["models"] == ["tiny"]


def test_a_record_that_cannot_be_written_stops_the_host(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="ready record"):
        write_ready(tmp_path / "missing" / "ready.json", HostReady(1, None, None, ()))
