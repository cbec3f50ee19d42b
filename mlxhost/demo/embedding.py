"""What makes a demo model an embedding model: the files a sentence-transformers model has beside
its weights, as Qwen3-Embedding has them (mlxhost.catalog.tasks reads them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

__all__ = ["QUERY_PROMPT", "write_sentence_transformers"]

# Qwen3-Embedding's query instruction, from its config_sentence_transformers.json.
QUERY_PROMPT: Final = (
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
)


def write_sentence_transformers(directory: Path) -> None:
    """Add modules.json, the pooling module's config (last token) and the prompts; declare the
    model Matryoshka-trained in config.json, so that `dimensions` is taken."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    _write(directory / "modules.json", modules)
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    width = config["hidden_size"]
    _write(
        directory / "1_Pooling" / "config.json",
        {"word_embedding_dimension": width, "pooling_mode_lasttoken": True, "include_prompt": True},
    )
    (directory / "2_Normalize").mkdir()
    _write(
        directory / "config_sentence_transformers.json",
        {
            "prompts": {"query": QUERY_PROMPT, "document": ""},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )
    config["is_matryoshka"] = True
    _write(directory / "config.json", config)


def _write(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
