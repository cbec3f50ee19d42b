"""What both `mlxhost tui` test files share: the terminal size they run the console in, and
Textual's event loop for anyio."""

from __future__ import annotations

import pytest

SIZE = (100, 30)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio only
