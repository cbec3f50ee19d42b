"""What the Messages API tests share: the prompt, the weather tool, and an Anthropic SDK client
on the module's host (tests/conftest.py's `server`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from mlxhost.testing import RunningHost

HELLO: list[Any] = [{"role": "user", "content": "Tell me about café culture in 日本 🙂"}]
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "unit": {"enum": ["c", "f"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}


# Named apart from its fixture, so that the tests' `client` arguments shadow no import.
@pytest.fixture(name="client")
def client_fixture(server: RunningHost) -> Iterator[anthropic.Anthropic]:
    assert server.url is not None
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
        yield c
