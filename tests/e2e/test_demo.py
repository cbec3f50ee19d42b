from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlxhost.demo import (
    BOS_TOKEN,
    EOS_TOKEN,
    SPECIAL_TOKENS,
    default_cache_dir,
    ensure_demo_model,
    make_model,
    parameter_count,
)

REPO = Path(__file__).resolve().parents[2]
MULTIBYTE = "café 日本語 🙂"


def file_hashes(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
    }


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def loaded(tiny_dir: Path) -> tuple[Any, Any]:
    import mlx_lm

    return mlx_lm.load(str(tiny_dir))


def test_loads_with_mlx_lm(tiny_dir: Path, loaded: tuple[Any, Any]) -> None:
    from mlx.utils import tree_flatten

    model, tokenizer = loaded
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["max_position_embeddings"] == 4096
    n_params = sum(v.size for _, v in tree_flatten(model.parameters()))
    assert n_params == parameter_count("tiny")
    assert len(tokenizer) == config["vocab_size"]


def test_chat_template(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|begin|><|system|>\nbe brief<|end|>\n<|user|>\nhi<|end|>\n<|assistant|>\n"
    )
    without = tokenizer.apply_chat_template(messages, tokenize=False)
    assert not without.endswith("<|assistant|>\n")

    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    # Every marker is one special token, not spelled out in bytes.
    for marker in ("<|begin|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"):
        assert SPECIAL_TOKENS.index(marker) in ids
    assert ids[0] == SPECIAL_TOKENS.index(BOS_TOKEN)


