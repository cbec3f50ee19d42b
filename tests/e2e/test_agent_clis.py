"""Claude Code and Codex, the real CLIs from npm, against a real host: a plain turn and a tool
round trip each, and what the host's sessions recorded of them.

The models are scripted demo models (mlxhost.demo.scripted): the agent demo model's tokenizer,
template and 64k context, with weights set, not trained, so that they answer "Hello from
mlxhost." to anything, or call the CLI's shell tool (`echo mlxhost-tool-ok`) until the
conversation holds its result and then say "The command ran.". A random model would answer
noise and never call a tool. The CLIs are installed from npm at the pinned versions into the
user's cache on first use (about 650 MB, a minute); the tests are skipped where npm is missing.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import pytest

from mlxhost.client.admin import Target
from mlxhost.demo import SIZES, default_cache_dir, make_model
from mlxhost.demo.scripted import CLAUDE_CODE_BASH, CODEX_EXEC, HELLO, make_scripted_model
from mlxhost.testing import RunningHost, outcome_without_drafts, start_host, wait_until
from mlxhost_tui.app import make_app
from tests.e2e.test_tui import log_text, until

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
README_URL = "http://127.0.0.1:8080"
CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
CODEX = "@openai/codex@0.171.0"
CLI_TIMEOUT = 300
HELLO_TEXT = HELLO.first[0]
AFTER_TOOL = CLAUDE_CODE_BASH.after[0]
# A turn in which the claude-bash model calls Bash, and Claude Code may run what it calls.
BASH_TURN = (
    "Run the command.",
    "--model",
    "claude-bash",
    "--tools",
    "Bash",
    "--allowed-tools",
    "Bash(echo:*)",
)


@pytest.fixture(scope="session")
def agent_bin() -> Path:
    """The folder holding `claude` and `codex`, installed once into the cache."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the agent CLIs come from npm")
    versions = "-".join(p.rsplit("@", 1)[1] for p in (CLAUDE_CODE, CODEX))
    prefix = default_cache_dir() / f"agent-clis-{versions}"
    bin_dir = prefix / "node_modules" / ".bin"
    if not (bin_dir / "claude").exists() or not (bin_dir / "codex").exists():
        prefix.parent.mkdir(parents=True, exist_ok=True)
        staging = prefix.with_name(f".{prefix.name}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(staging),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                CLAUDE_CODE,
                CODEX,
            ],
            check=True,
            timeout=900,
        )
        shutil.rmtree(prefix, ignore_errors=True)
        staging.rename(prefix)
    return bin_dir


@pytest.fixture(scope="module")
def agent_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    models = tmp_path_factory.mktemp("scripted")
    base = make_model(models / "base", size="agent" if "agent" in SIZES else "tiny")
    paths = {
        script.name: make_scripted_model(base, models / script.name, script)
        for script in (HELLO, CLAUDE_CODE_BASH, CODEX_EXEC)
    }
    config = models / "mlxhost.toml"
    config.write_text(
        "max_resident = 3\n"
        # The names the CLIs ask for by default go to the plain model, as a user maps them once.
        f'[[model]]\nid = "hello"\npath = "{paths["hello"]}"\naliases = ["claude-*", "gpt-*"]\n'
        f'[[model]]\nid = "claude-bash"\npath = "{paths["claude-code-bash"]}"\n'
        f'[[model]]\nid = "codex-exec"\npath = "{paths["codex-exec"]}"\n'
    )
    with start_host("--config", str(config)) as host:
        yield host


def sessions_of(host: RunningHost, model: str, count: int) -> list[dict[str, Any]]:
    def closed() -> list[dict[str, Any]] | None:
        with host.http() as http:
            recent = http.get("/admin/state").json()["sessions"]["recent"]
        found = [s for s in recent if s["model"] == model]
        return found if len(found) >= count else None

    return wait_until(closed, timeout=30)


