"""The names Claude Code sends, served by a host whose [[model]] tables name them by pattern."""

from __future__ import annotations

from pathlib import Path

import anthropic
import httpx
import pytest

from mlxhost.testing import start_host

SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"


def test_claude_codes_two_names_reach_two_models_and_others_get_404(tiny_model: Path, tmp_path: Path) -> None:
    config = tmp_path / "models.toml"
    config.write_text(
        "strict_models = true\n\n"
        f'[[model]]\nid = "big"\npath = "{tiny_model}"\naliases = ["claude-sonnet-*", "claude-opus-*"]\n\n'
        f'[[model]]\nid = "small"\npath = "{tiny_model}"\naliases = ["claude-haiku-*"]\n'
    )
    hello = [{"role": "user", "content": "Hi"}]
    with start_host("--config", str(config)) as server:
        assert server.url is not None
        with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as claude:
            assert claude.messages.create(model=SONNET, max_tokens=2, messages=hello).model == "big"
            assert claude.messages.create(model=HAIKU, max_tokens=2, messages=hello).model == "small"
            with pytest.raises(anthropic.NotFoundError, match="names matching 'claude-sonnet-\\*'"):
                claude.messages.create(model="gpt-4o", max_tokens=2, messages=hello)
        models = httpx.get(f"{server.url}/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["big", "small"]  # never a pattern
