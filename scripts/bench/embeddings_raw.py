"""The raw path of --embeddings: the embedding model loaded with `mlx_lm.load` in this process, and
its forward pass with no server: final hidden states of right-padded inputs (`model.model`), the
last token's pooled, L2-normalised, evaluated and copied out to numpy (as the worker must, to
answer).

A request's inputs are cut into passes the way the worker cuts them: the same queue
(`mlxhost.worker.engine.pooled_work.PooledQueue`, which imports no MLX) with the worker's default
budget of padded tokens and rows a pass (`EngineOptions`). The forward itself is written here,
not borrowed from the worker's `DecoderPooler`: the baseline is mlx-lm's model, whatever mlxhost
does around it. Only `hidden_body` is the worker's: where mlx-lm keeps the model's body.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx.utils import tree_flatten

from mlxhost.worker.engine.options import EngineOptions
from mlxhost.worker.engine.pooled import hidden_body
from mlxhost.worker.engine.pooled_work import PooledQueue, PooledWork

__all__ = ["PASS_ROWS", "PASS_TOKENS", "RawEmbedder", "RawPasses"]

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(EngineOptions)}
PASS_TOKENS: int = _DEFAULTS["pooled_batch_tokens"]  # padded tokens (rows times the longest) a pass
PASS_ROWS: int = _DEFAULTS["pooled_batch_rows"]


@dataclass
class RawPasses:
    """What the raw path computed, to set beside the worker's /health `pooled` counters."""

    passes: int = 0
    inputs: int = 0
    tokens: int = 0
    padded_tokens: int = 0


class RawEmbedder:
    """mlx-lm's model and tokenizer in this process; every MLX call in the thread that made it."""

    def __init__(self, path: Path) -> None:
        began = time.perf_counter()
        self.model, self.tokenizer = mlx_lm.load(str(path))
        self.body = hidden_body(self.model)
        mx.eval(self.model.parameters())
        self.load_s = time.perf_counter() - began
        self.parameters = sum(v.size for _, v in tree_flatten(self.model.parameters()))
        self.width = int(self.body.embed_tokens.weight.shape[-1])
        self.counters = RawPasses()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids))

    def embed(self, inputs: Sequence[list[int]]) -> np.ndarray:
        """One request's vectors, float32 [inputs, width], in the inputs' order: its passes as the
        worker would make them, one after the other."""
        queue = PooledQueue(threading.Event())
        work = PooledWork("embed", [list(ids) for ids in inputs])
        queue.submit(work)
        out = np.empty((len(inputs), self.width), dtype=np.float32)
        while rows := queue.next_batch(PASS_TOKENS, PASS_ROWS):
            vectors = self.forward([row.tokens for row in rows])
            for at, row in enumerate(rows):
                out[row.index] = vectors[at]
        return out

    def forward(self, rows: Sequence[list[int]]) -> np.ndarray:
        """One pass: the inputs padded on the right to the longest, the last real token's hidden
        state of each, normalised."""
        longest = max(len(r) for r in rows)
        padded = np.zeros((len(rows), longest), dtype=np.int32)
        for at, row in enumerate(rows):
            padded[at, : len(row)] = row
        hidden = self.body(mx.array(padded)).astype(mx.float32)
        last = hidden[mx.arange(len(rows)), mx.array([len(r) - 1 for r in rows])]
        vectors = last / mx.maximum(mx.sqrt((last * last).sum(axis=-1, keepdims=True)), 1e-12)
        mx.eval(vectors)
        counters = self.counters
        counters.passes += 1
        counters.inputs += len(rows)
        counters.tokens += sum(len(r) for r in rows)
        counters.padded_tokens += len(rows) * longest
        return np.array(vectors)
