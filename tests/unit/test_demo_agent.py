"""The "agent" demo model: the tiny model with 65,536 positions and a tokenizer for agents' prompts.

Building it trains two tokenizers (about 5 s here), so the tests that need it are slow and share
one build.
"""

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
    FORMAT_VERSION,
    SIZES,
    SPECIAL_TOKENS,
    ensure_demo_model,
    make_model,
    parameter_count,
)
from mlxhost.demo.agent_corpus import agent_corpus

REPO = Path(__file__).resolve().parents[2]
MULTIBYTE = "café 日本語 🙂 — naïve “quotes” ✓"

# Written for this test: what a coding agent's first request holds, in miniature. Instructions in
# Markdown, then tools as JSON Schema, rendered by the chat template as a host would render them.
INSTRUCTIONS = """You are a careful software engineering assistant working in the user's repository.
Use the tools below to read, search and change files, and to run commands in a shell.

# How to work

- Read the relevant files before you change them, and keep each change as small as the task allows.
- Prefer editing an existing file to creating a new one. Never create documentation files unless
  the user explicitly asks for them.
- When a command may take long, run it in the background and check on it later.
- If a test fails, say so and show the output; do not claim that something works before you
  have verified it.
- Ask the user before you delete files, push to a remote branch, or do anything else that is hard
  to undo.

## Style

Answer concisely. Refer to code as `path/to/file.py:42` so the user can jump to it. Use Markdown
lists for steps, and code blocks for commands:

```bash
git status && git diff --stat
python -m pytest -q tests/
```

## Git

When the user asks you to commit, first run `git status` and `git diff` to see what changed, then
write a short commit message that explains why the change was made, not only what it does. Do not
amend commits that were already pushed, and never force-push to the main branch.
"""
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the local filesystem.\n\nUsage:\n- The path must be absolute, "
            "not relative.\n- By default it reads up to 2000 lines from the start of the file.\n- Use "
            "`offset` and `limit` for long files, and read several files in parallel when you can.",
            "parameters": {
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The absolute path of the file to read"},
                    "offset": {
                        "type": "integer",
                        "minimum": 0,
                        "description": "The line to start reading at",
                    },
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read"},
                },
                "required": ["file_path"],
                "additionalProperties": False,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the current working directory and return its "
            "output.\n\nIMPORTANT: do not use this tool to read or search files; use `read_file` and "
            "`search` instead. Quote paths that contain spaces, and prefer `&&` to chain commands.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command to run"},
                    "timeout": {
                        "type": "number",
                        "description": "Optional timeout in milliseconds (max 600000)",
                    },
                    "run_in_background": {
                        "type": "boolean",
                        "default": False,
                        "description": "Set to true to run the command in the background and be "
                        "notified when it ends",
                    },
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search file contents with a regular expression. Returns the matching lines "
            "with their file paths and line numbers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "The regular expression to search for"},
                    "path": {
                        "type": "string",
                        "description": "The directory to search in (default: the working directory)",
                    },
                    "glob": {
                        "type": "string",
                        "description": 'Only search files that match this glob, e.g. "*.ts"',
                    },
                    "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                },
                "required": ["pattern"],
                "additionalProperties": False,
            },
        },
    },
]
MESSAGES = [
    {"role": "system", "content": INSTRUCTIONS},
    {
        "role": "user",
        "content": "The tests in tests/test_parser.py fail since yesterday's merge. Find out why and fix it.",
    },
]