def readme_block(heading: str, language: str, holding: str) -> str:
    """The README's first `language` block under `heading` that holds `holding`: the tests use
    the README's settings as written."""
    section = README.read_text().split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(rf"```{language}\n(.*?)```", section, re.S)
    return next(block for block in blocks if holding in block)


def claude_environment(host: RunningHost) -> dict[str, str]:
    words = shlex.split(readme_block("Use it with Claude Code", "sh", "ANTHROPIC_BASE_URL"))
    pairs = dict(word.split("=", 1) for word in words[: words.index("claude")])
    return {k: v.replace(README_URL, str(host.url)) for k, v in pairs.items()}


def codex_config(host: RunningHost, model: str) -> str:
    config = readme_block("Use it with Codex", "toml", "model_provider")
    return config.replace(README_URL, str(host.url)).replace('model = "mlxhost-demo"', f'model = "{model}"')


def run_claude(
    agent_bin: Path, host: RunningHost, home: Path, *args: str, bare: bool = True
) -> dict[str, Any]:
    """One turn of `claude -p`; `bare` shrinks its prompt (no CLAUDE.md, skills or agents, a
    one-line system prompt) to what a test needs."""
    small = ["--bare", "--system-prompt", "You are terse."] if bare else []
    argv = [str(agent_bin / "claude"), "-p", *args, *small, "--output-format", "json"]
    return json.loads(run_cli(argv, home, claude_environment(host)).stdout)  # type: ignore[no-any-return]


def run_codex(
    agent_bin: Path, host: RunningHost, home: Path, model: str, prompt: str
) -> subprocess.CompletedProcess[str]:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(codex_config(host, model))
    argv = [str(agent_bin / "codex"), "exec", "--skip-git-repo-check", prompt]
    return run_cli(argv, home, {"MLXHOST_API_KEY": "unused"})


