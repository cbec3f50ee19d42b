"""A model's group options: each bad one is refused before anything starts, by its name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mlxhost.config import ConfigError
from mlxhost.config_sources import load_settings
from mlxhost.catalog.ranks import GroupSpec, InvalidGroup, group_spec, launch_command


def _settings(tmp_path: Path, table: str) -> object:
    config = tmp_path / "mlxhost.toml"
    config.write_text(f'[[model]]\nid = "big"\npath = "/models/big"\n{table}\n')
    return load_settings(config_file=config, env={})


def test_a_model_without_ranks_is_one_worker() -> None:
    assert group_spec({"path": "/m"}) is None


def test_two_ranks_on_this_machine() -> None:
    group = group_spec({"ranks": 2, "backend": "ring"})
    assert group == GroupSpec(2, "ring", "tensor", ("127.0.0.1",), None)
    assert group is not None and group.local


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"ranks": 2}, "needs a 'backend'"),
        ({"ranks": 0}, "'ranks' must be"),
        ({"ranks": 2, "backend": "carrier-pigeon"}, "'backend' must be one of"),
        ({"backend": "ring"}, "'backend' is for a model served by several ranks"),
        ({"ranks": 2, "backend": "ring", "sharding": "rows"}, "'sharding' must be one of"),
        ({"ranks": 3, "backend": "ring", "hosts": ["10.0.0.1", "10.0.0.2"]}, "does not spread evenly"),
        ({"ranks": 2, "backend": "ring", "hosts": ["mac-1"]}, "'hosts' must be IP addresses"),
        ({"ranks": 2, "backend": "jaccl"}, "'backend' jaccl needs a 'hostfile'"),
        (
            {"ranks": 2, "backend": "ring", "hostfile": "/nowhere.json"},
            "'hostfile' /nowhere.json cannot be read",
        ),
    ],
)
def test_bad_group_options_name_the_option(options: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidGroup, match=named):
        group_spec(options)


def test_a_hostfile_in_mlx_launchs_format(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts.json"
    hosts = [{"ssh": "mac-1", "ips": ["10.0.0.1"]}, {"ssh": "mac-2", "ips": ["10.0.0.2"]}]
    hostfile.write_text(json.dumps({"backend": "ring", "hosts": hosts}))
    group = group_spec({"ranks": 2, "hostfile": str(hostfile)})
    assert group is not None and group.backend == "ring" and not group.local  # the file's backend
    command = launch_command(group, 5000)
    assert command[command.index("--hostfile") + 1] == str(hostfile)
    assert command[-4:] == ["--", "-P", "-m", "mlxhost.worker"] and sys.executable in command
    with pytest.raises(InvalidGroup, match="lists 2 hosts, one per rank, but 'ranks' is 3"):
        group_spec({"ranks": 3, "hostfile": str(hostfile)})


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("{not json", "is not JSON"),
        ('{"hosts": []}', "must list hosts"),
        ('[{"ips": ["10.0.0.1"]}, {"ssh": "b"}]', 'host 0 needs an "ssh" name'),
    ],
)
def test_a_hostfile_that_does_not_parse_is_refused(tmp_path: Path, content: str, named: str) -> None:
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(content)
    with pytest.raises(InvalidGroup, match=named):
        group_spec({"ranks": 2, "backend": "ring", "hostfile": str(hostfile)})


def test_the_config_file_names_the_model_and_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="option 'model'.*model 'big': 'ranks' = 2 needs a 'backend'"):
        _settings(tmp_path, "ranks = 2")
    settings = _settings(tmp_path, 'ranks = 2\nbackend = "ring"')
    assert settings.model[0].group == GroupSpec(2, "ring", "tensor", ("127.0.0.1",), None)  # type: ignore[attr-defined]
