"""The demo models' sizes and their random weights, drawn from a seeded generator.

Most sizes are Llama layouts ("agent" is the tiny one with a long context and a larger
vocabulary); "sliding" is a Gemma 3 layout whose sliding-window layers get
mlx-lm's RotatingKVCache, a cache that cannot be trimmed once the window is full (the prompt
cache's other path); "pipelined" is a Qwen 2 layout, which mlx-lm can split across ranks by
layers (pipeline) as well as by tensor.

numpy and safetensors are imported only when weights are written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

__all__ = ["SIZES", "ModelSize", "model_size", "parameter_count", "weight_shapes", "write_weights"]


@dataclass(frozen=True)
class ModelSize:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    tie_word_embeddings: bool
    dtype: str
    max_position_embeddings: int = 4096
    architecture: str = "llama"  # or "gemma3_text", "qwen2"
    sliding_window: int = 0  # gemma3_text: tokens its sliding layers see (every other layer)
    tokenizer: str = "demo"  # or "agent": see `tokenizer.write_tokenizer`


# Small enough to build and load in well under a second. Untied like the bench size: with tied
# embeddings a random model's greedy output just repeats the last prompt token, which makes a dull
# demo.
TINY: Final = ModelSize(
    vocab_size=1024,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    tie_word_embeddings=False,
    dtype="float32",
)

SIZES: Final[dict[str, ModelSize]] = {
    "tiny": TINY,
    # Big enough that generation speed is dominated by the matmuls rather
    # than by per-token overhead. float32 because mlx's CPU backend runs
    # float16 about three times slower.
    "bench": ModelSize(
        vocab_size=8192,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=1408,
        tie_word_embeddings=False,
        dtype="float32",
    ),
    # The tiny model's sizes and tokenizer, as Gemma 3: every other layer sees only the last
    # 16 tokens, so a chat's prompt fills the window and the cache can no longer be trimmed.
    "sliding": replace(TINY, num_hidden_layers=4, architecture="gemma3_text", sliding_window=16),
    # The tiny model's sizes and tokenizer, as Qwen 2 (biased q, k, v projections), in four
    # layers: what a pipelined worker group splits two and two.
    "pipelined": replace(TINY, num_hidden_layers=4, architecture="qwen2"),
    # The tiny model with one attention head of 64 dimensions: MLX quantizes along a head in groups
    # of 32, 64 or 128, which the tiny model's heads of 16 are too narrow for. Quantized KV
    # (kv_bits) is tested on it.
    "quantizable": replace(TINY, num_attention_heads=1, num_key_value_heads=1),
    # The tiny model, able to hold a real coding agent's prompt: 65,536 positions, and a tokenizer
    # trained on agent-like text whose tokens span words, so Claude Code's first request (76 KB)
    # is about 15,000 tokens rather than the tiny tokenizer's 54,000. Its embeddings make most of
    # its 17 MB; training its tokenizer makes building it take a few seconds.
    "agent": replace(TINY, vocab_size=32768, max_position_embeddings=65536, tokenizer="agent"),
}


def parameter_count(size: str) -> int:
    spec = model_size(size)
    head_dim = spec.hidden_size // spec.num_attention_heads
    q = spec.hidden_size * spec.num_attention_heads * head_dim
    kv = spec.hidden_size * spec.num_key_value_heads * head_dim
    attention = 2 * q + 2 * kv
    mlp = 3 * spec.hidden_size * spec.intermediate_size
    norms = 2 * spec.hidden_size
    if spec.architecture == "gemma3_text":
        norms = 4 * spec.hidden_size + 2 * head_dim
    if spec.architecture == "qwen2":
        attention += (q + 2 * kv) // spec.hidden_size  # the q, k and v biases
    embeddings = spec.vocab_size * spec.hidden_size
    heads = 0 if spec.tie_word_embeddings else embeddings
    layers = spec.num_hidden_layers * (attention + mlp + norms)
    return embeddings + layers + spec.hidden_size + heads


def model_size(size: str) -> ModelSize:
    try:
        return SIZES[size]
    except KeyError:
        raise ValueError(f"unknown size {size!r}, expected one of {sorted(SIZES)}") from None


def weight_shapes(spec: ModelSize) -> list[tuple[str, tuple[int, ...]]]:
    # Hugging Face Llama names and layouts, which mlx_lm.models.llama loads
    # as is (Linear weights are [out_features, in_features]).
    h, i = spec.hidden_size, spec.intermediate_size
    head_dim = h // spec.num_attention_heads
    q, kv = spec.num_attention_heads * head_dim, spec.num_key_value_heads * head_dim
    shapes: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (spec.vocab_size, h))]
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}"
        shapes += [
            (f"{p}.input_layernorm.weight", (h,)),
            (f"{p}.self_attn.q_proj.weight", (q, h)),
            (f"{p}.self_attn.k_proj.weight", (kv, h)),
            (f"{p}.self_attn.v_proj.weight", (kv, h)),
            (f"{p}.self_attn.o_proj.weight", (h, q)),
            *_qwen_biases(spec, p, q, kv),
            (f"{p}.post_attention_layernorm.weight", (h,)),
            *_gemma_norms(spec, p, head_dim),
            (f"{p}.mlp.gate_proj.weight", (i, h)),
            (f"{p}.mlp.up_proj.weight", (i, h)),
            (f"{p}.mlp.down_proj.weight", (h, i)),
        ]
    shapes.append(("model.norm.weight", (h,)))
    if not spec.tie_word_embeddings:
        shapes.append(("lm_head.weight", (spec.vocab_size, h)))
    return shapes


def _qwen_biases(spec: ModelSize, prefix: str, q: int, kv: int) -> list[tuple[str, tuple[int, ...]]]:
    if spec.architecture != "qwen2":
        return []
    return [
        (f"{prefix}.self_attn.q_proj.bias", (q,)),
        (f"{prefix}.self_attn.k_proj.bias", (kv,)),
        (f"{prefix}.self_attn.v_proj.bias", (kv,)),
    ]


def _gemma_norms(spec: ModelSize, prefix: str, head_dim: int) -> list[tuple[str, tuple[int, ...]]]:
    if spec.architecture != "gemma3_text":
        return []
    return [
        (f"{prefix}.pre_feedforward_layernorm.weight", (spec.hidden_size,)),
        (f"{prefix}.post_feedforward_layernorm.weight", (spec.hidden_size,)),
        (f"{prefix}.self_attn.q_norm.weight", (head_dim,)),
        (f"{prefix}.self_attn.k_norm.weight", (head_dim,)),
    ]


def write_weights(path: Path, spec: ModelSize, seed: int) -> None:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(seed)
    dtype = np.dtype(spec.dtype)
    tensors: dict[str, Any] = {}
    # Drawn in a fixed order from one generator, so the bytes depend only
    # on (spec, seed). Norms start as a freshly initialised model's: a scale of one (Gemma
    # stores the scale less one).
    norm = np.zeros if spec.architecture == "gemma3_text" else np.ones
    for name, shape in weight_shapes(spec):
        if name.endswith(".bias"):
            tensors[name] = np.zeros(shape, dtype=dtype)
        elif len(shape) == 1:
            tensors[name] = norm(shape, dtype=dtype)
        else:
            values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            tensors[name] = values.astype(dtype)
    # Written by us rather than save_file, which creates the file 0600; a
    # shared model directory should follow the umask like its other files.
    path.write_bytes(save(tensors, metadata={"format": "pt"}))
