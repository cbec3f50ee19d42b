"""An agent framework (openai-agents) on three families' demo variants, in this process: the agent
calls a tool in the family's own syntax, gets its result back through the family's template, and
finishes with an answer. With test_family_matrix.py (the openai and anthropic SDKs on every
family), the real clients run on json_tools, qwen3_coder and glm47 at the least."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest

from mlxhost.worker.engine.tool_formats import available
from tests.e2e.family_worker import family_worker

pytestmark = pytest.mark.slow

FAMILIES = [name for name in ("json_tools", "qwen3_coder", "glm47") if name in available()]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the engine hands results over with loop.call_soon_threadsafe


@pytest.mark.anyio
@pytest.mark.parametrize("name", FAMILIES)
async def test_an_agent_calls_a_tool_gets_its_result_and_finishes(
    family_model: Callable[[str], Path], name: str
) -> None:
    agents = pytest.importorskip("agents")
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: Literal["Paris", "Oslo"]) -> str:  # a free string, the random model rambles in
        """The weather in a city."""
        calls.append(city)
        return f"It is sunny in {city}."

    async with family_worker(family_model(name)) as worker:
        tokenizer = worker.engine.tokenizer
        # The random model may open a think block on its own and stay in it to max_tokens; the
        # SDK rightly calls an answer that is all reasoning a ModelBehaviorError. That is the
        # model's noise, not the host's, so the agent may not think.
        no_thinking = {str(tokenizer.think_ids[0][0]): -100} if tokenizer.think_ids else {}
        agent = agents.Agent(
            name="forecaster",
            instructions="Answer with the weather.",
            tools=[get_weather],
            model=agents.OpenAIChatCompletionsModel(model="tiny", openai_client=worker.openai),
            # The first turn must call the tool; then the SDK puts the choice back to auto.
            model_settings=agents.ModelSettings(
                tool_choice="get_weather",
                max_tokens=64,
                temperature=1.0,
                extra_args={"logit_bias": no_thinking},
            ),
        )
        result: Any = await agents.Runner.run(
            agent, "Weather in Paris?", run_config=agents.RunConfig(tracing_disabled=True)
        )
    assert len(calls) >= 1 and set(calls) <= {"Paris", "Oslo"}
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert outputs and outputs[0].output.startswith("It is sunny in")
    assert isinstance(result.final_output, str)
