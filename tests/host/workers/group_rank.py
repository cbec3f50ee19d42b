"""One rank of a worker group's engine, for tests/host/test_group.py; run by `mlx.launch` (or alone).

Rank 0 runs the engine over the prompts (argv: model, prompts as JSON, max_tokens), cancels the
sessions named in CANCEL after their first text, and prints each answer's text as JSON; the other
ranks follow it. Without MLX_RANK it is a single engine, the answers to compare with.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from mlxhost.worker.engine import Engine, EngineOptions, serve_follower
from mlxhost.worker.generation import GenerationRequest, SamplingParams


def main() -> None:
    model, prompts, max_tokens = Path(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
    cancel = {int(i) for i in os.environ.get("CANCEL", "").split(",") if i}
    grouped = "MLX_RANK" in os.environ
    options = EngineOptions(sharding="tensor" if grouped else None, prompt_cache_entries=0)
    if grouped and int(os.environ["MLX_RANK"]) != 0:
        serve_follower(model, options, lambda: None)
        return

    async def run() -> None:
        answers: list[str | None] = [None] * len(prompts)
        async with Engine.open(model, options) as engine:

            async def one(i: int, cancelling: bool = True) -> None:
                prompt = await engine.encode_chat([{"role": "user", "content": prompts[i]}])
                request = GenerationRequest(prompt, max_tokens, SamplingParams(temperature=0.0))
                text = ""
                async with engine.generate(request) as session:
                    async for delta in session:
                        text += delta.text
                        if cancelling and i in cancel and text:
                            break  # leaving the block cancels the session, on every rank
                answers[i] = text

            async with anyio.create_task_group() as tg:
                for i in range(len(prompts)):
                    tg.start_soon(one, i)
            # After the cancellations, the batch still answers as a single engine would.
            for i in sorted(cancel):
                await one(i, cancelling=False)
        print(json.dumps(answers), flush=True)

    anyio.run(run, backend="asyncio")


if __name__ == "__main__":
    main()
