"""Build an offline mlx-lm demo model with deterministic random weights.

python scripts/make_tiny_model.py DIR [--size tiny|bench|sliding|pipelined|agent] [--seed N]
                                      [--family json_tools|qwen3_coder|glm47|...]
                                      [--task generate|embed|rerank]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    from mlxhost import demo
except ImportError:
    # Run straight from a checkout, without the package installed.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from mlxhost import demo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where to write the model")
    parser.add_argument("--size", choices=sorted(demo.SIZES), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--family",
        choices=sorted(demo.families.FAMILIES),
        default=demo.DEFAULT_FAMILY,
        help="the tool-call family whose chat template and special tokens the model gets",
    )
    parser.add_argument(
        "--task",
        choices=["generate", "embed", "rerank"],
        default="generate",
        help="embed: an embedding model (sentence-transformers files); rerank: a reranker's weights",
    )
    args = parser.parse_args(argv)

    try:
        path = demo.make_model(args.directory, args.size, args.seed, args.family, args.task)
    except FileExistsError as exc:
        parser.error(str(exc))
    print(path)
    print(f"{demo.parameter_count(args.size):,} parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