def file_hashes(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_the_agent_size_is_the_tiny_model_with_a_long_context() -> None:
    tiny, agent = SIZES["tiny"], SIZES["agent"]
    assert agent.max_position_embeddings == 65536
    assert (agent.architecture, agent.hidden_size, agent.num_hidden_layers) == ("llama", 64, 2)
    assert agent.vocab_size == 32768 and agent.tokenizer == "agent"
    assert tiny.tokenizer == "demo"
    # Its embeddings are nearly all of it: the model file stays under 20 MB.
    assert parameter_count("agent") * 4 < 20_000_000


def test_the_agent_corpus_is_the_same_every_time() -> None:
    first, again = agent_corpus(30), agent_corpus(30)
    assert first == again
    text = "\n".join(first)
    # The kinds of text an agent's prompt holds.
    assert '"additionalProperties": false' in text and '"properties": {' in text
    assert "\n- " in text and "```" in text and "git " in text


def test_an_unknown_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown size"):
        ensure_demo_model(tmp_path, size="huge")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def agent_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_demo_model(tmp_path_factory.mktemp("cache"), size="agent")


@pytest.fixture(scope="module")
def loaded(agent_dir: Path) -> tuple[Any, Any]:
    import mlx_lm

    return mlx_lm.load(str(agent_dir))


@pytest.mark.slow
def test_it_is_cached_beside_the_tiny_model(agent_dir: Path) -> None:
    assert agent_dir.name == f"demo-agent-v{FORMAT_VERSION}"
    before = {p.name: p.stat().st_mtime_ns for p in agent_dir.iterdir()}
    assert ensure_demo_model(agent_dir.parent, size="agent") == agent_dir
    assert {p.name: p.stat().st_mtime_ns for p in agent_dir.iterdir()} == before
    config = json.loads((agent_dir / "config.json").read_text())
    assert config["mlxhost_demo"] == {"format": FORMAT_VERSION, "size": "agent", "seed": 0}


@pytest.mark.slow
def test_mlx_lm_loads_it_with_a_65536_token_context(agent_dir: Path, loaded: tuple[Any, Any]) -> None:
    from mlx.utils import tree_flatten

    model, tokenizer = loaded
    assert model.args.max_position_embeddings == 65536
    assert json.loads((agent_dir / "tokenizer_config.json").read_text())["model_max_length"] == 65536
    assert sum(v.size for _, v in tree_flatten(model.parameters())) == parameter_count("agent")
    assert len(tokenizer) == 32768


@pytest.mark.slow
def test_it_generates(loaded: tuple[Any, Any]) -> None:
    import mlx_lm

    model, tokenizer = loaded
    prompt = tokenizer.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True)
    responses = list(mlx_lm.stream_generate(model, tokenizer, prompt, max_tokens=10))
    assert 0 < len(responses) <= 10
    assert responses[-1].finish_reason in ("length", "stop")


@pytest.mark.slow
def test_multibyte_text_round_trips(loaded: tuple[Any, Any]) -> None:
    from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer

    _, tokenizer = loaded
    for text in (MULTIBYTE, "ほ龍", INSTRUCTIONS, json.dumps(TOOLS)):
        assert tokenizer.decode(tokenizer.encode(text)) == text
    detokenizer = tokenizer.detokenizer
    assert isinstance(detokenizer, BPEStreamingDetokenizer)
    for token in tokenizer.encode(MULTIBYTE):
        detokenizer.add_token(token)
    detokenizer.finalize()
    assert detokenizer.text == MULTIBYTE


@pytest.mark.slow
def test_mlx_lm_still_finds_tool_calling_and_thinking(loaded: tuple[Any, Any]) -> None:
    _, tokenizer = loaded
    assert tokenizer.has_tool_calling
    assert (tokenizer.tool_call_start, tokenizer.tool_call_end) == ("<tool_call>", "</tool_call>")
    assert tokenizer.has_thinking
    assert (tokenizer.think_start, tokenizer.think_end) == ("<think>", "</think>")
    for tag in SPECIAL_TOKENS:
        assert tokenizer.encode(tag, add_special_tokens=False) == [SPECIAL_TOKENS.index(tag)]
    # A tag inside text is still its one token, whatever the merges around it would have made.
    ids = tokenizer.encode('ok.<tool_call>\n{"name": "x"}</tool_call><|end|>', add_special_tokens=False)
    for tag in ("<tool_call>", "</tool_call>", "<|end|>"):
        assert SPECIAL_TOKENS.index(tag) in ids


@pytest.mark.slow
def test_an_agent_prompt_costs_several_characters_a_token(loaded: tuple[Any, Any], tmp_path: Path) -> None:
    """The point of the size: the tiny tokenizer spends a token on every character or two."""
    import mlx_lm

    _, agent = loaded
    _, tiny = mlx_lm.load(str(make_model(tmp_path / "tiny")))
    text = agent.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert text == tiny.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert len(text) > 3000
    agent_ratio = len(text) / len(
        agent.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True)
    )
    tiny_ratio = len(text) / len(tiny.apply_chat_template(MESSAGES, tools=TOOLS, add_generation_prompt=True))
    print(f"{len(text)} characters: {agent_ratio:.2f} a token (agent), {tiny_ratio:.2f} (tiny)")
    assert agent_ratio >= 3.0, agent_ratio
    assert agent_ratio >= 2 * tiny_ratio, (agent_ratio, tiny_ratio)


@pytest.mark.slow
def test_two_builds_are_byte_identical(agent_dir: Path, tmp_path: Path) -> None:
    # Another process, with other hash seeds, from the command line.
    env = dict(os.environ, PYTHONHASHSEED="7")
    result = subprocess.run(
        [sys.executable, "scripts/make_tiny_model.py", "--size", "agent", str(tmp_path / "again")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == f"{parameter_count('agent'):,} parameters"
    assert file_hashes(tmp_path / "again") == file_hashes(agent_dir)
