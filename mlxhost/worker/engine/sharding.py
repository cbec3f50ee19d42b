"""Whether a model's architecture splits across ranks the way its configuration asks.

Run by the host before it starts anything (`python -m mlxhost.worker.engine.sharding PATH MODE`): it
reads the model's config and builds the model lazily, without its weights, and asks mlx-lm's own
tests for what `sharded_load` can do. Exit status 0: it can; 1: it cannot, and the last line on
stdout says why.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["sharding_problem"]


def sharding_problem(model_path: Path, sharding: str) -> str | None:
    """Why `model_path` cannot be split by `sharding` ("tensor" or "pipeline"); None if it can."""
    from mlx_lm.utils import load_model

    model, config = load_model(model_path, lazy=True, strict=False)
    kind = config.get("model_type", "?")
    if sharding == "tensor" and not hasattr(model, "shard"):
        return f"mlx-lm cannot split the '{kind}' architecture by tensor; try sharding = \"pipeline\""
    if sharding == "pipeline":
        if not hasattr(getattr(model, "model", None), "pipeline"):
            return f"mlx-lm cannot pipeline the '{kind}' architecture; try sharding = \"tensor\""
        if not (model_path / "model.safetensors.index.json").is_file():
            # sharded_load picks each stage's weight files from the index.
            return "pipeline sharding needs the model's model.safetensors.index.json, which it lacks"
    return None


if __name__ == "__main__":
    problem = sharding_problem(Path(sys.argv[1]), sys.argv[2])
    if problem:
        print(problem, flush=True)
        sys.exit(1)
