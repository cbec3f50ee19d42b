"""The discovery file: only a private file of ours is believed, and a host withdraws only its own."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlxhost.client import discovery
from mlxhost.client.discovery import announce, discovery_file, find_host, withdraw

TOKEN = "0123abcd"


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(discovery, "_announced", None, raising=False)
    yield tmp_path


def token_file(directory: Path, mode: int = 0o600) -> Path:
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / "admin-token"
    path.write_text(TOKEN)
    path.chmod(mode)
    return path


def write_record(path: Path, token: Path, mode: int = 0o600, **fields: object) -> None:
    record = {"pid": os.getpid(), "url": "http://127.0.0.1:1", "unix": None, "token_file": str(token), **fields}
    path.write_text(json.dumps(record))
    path.chmod(mode)


def test_an_announced_host_is_found_with_its_token(runtime: Path) -> None:
    announce("http://127.0.0.1:8080", None, token_file(runtime / "run"))
    found = find_host()
    assert found is not None and found["url"] == "http://127.0.0.1:8080" and found["token"] == TOKEN
    assert discovery_file().stat().st_mode & 0o777 == 0o600
    assert [p.name for p in runtime.iterdir() if p.name.startswith(".")] == []  # no temp file left
    withdraw()
    assert not discovery_file().exists() and find_host() is None


def test_a_record_reached_through_a_symlink_is_ignored(runtime: Path) -> None:
    elsewhere = runtime / "elsewhere.json"
    write_record(elsewhere, token_file(runtime / "run"))
    discovery_file().symlink_to(elsewhere)
    assert find_host() is None


def test_a_record_others_may_read_or_write_is_ignored(runtime: Path) -> None:
    token = token_file(runtime / "run")
    for mode in (0o644, 0o620, 0o604):
        write_record(discovery_file(), token, mode=mode)
        assert find_host() is None, oct(mode)
    write_record(discovery_file(), token, mode=0o600)
    assert find_host() is not None


def test_a_token_file_others_may_read_or_reached_through_a_symlink_is_ignored(runtime: Path) -> None:
    token = token_file(runtime / "run", mode=0o644)
    write_record(discovery_file(), token)
    assert find_host() is None
    token.chmod(0o600)
    link = runtime / "token-link"
    link.symlink_to(token)
    write_record(discovery_file(), link)
    assert find_host() is None


def test_announce_never_writes_through_a_planted_link(runtime: Path) -> None:
    victim = runtime / "victim"
    victim.write_text("precious")
    # Where the temporary record used to be written, named by the pid alone.
    (runtime / f".{discovery_file().name}.{os.getpid()}").symlink_to(victim)
    announce("http://127.0.0.1:8080", None, token_file(runtime / "run"))
    assert victim.read_text() == "precious"
    assert find_host() is not None


def test_withdraw_leaves_another_hosts_record(runtime: Path) -> None:
    token = token_file(runtime / "run")
    announce("http://127.0.0.1:8080", None, token)
    # Another host took the file over since; it happens to have our pid (a reused one, or one
    # in another pid namespace sharing this runtime directory).
    replacement = runtime / "replacement.json"
    write_record(replacement, token, url="http://127.0.0.1:9090", instance="another-host")
    os.replace(replacement, discovery_file())
    withdraw()
    found = find_host()
    assert found is not None and found["url"] == "http://127.0.0.1:9090"


def test_withdraw_without_announcing_leaves_the_record(runtime: Path) -> None:
    write_record(discovery_file(), token_file(runtime / "run"))
    withdraw()  # this process announced nothing: the record (with our pid) is not ours
    assert find_host() is not None