def test_chat_template_rejects_unknown_role(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    with pytest.raises(Exception, match="Unsupported role"):
        tokenizer.apply_chat_template([{"role": "function", "content": "x"}], tokenize=False)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_mlx_lm_finds_tool_calling_and_thinking_in_the_demo_model(loaded: tuple[Any, Any]) -> None:
    """The tags Qwen and Hermes models use: mlx-lm picks its json_tools parser and thinking markers."""
    _, tokenizer = loaded
    assert tokenizer.has_tool_calling
    assert (tokenizer.tool_call_start, tokenizer.tool_call_end) == ("<tool_call>", "</tool_call>")
    assert tokenizer.has_thinking
    assert (tokenizer.think_start, tokenizer.think_end) == ("<think>", "</think>")
    # Each tag is one token, so a parser (or a grammar) sees it whole.
    for tag in ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|tool|>"):
        assert tokenizer.encode(tag, add_special_tokens=False) == [SPECIAL_TOKENS.index(tag)]


def test_a_tool_conversation_renders_and_its_calls_parse_back(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    conversation = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "two cities",
            "tool_calls": [
                # OpenAI sends arguments as a JSON string; Hugging Face templates often get a dict.
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
    ]
    text = tokenizer.apply_chat_template(conversation, tools=[WEATHER], add_generation_prompt=True, tokenize=False)
    # The caller's system text comes first, then the tools, in one system turn.
    assert text.startswith("<|begin|><|system|>\nbe brief\n\nYou may call these tools:\n<tools>\n")
    assert json.dumps(WEATHER) in text
    assert text.count("<|system|>") == 1
    assert "<|assistant|>\n<think>\ntwo cities\n</think>\n\n<tool_call>\n" in text
    assert "<|tool|>\nsunny<|end|>\n<|tool|>\nrain<|end|>\n<|assistant|>\n" in text
    # What the template writes for a call is what mlx-lm's parser for this model reads.
    calls = text.split("<|tool|>")[0].split("<tool_call>")[2:]
    parsed = [tokenizer.tool_parser(call.split("</tool_call>")[0], [WEATHER]) for call in calls]
    assert parsed == [
        {"name": "get_weather", "arguments": {"city": "Paris"}},
        {"name": "get_weather", "arguments": {"city": "Rome"}},
    ]


def test_thinking_can_be_switched_off_in_the_generation_prompt(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    messages = [{"role": "user", "content": "hi"}]
    off = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert off.endswith("<|assistant|>\n<think>\n\n</think>\n\n")
    on = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, enable_thinking=True)
    assert on.endswith("<|assistant|>\n")


def test_eos(tiny_dir: Path, loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    eos = SPECIAL_TOKENS.index(EOS_TOKEN)
    assert eos in tokenizer.eos_token_ids
    assert tokenizer.eos_token == EOS_TOKEN
    assert json.loads((tiny_dir / "config.json").read_text())["eos_token_id"] == eos


def test_generates(loaded: tuple[Any, Any]) -> None:
    import mlx_lm

    model, tokenizer = loaded
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    text = mlx_lm.generate(model, tokenizer, prompt, max_tokens=20)
    assert isinstance(text, str) and text

    responses = list(mlx_lm.stream_generate(model, tokenizer, prompt, max_tokens=20))
    assert 0 < len(responses) <= 20
    assert responses[-1].finish_reason in ("length", "stop")


def test_streaming_detokenizer_is_byte_level(loaded: tuple[Any, Any]) -> None:
    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer

    _, tokenizer = loaded
    detokenizer = tokenizer.detokenizer
    assert isinstance(detokenizer, BPEStreamingDetokenizer)
    for token in tokenizer.encode(MULTIBYTE):
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert detokenizer.text == MULTIBYTE


def test_multibyte_round_trip(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    assert tokenizer.decode(tokenizer.encode(MULTIBYTE)) == MULTIBYTE
    # Characters the vocabulary lacks still encode, as single bytes.
    rare = "ほ龍"
    ids = tokenizer.encode(rare)
    assert len(ids) > len(rare)
    assert tokenizer.decode(ids) == rare


def test_same_seed_is_byte_identical(tiny_dir: Path, tmp_path: Path) -> None:
    again = make_model(tmp_path / "again")
    assert file_hashes(again) == file_hashes(tiny_dir)


def test_different_seed_changes_weights_only(tiny_dir: Path, tmp_path: Path) -> None:
    other = file_hashes(make_model(tmp_path / "other", seed=1))
    base = file_hashes(tiny_dir)
    assert other["model.safetensors"] != base["model.safetensors"]
    assert other["tokenizer.json"] == base["tokenizer.json"]


def test_no_temporary_directory_left(tmp_path: Path) -> None:
    make_model(tmp_path / "model")
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_fills_existing_empty_directory(tmp_path: Path) -> None:
    assert make_model(tmp_path) == tmp_path
    assert (tmp_path / "model.safetensors").is_file()


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    make_model(tmp_path / "model", seed=0)
    with pytest.raises(FileExistsError):
        make_model(tmp_path / "model", seed=1)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        make_model(tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_unknown_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown size"):
        make_model(tmp_path / "model", size="huge")


def test_ensure_demo_model_uses_xdg_cache_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "mlxhost"

    path = ensure_demo_model()
    assert path.parent == tmp_path / "mlxhost"
    assert "tiny" in path.name and "v" in path.name
    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}

    assert ensure_demo_model() == path
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == before


def test_ensure_demo_model_explicit_dir(tmp_path: Path) -> None:
    from mlxhost.demo import FORMAT_VERSION

    path = ensure_demo_model(tmp_path / "cache")
    # The name older mlxhosts gave it, so their caches still serve.
    assert path == tmp_path / "cache" / f"demo-tiny-v{FORMAT_VERSION}"
    assert ensure_demo_model(tmp_path / "cache", size="tiny") == path
    assert (path / "tokenizer.json").is_file()


def test_a_cached_model_is_versioned_and_built_once(tmp_path: Path) -> None:
    """The bench and soak keep their models in the cache too: an upgrade must not break them."""
    from mlxhost.demo import FORMAT_VERSION, cached_model

    older = make_model(tmp_path / "bench-tiny", seed=1)  # where the bench kept its model before
    path = cached_model("bench-tiny", cache_dir=tmp_path)
    assert path == tmp_path / f"bench-tiny-v{FORMAT_VERSION}"
    assert (path / "tokenizer.json").is_file() and older.is_dir()
    assert cached_model("bench-tiny", cache_dir=tmp_path) == path


def test_default_cache_dir_without_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "mlxhost"


def test_import_does_not_load_mlx() -> None:
    heavy = ("mlx", "mlx_lm", "numpy", "tokenizers", "transformers")
    code = f"import sys, mlxhost.demo; print([m for m in {heavy!r} if m in sys.modules])"
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_cli(tmp_path: Path) -> None:
    result = run_python("scripts/make_tiny_model.py", str(tmp_path / "cli"), "--seed", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(tmp_path / "cli")
    assert lines[1] == f"{parameter_count('tiny'):,} parameters"
    config = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert config["mlxhost_demo"]["seed"] == 3


@pytest.mark.slow
def test_bench_size_loads(tmp_path: Path) -> None:
    import mlx_lm

    path = make_model(tmp_path / "bench", size="bench")
    model, tokenizer = mlx_lm.load(str(path))
    assert len(tokenizer) == json.loads((path / "config.json").read_text())["vocab_size"]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert list(mlx_lm.stream_generate(model, tokenizer, prompt, max_tokens=5))
