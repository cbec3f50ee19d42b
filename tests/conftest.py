"""Fixtures: the tiny model, and a real `mlxhost serve` (see `mlxhost.testing`) on a Unix socket and a free port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest

from mlxhost.demo import make_model
from mlxhost.testing import RunningHost, start_host

TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`unit` for tests/unit (in-process: the fast loop, `pytest -m unit`), `e2e` for the rest, which
    start real hosts, workers or jobs."""
    for item in items:
        folder = Path(item.path).relative_to(TESTS).parts[0]
        item.add_marker(pytest.mark.unit if folder == "unit" else pytest.mark.e2e)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("models") / "tiny", size="tiny")


@pytest.fixture(scope="session")
def family_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`family_model(name)`: the tiny model's variant for a tool-call family (demo/families/),
    built once per test process on first use."""
    root = tmp_path_factory.mktemp("families")
    built: dict[str, Path] = {}

    def model(name: str) -> Path:
        if name not in built:
            built[name] = make_model(root / name, size="tiny", family=name)
        return built[name]

    return model


@pytest.fixture(scope="session")
def sliding_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as Gemma 3, with sliding-window layers: a cache that cannot be trimmed."""
    return make_model(tmp_path_factory.mktemp("models") / "sliding", size="sliding")


@pytest.fixture(scope="session")
def pipelined_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as Qwen 2 in four layers: mlx-lm can split it across ranks by layers."""
    return make_model(tmp_path_factory.mktemp("models") / "pipelined", size="pipelined")


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHost]:
    socket = tmp_path_factory.mktemp("sock") / "mlxhost.sock"
    with start_host("--model", str(tiny_model), "--unix", str(socket)) as running:
        yield running


@pytest.fixture
def client(server: RunningHost) -> Iterator[openai.OpenAI]:
    with server.client() as c:
        yield c
