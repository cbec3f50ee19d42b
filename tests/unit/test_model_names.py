"""The names requests send, and which model answers them: ids, exact aliases, patterns, the default.

The pool is opened in this process with nothing started: resolving a name loads no model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from mlxhost.config import ConfigError, Settings
from mlxhost.config_sources import load_settings
from mlxhost.host.workers.pool import ModelPool, UnknownModel
from mlxhost.catalog.spec import ModelSpec

SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"


def with_pool(specs: tuple[ModelSpec, ...], check: Callable[[ModelPool], None], strict: bool = False) -> None:
    async def main() -> None:
        paths = {spec.id: Path(spec.path) for spec in specs}
        async with ModelPool.open(Settings(strict_models=strict), specs, paths, Path("/nonexistent")) as pool:
            check(pool)

    anyio.run(main)


def models(text: str, tmp_path: Path) -> tuple[ModelSpec, ...]:
    file = tmp_path / "models.toml"
    file.write_text(text)
    return load_settings(env={}, config_file=file).model


def test_exact_names_then_patterns_in_order_then_the_default() -> None:
    specs = (
        ModelSpec("big", "/m/big", aliases=("claude-sonnet-*", "claude-opus-*")),
        ModelSpec("small", "/m/small", aliases=("claude-haiku-*", "fast", "gpt-5*")),
        ModelSpec("coder", "/m/coder", aliases=("gpt-5-codex", "gpt-?-mini*")),
    )

    def check(pool: ModelPool) -> None:
        assert pool.resolve(SONNET).id == "big"
        assert pool.resolve(HAIKU).id == "small"
        assert pool.resolve("fast").id == "small"  # an exact alias
        assert pool.resolve("gpt-5-codex").id == "coder"  # an exact alias beats small's 'gpt-5*'
        assert pool.resolve("gpt-5-mini").id == "small"  # both patterns match: the first model's
        assert pool.resolve("gpt-4-mini").id == "coder"  # ? is one character
        assert pool.resolve("gpt-4-turbo").id == "big"  # nothing matches: the default
        assert pool.resolve(None).id == "big" and pool.resolve("").id == "big"

    with_pool(specs, check)


def test_an_id_beats_another_models_pattern() -> None:
    specs = (ModelSpec("any", "/m/a", aliases=("*",)), ModelSpec("claude-x", "/m/b"))

    def check(pool: ModelPool) -> None:
        assert pool.resolve("claude-x").id == "claude-x" and pool.resolve("claude-y").id == "any"

    with_pool(specs, check)


def test_patterns_are_whole_name_and_case_sensitive() -> None:
    specs = (ModelSpec("default", "/m/d"), ModelSpec("claude", "/m/c", aliases=("claude-*",)))

    def check(pool: ModelPool) -> None:
        assert pool.resolve("claude-").id == "claude"  # * matches nothing, too
        assert pool.resolve("Claude-sonnet").id == "default"
        assert pool.resolve("my-claude-sonnet").id == "default"
        assert pool.resolve("claude-[1m]").id == "claude"  # brackets in a name are just characters
        assert pool.resolve("claude-a/b\nc").id == "claude"  # * takes any character

    with_pool(specs, check)


def test_strict_models_serves_what_a_pattern_matches_and_refuses_the_rest() -> None:
    specs = (
        ModelSpec("qwen", "/m/q", aliases=("claude-*",)),
        ModelSpec("coder", "/m/c", aliases=("gpt-5*",)),
    )

    def check(pool: ModelPool) -> None:
        assert pool.resolve(HAIKU).id == "qwen" and pool.resolve("gpt-5.1-codex").id == "coder"
        with pytest.raises(UnknownModel) as refused:
            pool.resolve("gpt-4o")
        assert str(refused.value) == (
            "the model 'gpt-4o' does not exist; this host serves 'qwen', 'coder', "
            "and names matching 'claude-*', 'gpt-5*'"
        )

    with_pool(specs, check, strict=True)


def test_a_bare_star_takes_every_name_even_when_strict() -> None:
    specs = (ModelSpec("qwen", "/m/q", aliases=("claude-*",)), ModelSpec("big", "/m/b", aliases=("*",)))

    def check(pool: ModelPool) -> None:
        assert pool.resolve(SONNET).id == "qwen"
        assert pool.resolve("anything").id == "big"
        assert pool.resolve(None).id == "qwen"  # no name is still the default

    with_pool(specs, check, strict=True)


def test_patterns_are_no_model_names() -> None:
    specs = (ModelSpec("qwen", "/m/q", aliases=("claude-*", "small")),)

    def check(pool: ModelPool) -> None:
        assert pool.resolve_exact("small") is not None
        assert pool.resolve_exact(SONNET) is None and pool.resolve_exact("claude-*") is None
        assert [(m.id, m.aliases) for m in pool.snapshot()] == [("qwen", ("small",))]

    with_pool(specs, check)
    assert specs[0].names == ("qwen", "small") and specs[0].patterns == ("claude-*",)


def test_a_registered_model_needs_new_exact_names_and_takes_names_from_patterns() -> None:
    specs = (ModelSpec("qwen", "/m/q", aliases=("claude-*", "small")),)

    def check(pool: ModelPool) -> None:
        pool.register(ModelSpec("claude-tuned", "/m/t"), Path("/m/t"), {"job": "j1"})
        assert pool.resolve("claude-tuned").id == "claude-tuned"
        assert pool.resolve(SONNET).id == "qwen"
        with pytest.raises(ValueError, match="is taken"):
            pool.register(ModelSpec("small", "/m/s"), Path("/m/s"), {"job": "j2"})
        pool.unregister("claude-tuned")
        assert pool.resolve("claude-tuned").id == "qwen"

    with_pool(specs, check)


def test_model_tables_keep_their_aliases_in_order(tmp_path: Path) -> None:
    specs = models(
        '[[model]]\nid = "big"\npath = "/b"\naliases = ["claude-sonnet-*", "large"]\n\n'
        '[[model]]\nid = "small"\npath = "/s"\naliases = ["claude-haiku-*", "*"]\n',
        tmp_path,
    )
    assert [s.patterns for s in specs] == [("claude-sonnet-*",), ("claude-haiku-*", "*")]
    assert [s.names for s in specs] == [("big", "large"), ("small",)]


@pytest.mark.parametrize(
    ("aliases", "message"),
    [
        ('["gpt-[45]*"]', r"model 'a': each of 'aliases' must be a pattern whose only wildcards are \* and"),
        ('["claude *"]', "a pattern without spaces or control characters"),
        ('[""]', "'aliases' must be a list of names or patterns"),
        ('"claude-*"', "'aliases' must be a list of names or patterns"),
    ],
)
def test_a_bad_pattern_is_named_with_what_is_valid(tmp_path: Path, aliases: str, message: str) -> None:
    where = r"invalid value for option 'model' \(from .*models.toml\).*"
    with pytest.raises(ConfigError, match=where + message):
        models(f'[[model]]\nid = "a"\npath = "/a"\naliases = {aliases}\n', tmp_path)


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ('["claude-*"]', '["claude-*"]', "the pattern 'claude-\\*' is used twice"),
        ('["fast"]', '["fast"]', "the model name 'fast' is used twice"),
        ('["*"]', '["gpt-5*"]', r"'gpt-5\*' \(model 'b'\) would never match: the pattern '\*' of model 'a'"),
        ('["claude-*"]', '["claude-haiku-*"]', "narrow 'claude-\\*'"),
    ],
)
def test_names_that_clash_or_can_never_match_are_refused(
    tmp_path: Path, first: str, second: str, message: str
) -> None:
    text = (
        f'[[model]]\nid = "a"\npath = "/a"\naliases = {first}\n\n'
        f'[[model]]\nid = "b"\npath = "/b"\naliases = {second}\n'
    )
    with pytest.raises(ConfigError, match=message):
        models(text, tmp_path)


def test_patterns_that_overlap_without_hiding_one_another_are_fine(tmp_path: Path) -> None:
    specs = models(
        '[[model]]\nid = "a"\npath = "/a"\naliases = ["gpt-5*", "gpt-*-mini"]\n\n'
        '[[model]]\nid = "b"\npath = "/b"\naliases = ["*-codex", "*"]\n',
        tmp_path,
    )
    assert [s.id for s in specs] == ["a", "b"]  # gpt-5-codex goes to a, as a comes first
    assert ModelSpec("x", "/x", aliases=("gpt-[45]",)).names == ("x", "gpt-[45]")  # no wildcard: exact


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[model]]\nid = "claude-*"\npath = "/a"\n', r"'id' is an exact name.*put patterns in 'aliases'"),
        ('model = ["gpt-?=/a"]\n', r"ids cannot hold \* or \?"),
        ('model = "/a"\nmodel_id = "claude-*"\n', r"option 'model_id'.*expected an exact model name"),
    ],
)
def test_an_id_is_never_a_pattern(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "ids.toml"
    file.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(env={}, config_file=file)


def test_model_aliases_name_a_single_model_from_flag_env_or_file(tmp_path: Path) -> None:
    flag = load_settings(cli={"model": ["/m/q"], "model_aliases": ["claude-*,gpt-5*", "small"]}, env={})
    assert flag.model[0].aliases == ("claude-*", "gpt-5*", "small")
    env = load_settings(env={"MLXHOST_MODEL": "qwen=/m/q", "MLXHOST_MODEL_ALIASES": "claude-*, small"})
    assert env.model[0].names == ("qwen", "small") and env.model[0].patterns == ("claude-*",)
    file = tmp_path / "one.toml"
    file.write_text(
        'model_aliases = ["claude-*"]\nmodel_id = "mine"\n\n[[model]]\npath = "/m/q"\naliases = ["x"]\n'
    )
    table = load_settings(env={}, config_file=file).model[0]
    assert (table.id, table.aliases) == ("mine", ("x", "claude-*"))
    demo = load_settings(env={"MLXHOST_MODEL_ALIASES": "claude-*"})  # kept for the demo model
    assert demo.model == () and demo.model_aliases == ("claude-*",)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MLXHOST_MODEL": "a=/a,b=/b"}, r"option 'model_aliases' \(from MLXHOST_MODEL_ALIASES\) names"),
        ({"MLXHOST_MODEL": "q=/a", "MLXHOST_MODEL_ALIASES": "x,q"}, "the model name 'q' is used twice"),
        ({"MLXHOST_MODEL_ALIASES": "gpt-[45]*"}, r"expected a pattern whose only wildcards are \* and \?"),
        ({"MLXHOST_MODEL_ALIASES": "a,a"}, "each name or pattern once"),
    ],
)
def test_bad_model_aliases_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env={"MLXHOST_MODEL_ALIASES": "claude-*", **env})


def test_the_demo_is_tiny_unless_named() -> None:
    assert load_settings(env={}).demo == "tiny"
    assert load_settings(env={"MLXHOST_DEMO": "agent"}).demo == "agent"
    assert load_settings(cli={"demo": "Agent"}, env={}).demo == "agent"


@pytest.mark.parametrize("value", ["huge", "bench", ""])
def test_an_unknown_demo_is_named_with_the_valid_ones(value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(env={"MLXHOST_DEMO": value})
    assert str(refused.value) == (
        f"invalid value for option 'demo' (from MLXHOST_DEMO): {value!r}; expected one of tiny, agent"
    )


def test_naming_the_demo_beside_a_model_names_both_options(tmp_path: Path) -> None:
    file = tmp_path / "demo.toml"
    file.write_text('demo = "agent"\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(cli={"model": ["/m/q"]}, env={}, config_file=file)
    assert str(refused.value).startswith(
        f"option 'demo' (from {file}) and option 'model' (from --model) both say what to serve"
    )


def test_every_demo_is_a_size_the_demo_package_builds() -> None:
    from mlxhost.config import DEMOS
    from mlxhost.demo import SIZES

    if "agent" not in SIZES:
        pytest.skip("the 'agent' demo size has not landed in mlxhost.demo yet")
    assert set(DEMOS) <= set(SIZES)


def test_the_shipped_model_table_example_loads(tmp_path: Path) -> None:
    shipped = (Path(__file__).resolve().parents[2] / "config" / "mlxhost.toml").read_text()
    example = shipped[shipped.index("# [[model]]") :]
    table = "\n".join(line.removeprefix("# ") for line in example.splitlines())
    (spec,) = models(table, tmp_path)
    assert "claude-*" in spec.patterns


def test_the_flags_are_the_options_names() -> None:
    from mlxhost.cli import _parser

    argv = ["serve", "--model-aliases", "claude-*", "--model-aliases", "small", "--demo", "agent"]
    args = vars(_parser().parse_args(argv))
    settings = load_settings(cli={k: v for k, v in args.items() if k not in ("command", "config")}, env={})
    assert settings.model_aliases == ("claude-*", "small") and settings.demo == "agent"
