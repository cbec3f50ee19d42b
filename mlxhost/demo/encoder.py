"""A tiny BERT embedding model with random weights, built offline: what tests of the encoder path
(mlx-embeddings, the optional extra `mlxhost[embeddings]`) load in place of e5 or bge.

The directory holds what a sentence-transformers BERT checkpoint holds: config.json (model_type
"bert"), model.safetensors with the tensor names mlx-embeddings' bert module loads (those of
Hugging Face's BertModel), a WordPiece tokenizer.json that wraps each text in [CLS] ... [SEP],
its tokenizer_config.json, and modules.json with a Pooling module (mean pooling by default, as e5
pools; "cls" as bge does). The tokenizer is trained on the demo corpus (corpus.py), so nothing is
downloaded. Like the rest of mlxhost.demo, nothing here imports MLX.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from mlxhost.demo.corpus import corpus

__all__ = ["ENCODER_CONFIG", "SPECIAL", "make_encoder_model"]

# [PAD] first: BERT's pad id is 0 (config.json's pad_token_id).
SPECIAL: Final = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ENCODER_CONFIG: Final[dict[str, Any]] = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
    "pad_token_id": 0,
    "torch_dtype": "float32",
}
VOCAB_SIZE: Final = 400


def make_encoder_model(path: Path, pooling: str = "mean", seed: int = 0) -> Path:
    """Write the tiny BERT model's directory at `path` (created if missing); returns `path`."""
    if pooling not in ("mean", "cls"):
        raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer()
    tokenizer.save(str(path / "tokenizer.json"))
    config = dict(ENCODER_CONFIG, vocab_size=tokenizer.get_vocab_size())
    _write_json(path / "config.json", config)
    _write_json(
        path / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "mask_token": "[MASK]",
            "model_max_length": config["max_position_embeddings"],
            "do_lower_case": True,
        },
    )
    _write_weights(path / "model.safetensors", config, seed)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    _write_json(path / "modules.json", modules)
    _write_json(
        path / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": config["hidden_size"],
            "pooling_mode_cls_token": pooling == "cls",
            "pooling_mode_mean_tokens": pooling == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_lasttoken": False,
        },
    )
    (path / "2_Normalize").mkdir(exist_ok=True)
    return path


def _train_tokenizer() -> Any:
    # Imported here, as the rest of mlxhost.demo does: a process that only wants a path stays cheap.
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL), limit_alphabet=200, show_progress=False
    )
    # The corpus is fixed (its own seed), and so is the vocabulary trained on it.
    tokenizer.train_from_iterator(corpus(words=4000), trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return tokenizer


def _weight_shapes(config: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    """Hugging Face BertModel's tensor names, which mlx-embeddings' bert.Model loads as they are."""
    width, inner = config["hidden_size"], config["intermediate_size"]
    shapes: list[tuple[str, tuple[int, ...]]] = [
        ("embeddings.word_embeddings.weight", (config["vocab_size"], width)),
        ("embeddings.position_embeddings.weight", (config["max_position_embeddings"], width)),
        ("embeddings.token_type_embeddings.weight", (config["type_vocab_size"], width)),
        ("embeddings.LayerNorm.weight", (width,)),
        ("embeddings.LayerNorm.bias", (width,)),
    ]
    linears = {
        "attention.self.query": (width, width),
        "attention.self.key": (width, width),
        "attention.self.value": (width, width),
        "attention.output.dense": (width, width),
        "intermediate.dense": (inner, width),
        "output.dense": (width, inner),
    }
    for layer in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{layer}"
        for name, shape in linears.items():
            shapes += [(f"{prefix}.{name}.weight", shape), (f"{prefix}.{name}.bias", (shape[0],))]
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes += [(f"{prefix}.{norm}.weight", (width,)), (f"{prefix}.{norm}.bias", (width,))]
    shapes += [("pooler.dense.weight", (width, width)), ("pooler.dense.bias", (width,))]
    return shapes


def _write_weights(path: Path, config: dict[str, Any], seed: int) -> None:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(seed)
    tensors: dict[str, Any] = {}
    for name, shape in _weight_shapes(config):
        if name.endswith("LayerNorm.weight"):
            tensors[name] = np.ones(shape, dtype=np.float32)
        elif name.endswith("LayerNorm.bias"):
            tensors[name] = np.zeros(shape, dtype=np.float32)
        else:
            # Biases drawn too: a zero bias would hide a mask that lets padding leak in less.
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.2)
    # Written rather than save_file (which creates the file 0600), as demo/weights.py does.
    path.write_bytes(save(tensors, metadata={"format": "pt"}))


def _write_json(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
