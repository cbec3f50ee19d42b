from __future__ import annotations

from pathlib import Path

import pytest

from mlxhost.config import ConfigError, Settings
from mlxhost.config_sources import load_settings


def test_defaults_are_safe() -> None:
    settings = load_settings(env={}, config_file=None)
    assert settings.host == "127.0.0.1" and settings.port == 8080 and settings.model == ()


def test_cli_beats_env_beats_file(tmp_path: Path) -> None:
    file = tmp_path / "m.toml"
    file.write_text('port = 9000\nhost = "0.0.0.0"\nmax_batch = 4\n')
    settings = load_settings(
        cli={"port": "9002", "host": None},
        env={"MLXHOST_PORT": "9001", "MLXHOST_MAX_BATCH": "6"},
        config_file=file,
    )
    assert settings.port == 9002  # CLI
    assert settings.max_batch == 6  # environment
    assert settings.host == "0.0.0.0"  # file


def test_env_can_name_the_config_file(tmp_path: Path) -> None:
    file = tmp_path / "m.toml"
    file.write_text("keepalive_seconds = 2.5\n")
    assert load_settings(env={"MLXHOST_CONFIG": str(file)}).keepalive_seconds == 2.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port = -1\n", "invalid value for option 'port'"),
        ('port = "x"\n', "expected an integer >= 0 and <= 65535"),
        ("colour = 1\n", "unknown option 'colour'"),
        ('demo = "huge"\n', "invalid value for option 'demo'.*'huge'; expected one of tiny, agent"),
        ('model_aliases = ["gpt-[45]*"]\n', r"option 'model_aliases'.*only wildcards are \* and \?"),
        ("port = \n", "not valid TOML"),
    ],
)
def test_bad_file_values_are_named(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(env={}, config_file=file)


def test_the_shipped_config_file_matches_the_defaults() -> None:
    shipped = Path(__file__).resolve().parents[2] / "config" / "mlxhost.toml"
    assert load_settings(env={}, config_file=shipped) == Settings()