def run_cli(argv: list[str], home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """An agent CLI run as a user would, in a home of its own, to its exit (which must be 0)."""
    result = subprocess.run(
        argv,
        env={"PATH": os.environ["PATH"], "HOME": str(home), **env},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_the_readme_settings_name_the_host() -> None:
    class Host:
        url = "http://127.0.0.1:9999"

    env = claude_environment(Host())  # type: ignore[arg-type]
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9999"
    assert {"ANTHROPIC_API_KEY", "DISABLE_TELEMETRY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"} <= set(env)
    config = codex_config(Host(), "m")  # type: ignore[arg-type]
    assert 'base_url = "http://127.0.0.1:9999/v1"' in config and 'model = "m"' in config


def test_claude_code_answers_a_plain_turn(agent_bin: Path, agent_host: RunningHost, tmp_path: Path) -> None:
    # No --model: Claude Code asks for a claude-... name, which the hello model's alias takes.
    out = run_claude(agent_bin, agent_host, tmp_path, "Say hi.")
    assert out["is_error"] is False, out
    assert out["result"] == HELLO_TEXT
    assert out["num_turns"] == 1
    (session,) = sessions_of(agent_host, "hello", 1)[-1:]
    assert session["outcome"]["kind"] == "completed"
    assert session["client"]["user_id"]  # Claude Code's metadata.user_id
    assert "system.cache_control" in session["outcome"]["ignored"]


def test_claude_codes_whole_first_prompt_fits_the_agent_demo(
    agent_bin: Path, agent_host: RunningHost, tmp_path: Path
) -> None:
    # Not bare: its full system prompt, 24 tools and a mid-conversation system turn, about
    # 76 KB, which the agent demo's tokenizer makes about 15,000 of its 65,536 positions.
    out = run_claude(agent_bin, agent_host, tmp_path, "Say hi.", bare=False)
    assert out["is_error"] is False, out
    assert out["result"] == HELLO_TEXT
    assert out["usage"]["input_tokens"] + out["usage"]["cache_read_input_tokens"] > 8000


def test_the_readme_serve_command_serves_the_agent_demo_under_claude_names() -> None:
    command = readme_block("Use it with Claude Code", "sh", "mlxhost serve")
    args = shlex.split(command)[2:]  # after `.venv/bin/mlxhost serve`
    assert args == ["--demo", "agent", "--model-aliases", "claude-*"]
    with start_host(*args) as host, anthropic.Anthropic(base_url=host.url, api_key="unused") as client:
        counted = client.messages.count_tokens(
            model="claude-haiku-4-5-20251001", messages=[{"role": "user", "content": "hello " * 20_000}]
        )
        with host.http() as http:
            models = http.get("/v1/models").json()["data"]
    assert 20_000 <= counted.input_tokens < 65_536  # a prompt the tiny demo's 4,096 could not hold
    # The agent demo answers to Claude's names; the demo's embedder and reranker stand beside it.
    assert [m["id"] for m in models] == ["mlxhost-demo", "mlxhost-demo-embed", "mlxhost-demo-rerank"]


def test_claude_code_runs_a_tool_the_model_calls_and_sends_back_its_result(
    agent_bin: Path, agent_host: RunningHost, tmp_path: Path
) -> None:
    out = run_claude(agent_bin, agent_host, tmp_path, *BASH_TURN)
    assert out["is_error"] is False, out
    assert out["result"] == AFTER_TOOL
    assert out["num_turns"] == 2  # the call, then the answer to its result
    first, second = sessions_of(agent_host, "claude-bash", 2)[-2:]
    assert outcome_without_drafts(first["outcome"]) == {
        "kind": "completed",
        "finish_reason": "tool_calls",
        "ignored": first["outcome"]["ignored"],
    }
    assert second["outcome"]["kind"] == "completed" and second["outcome"]["finish_reason"] != "tool_calls"


def test_codex_answers_a_plain_turn(agent_bin: Path, agent_host: RunningHost, tmp_path: Path) -> None:
    result = run_codex(agent_bin, agent_host, tmp_path, "gpt-5-codex", "Say hi.")
    assert result.stdout.strip().splitlines()[-1] == HELLO_TEXT
    session = sessions_of(agent_host, "hello", 1)[-1]
    assert session["outcome"]["kind"] == "completed"
    assert session["client"]["session_id"]  # from Codex's client_metadata
    assert {"tools.web_search", "include.reasoning.encrypted_content"} <= set(session["outcome"]["ignored"])


def test_codex_runs_a_tool_the_model_calls_and_sends_back_its_result(
    agent_bin: Path, agent_host: RunningHost, tmp_path: Path
) -> None:
    result = run_codex(agent_bin, agent_host, tmp_path, "codex-exec", "Run the command.")
    assert result.stdout.strip().splitlines()[-1] == AFTER_TOOL
    assert "echo mlxhost-tool-ok" in result.stderr  # Codex shows the command it ran
    first, second = sessions_of(agent_host, "codex-exec", 2)[-2:]
    assert first["outcome"]["finish_reason"] == "tool_calls"
    assert second["outcome"]["kind"] == "completed"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio only


@pytest.mark.anyio
async def test_every_turn_shows_in_the_console_with_what_it_skipped(
    agent_bin: Path, agent_host: RunningHost, tmp_path: Path
) -> None:
    app = make_app(Target(url=agent_host.url, token=agent_host.admin_token))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.main.status.connection == "connected", "connected")
        out = await anyio.to_thread.run_sync(lambda: run_claude(agent_bin, agent_host, tmp_path, *BASH_TURN))
        assert out["result"] == AFTER_TOOL
        turns = sessions_of(agent_host, "claude-bash", 2)[-2:]
        for turn in turns:
            line = f"{turn['id']} completed ({turn['outcome']['finish_reason']})"
            await until(pilot, lambda: line in log_text(app), f"the console shows {turn['id']}")
            shown = next(entry for entry in log_text(app).splitlines() if line in entry)
            assert shown.endswith("; skipped " + ", ".join(turn["outcome"]["ignored"]))
