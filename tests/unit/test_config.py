from __future__ import annotations

from pathlib import Path

import pytest

from mlxhost.config import ConfigError, Settings
from mlxhost.config_sources import load_settings
from mlxhost.catalog.spec import ModelSpec


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
        ('kv_layout = "paged"\n', "option 'kv_layout'.*'paged'; expected one of per_row, padded"),
        ("kv_bits = 6\n", r"option 'kv_bits'.*6; expected 0 \(off\), 4 or 8"),
        ("kv_group_size = 48\n", "option 'kv_group_size'.*48; expected 32, 64 or 128"),
        ("prefill_chunk_ms = 0\n", "option 'prefill_chunk_ms'.*0; expected a number > 0"),
        ('speculate = "ngram"\n', "option 'speculate'.*'ngram'; expected one of lookup, always, off"),
        ("speculate = false\n", "option 'speculate'.*False; expected one of lookup, always, off"),
        ("draft_tokens = 0\n", "option 'draft_tokens'.*0; expected an integer >= 1 and <= 16"),
        ("draft_tokens = 17\n", "option 'draft_tokens'.*17; expected an integer >= 1 and <= 16"),
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


def test_the_kv_settings_come_from_file_and_environment(tmp_path: Path) -> None:
    file = tmp_path / "kv.toml"
    file.write_text('kv_layout = "padded"\nkv_group_size = 32\nprefill_chunk_ms = 20\n')
    settings = load_settings(env={"MLXHOST_KV_BITS": "8"}, config_file=file)
    assert (settings.kv_layout, settings.kv_bits, settings.kv_group_size) == ("padded", 8, 32)
    assert settings.prefill_chunk_ms == 20.0
    assert (Settings().kv_layout, Settings().kv_bits, Settings().prefill_chunk_ms) == ("per_row", 0, 50.0)


def test_speculation_is_on_by_default_and_set_from_file_environment_or_flag(tmp_path: Path) -> None:
    assert (Settings().speculate, Settings().draft_tokens) == ("lookup", 6)
    file = tmp_path / "spec.toml"
    file.write_text('speculate = "OFF"\ndraft_tokens = 3\n')
    settings = load_settings(env={"MLXHOST_DRAFT_TOKENS": "16"}, config_file=file)
    assert (settings.speculate, settings.draft_tokens) == ("off", 16)  # the environment beats the file
    flagged = load_settings(cli={"speculate": "lookup", "draft_tokens": "1"}, env={}, config_file=file)
    assert (flagged.speculate, flagged.draft_tokens) == ("lookup", 1)


def test_a_bad_speculation_value_from_the_environment_is_named() -> None:
    with pytest.raises(ConfigError, match="option 'draft_tokens'.*'six'; expected an integer >= 1 and <= 16"):
        load_settings(env={"MLXHOST_DRAFT_TOKENS": "six"}, config_file=None)


def models(text: str, tmp_path: Path) -> tuple[ModelSpec, ...]:
    file = tmp_path / "models.toml"
    file.write_text(text)
    return load_settings(env={}, config_file=file).model


def test_a_model_table_has_its_own_kv_quantization_or_the_host_s(tmp_path: Path) -> None:
    own, plain, off = models(
        '[[model]]\nid = "a"\npath = "/a"\nkv_bits = 4\nkv_group_size = 128\n\n'
        '[[model]]\nid = "b"\npath = "/b"\n\n'
        '[[model]]\nid = "c"\npath = "/c"\nkv_bits = 0\nmax_batch = 8\n',
        tmp_path,
    )
    assert (own.kv_bits, own.kv_group_size) == (4, 128)
    assert (plain.kv_bits, plain.kv_group_size, plain.max_batch) == (None, None, None)  # the host's
    assert (off.kv_bits, off.max_batch) == (0, 8)  # 0: off for this model, whatever the host's


def test_a_model_table_has_its_own_speculation_or_the_host_s(tmp_path: Path) -> None:
    off, plain = models(
        '[[model]]\nid = "a"\npath = "/a"\nspeculate = "off"\ndraft_tokens = 2\n\n'
        '[[model]]\nid = "b"\npath = "/b"\n',
        tmp_path,
    )
    assert (off.speculate, off.draft_tokens) == ("off", 2)
    assert (plain.speculate, plain.draft_tokens) == (None, None)  # the host's
    (drafted,) = models('[[model]]\nid = "a"\npath = "/a"\ndraft = "org/small"\n', tmp_path)
    assert drafted.draft == "org/small" and plain.draft is None


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ('speculate = "eagle"', "model 'big': 'speculate' must be one of lookup, always, off, not 'eagle'"),
        ("speculate = 1", "model 'big': 'speculate' must be one of lookup, always, off, not 1"),
        ("draft_tokens = 0", "model 'big': 'draft_tokens' must be an integer >= 1 and <= 16, not 0"),
        ("draft_tokens = 6.5", "model 'big': 'draft_tokens' must be an integer >= 1 and <= 16, not 6.5"),
        ('draft = ""', "model 'big': 'draft' must be a model directory or repo id"),
        ("draft = 7", "model 'big': 'draft' must be a model directory or repo id"),
        (
            'draft = "/d"\nranks = 2\nbackend = "ring"',
            "model 'big': 'draft' is not served by a group of ranks yet",
        ),
        ("kv_bits = 3", r"model 'big': 'kv_bits' must be 0 \(off\), 4 or 8, not 3"),
        ('kv_bits = "8bit"', r"model 'big': 'kv_bits' must be 0 \(off\), 4 or 8, not '8bit'"),
        ("kv_group_size = 16", "model 'big': 'kv_group_size' must be 32, 64 or 128, not 16"),
        ("kv_group_size = true", "model 'big': 'kv_group_size' must be 32, 64 or 128, not True"),
        ("max_batch = 0", "model 'big': 'max_batch' must be an integer >= 1 and <= 1024, not 0"),
        ("idle_ttl = -1", "model 'big': 'idle_ttl' must be a number >= 0, not -1"),
    ],
)
def test_a_model_s_bad_value_names_the_model_and_the_key(tmp_path: Path, key: str, message: str) -> None:
    where = r"invalid value for option 'model' \(from .*models.toml\).*"
    with pytest.raises(ConfigError, match=where + message):
        models(f'[[model]]\nid = "big"\npath = "/b"\n{key}\n', tmp_path)
