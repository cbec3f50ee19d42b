"""A demo variant's worker app in this process: the real engine and routes of one family's model,
reached by the SDKs through httpx's ASGITransport, so that every family's matrix runs the real
dialects without starting a process per family.

Its tests are in tests/e2e: they drive a whole worker (the model, the engine, the routes) through
the real SDKs; only the process around it is left out. `family_worker(model)` yields the app's
clients: `openai` (AsyncOpenAI) and `anthropic` (AsyncAnthropic). The prompt cache is off, so that
two requests with one seed sample the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai

from mlxhost.config import Settings
from mlxhost.worker.app import create_app
from mlxhost.worker.engine.engine import Engine
from mlxhost.worker.engine.options import EngineOptions

__all__ = ["FamilyWorker", "family_worker"]

BASE = "http://family.test"


@dataclass
class FamilyWorker:
    engine: Engine
    openai: openai.AsyncOpenAI
    anthropic: anthropic.AsyncAnthropic
    http: httpx.AsyncClient


@asynccontextmanager
async def family_worker(model: Path) -> AsyncIterator[FamilyWorker]:
    settings = Settings(stream_interval=0.0)
    async with Engine.open(model, EngineOptions(prompt_cache_entries=0)) as engine:
        app = create_app(engine, settings, "tiny")
        async with (
            httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=BASE) as http,
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url=BASE) as sdk_http,
        ):
            yield FamilyWorker(
                engine,
                openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="x", http_client=sdk_http),  # type: ignore[arg-type]
                anthropic.AsyncAnthropic(base_url=BASE, api_key="x", http_client=sdk_http),
                http,
            )
