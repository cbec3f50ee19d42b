"""Encoder embedding models (BERT, XLM-RoBERTa, ModernBERT: e5, bge, nomic's ModernBERT embedders),
loaded through mlx-embeddings, the optional extra `mlxhost[embeddings]`.

mlx-lm cannot load a bidirectional encoder, so an encoder has its own load path: mlx-embeddings
builds the model from config.json and its safetensors, and mlx-lm's tokenizer loader reads the
tokenizer (the same wrapper a decoder model's tokenizer is, so the engine's Tokenizer takes it as
it is; a BERT tokenizer's `encode` wraps a text in [CLS] ... [SEP] itself).

`EncoderPooler.embed` has DecoderPooler's signature (pooled.py). Inputs of one pass are padded on
the right to the longest, and an attention mask keeps every token from attending to padding, so
an input's vector is the one it has alone, to float tolerance. The pad id is the model's own:
XLM-RoBERTa numbers positions by counting the tokens that are not its pad id.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from mlxhost.catalog.tasks import SERVED_ENCODERS, model_type_of

__all__ = ["EncoderNotSupported", "EncoderPooler", "NoGeneration", "load_encoder"]



class EncoderNotSupported(Exception):
    """mlx-embeddings cannot run this encoder (its architecture, or a task it has no head for)."""


class EncoderPooler:
    """Embeddings from an encoder model that mlx-embeddings loaded."""

    def __init__(self, model: Any, config: dict[str, Any]) -> None:
        self.model = model
        self.model_type = model_type_of(config)
        self.hidden_size = int(config["hidden_size"])
        vocab = int(config.get("vocab_size") or 0)
        pad = config.get("pad_token_id")
        # An out-of-vocabulary pad id (ModernBERT's config names one past a small vocabulary in
        # some conversions) would read past the embedding table; padding is masked anyway.
        self.pad_id = int(pad) if isinstance(pad, int) and 0 <= pad < vocab else 0
        self.context_length = _context_length(config, self.model_type, self.pad_id)
        self.dtype = _weight_dtype(model)

    def hidden(self, rows: list[list[int]]) -> tuple[mx.array, mx.array]:
        """Final hidden states [rows, longest, width] (float32) of right-padded inputs, and the
        padding mask [rows, longest] (1.0 on real tokens)."""
        longest = max(len(r) for r in rows)
        padded = np.full((len(rows), longest), self.pad_id, dtype=np.int32)
        mask = np.zeros((len(rows), longest), dtype=np.float32)
        for at, row in enumerate(rows):
            padded[at, : len(row)] = row
            mask[at, : len(row)] = 1.0
        ids = mx.array(padded)
        # In the weights' dtype: ModernBERT casts its additive mask to the dtype of the mask given.
        attention = mx.array(mask).astype(self.dtype)
        if self.model_type == "modernbert":
            # Its Model pools by its own classifier_pooling unless it is a masked LM: read the
            # per-token states from the body instead.
            states = self.model.model(ids, attention_mask=attention, return_dict=True)["last_hidden_state"]
        else:
            # By keyword: bert's second positional argument is token_type_ids, xlm_roberta's the mask.
            states = self.model(ids, attention_mask=attention).last_hidden_state
        return states.astype(mx.float32), mx.array(mask)

    def embed(self, rows: list[list[int]], pooling: str) -> mx.array:
        """One L2-normalised vector per input, float32 [rows, width]."""
        hidden, mask = self.hidden(rows)
        if pooling == "cls":
            pooled = hidden[:, 0]
        elif pooling == "last":
            lengths = mask.sum(axis=1).astype(mx.int32)
            pooled = hidden[mx.arange(len(rows)), lengths - 1]
        else:  # mean over the real tokens only
            pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        norm = mx.sqrt((pooled * pooled).sum(axis=-1, keepdims=True))
        return pooled / mx.maximum(norm, 1e-12)

    def score(self, rows: list[list[int]], yes: int, no: int) -> mx.array:
        """An encoder has no next-token head: a cross-encoder reranker is not served this way."""
        raise EncoderNotSupported("an encoder model embeds; it cannot score yes/no as a reranker")


class NoGeneration:
    """What the generation thread steps for an encoder: nothing. The thread's loop (batching.py)
    still runs its pooled passes, on this stream, made in that thread."""

    def __init__(self) -> None:
        self.stream = mx.new_stream(mx.default_device())

    def close(self) -> None:
        mx.synchronize(self.stream)


def load_encoder(path: Path) -> tuple[EncoderPooler, Any]:
    """The pooler of the encoder model at `path` and its tokenizer (mlx-lm's TokenizerWrapper).

    Raises ImportError when mlx-embeddings is not installed, EncoderNotSupported when it has no
    module for the model's architecture.
    """
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    model_type = model_type_of(config)
    if model_type not in SERVED_ENCODERS:
        raise EncoderNotSupported(
            f"mlx-embeddings cannot run a {config.get('model_type')!r} encoder; it runs "
            + ", ".join(sorted(SERVED_ENCODERS))
        )
    # Imported here: an optional extra, and a heavy import (transformers, mlx-vlm).
    from mlx_embeddings.utils import load_model
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    # load_model, not mlx_embeddings.load: a local directory only (no hub download), and the
    # tokenizer from mlx-lm rather than mlx-embeddings' own wrapper.
    model = load_model(path)
    return EncoderPooler(model, config), load_tokenizer(path)


def _context_length(config: dict[str, Any], model_type: str, pad_id: int) -> int | None:
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int) or positions <= 0:
        return None
    if model_type == "xlm_roberta":
        # Its positions start after the pad id (RoBERTa's numbering): 514 rows hold 512 tokens.
        return positions - pad_id - 1
    return positions


def _weight_dtype(model: Any) -> Any:
    from mlx.utils import tree_flatten

    for _, value in tree_flatten(model.parameters()):
        if isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating):
            return value.dtype
    return mx.float32
