"""What the Responses API tests share: the question, the tools and their schemas, the `tokenizer`
fixture, and checks on what the `openai` SDK reads (strictly typed, valid tool arguments).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import jsonschema_rs
import mlx_lm
import pytest
from openai.types.responses import Response, ResponseFunctionToolCall, ResponseStreamEvent

RUNS = 20
T = TypeVar("T")
ASK = "What is the weather in Paris?"
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CLOCK_PARAMETERS = {
    "type": "object",
    "properties": {"zone": {"type": "string", "maxLength": 8}},
    "required": ["zone"],
    "additionalProperties": False,
}
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The forecast",
    "parameters": WEATHER_PARAMETERS,
}
CLOCK: Any = {"type": "function", "name": "get_time", "parameters": CLOCK_PARAMETERS}
SCHEMAS = {"get_weather": WEATHER_PARAMETERS, "get_time": CLOCK_PARAMETERS}


# Named apart from its fixture, so that the tests' `tokenizer` arguments shadow no import.
@pytest.fixture(scope="module", name="tokenizer")
def tokenizer_fixture(tiny_model: Path):  # type: ignore[no-untyped-def]
    return mlx_lm.load(str(tiny_model))[1]


def calls(response: Response) -> list[ResponseFunctionToolCall]:
    return [item for item in response.output if item.type == "function_call"]


# The SDK reads events and responses without validating them; its types validate them strictly.
EVENT_TYPES = {
    typing.get_args(event.model_fields["type"].annotation)[0]: event
    for event in typing.get_args(typing.get_args(ResponseStreamEvent)[0])
}


def strictly(*read: Any) -> None:
    """Each of `read` (responses, stream events) is what the SDK's own type says, field by field."""
    for item in read:
        model = Response if isinstance(item, Response) else EVENT_TYPES[item.type]
        model.model_validate(item.to_dict())


def concurrently(request: Callable[[], T], runs: int = RUNS) -> list[T]:
    """`runs` answers to the same request, several at a time: they share the model's batches."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda _: request(), range(runs)))


def valid(name: str, arguments: str) -> bool:
    return bool(jsonschema_rs.validator_for(SCHEMAS[name]).is_valid(json.loads(arguments)))
