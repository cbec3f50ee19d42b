"""Shared by the supervision tests: a short chat, and waiting for a worker the host gave up on."""

from __future__ import annotations

from mlxhost.testing import RunningHost, wait_until

SHORT_CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


def exhausted(server: RunningHost) -> dict:  # type: ignore[type-arg]
    return wait_until(lambda: (w := server.worker())["state"] == "exhausted" and w, timeout=60)  # type: ignore[no-any-return]
