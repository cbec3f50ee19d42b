"""A copy model built, not trained: the agent demo model's tokenizer and template, with Llama
weights set so that the model continues its context the way the context itself went on before
(an induction circuit over the last `CONTEXT` tokens). The speculation bench's fallback for a
machine where LoRA cannot teach a demo model to copy in reasonable time (see `bench.speculation`).

What it computes, in two layers (every other projection, and both MLPs, are zero):

- Embeddings: a constant dimension, and each token's code (a random unit vector of `CODE` dims) in
  the C block.
- Layer 0: `CONTEXT` heads, head d attending from every position to the one d before it (by their
  rotary positions alone: the query and key sit on the fast rotary pairs, the query turned back by
  d steps), copying that token's code into block P_d. (Layer 1's other heads are zero.)
- Layer 1: one head whose query is (the current token, the one before, ...) and whose key is
  (P_1, P_2, ...) at every earlier position, on the slow rotary pairs (`ROPE_THETA` makes them
  turn less than a tenth of a radian over the whole context): a position scores by how many of
  the tokens before it are the last tokens, the nearer ones weighing more (32, 16, 8, 4, 2, 1), so that the
  longest match of the context's end wins, as prompt lookup's does. It copies that position's code
  into block O.
- The head reads O against every token's code: the next token is the one that followed the same
  tokens earlier. Where nothing matches it writes something, as a model does.

So on an edit request it re-emits the file from the prompt (without the edits, which it cannot
read), and on a prompt with nothing to copy it answers with pieces of the prompt. Its cost per token
is a real model's of its shape: 192 dimensions, six heads of 256, the agent demo's 32,768-token head.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np

CONTEXT = 6  # tokens matched
HEADS = 6  # CONTEXT heads in layer 0, one in layer 1; HIDDEN is a multiple of it (transformers checks)
CODE = 21  # dimensions of a token's code: CONTEXT codes fill the 128 slow dimensions of a head
HIDDEN = 192
HEAD_DIM = 256
ROPE_THETA = 1e12
POSITION_PAIRS = 24  # the fastest rotary pairs, which find the position d before
POSITION_SCORE = 15.3  # query and key length on each pair: a margin of 20 logits over the neighbours
MATCH_SCORE = 20.0  # attention logits per unit of match: the current token counts 32, the one before 16...
WEIGHTS = tuple(2.0 ** (CONTEXT - 1 - back) for back in range(CONTEXT))  # 32, 16, ... 1: longest suffix first
HEAD_SCORE = 40.0  # the logit of a code read exactly
JITTER = 6.0  # logits, by the distance on the two fastest rotary pairs: matches that tie do not blend
SEED = 29
MARKER = {"copier": 7, "context": CONTEXT, "code": CODE, "heads": HEADS, "seed": SEED}


def build_copier(base: Path, path: Path) -> Path:
    """The copy model at `path`, made from the demo model at `base` (its tokenizer and template)
    once; the directory appears whole, by a rename."""
    config_path = path / "config.json"
    if config_path.is_file() and json.loads(config_path.read_text()).get("mlxhost_bench_copier") == MARKER:
        return path
    if path.exists():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.parent / f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}"
    shutil.copytree(base, partial)
    try:
        _write(partial)
        os.replace(partial, path)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return path


def _write(folder: Path) -> None:
    from safetensors.numpy import save

    config = json.loads((folder / "config.json").read_text())
    vocab = int(config["vocab_size"])
    config.update(
        hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=HEADS, num_key_value_heads=HEADS,
        head_dim=HEAD_DIM, intermediate_size=16, rope_theta=ROPE_THETA, tie_word_embeddings=False,
        mlxhost_bench_copier=MARKER,
    )  # fmt: skip
    config.pop("mlxhost_demo", None)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "model.safetensors").write_bytes(save(weights(vocab), metadata={"format": "pt"}))


def weights(vocab: int) -> dict[str, Any]:
    """Every tensor of the model, by its Hugging Face Llama name."""
    rng = np.random.default_rng(SEED)
    codes = rng.standard_normal((vocab, CODE)).astype(np.float32)
    codes /= np.linalg.norm(codes, axis=1, keepdims=True)
    c = 1  # the C block's first dimension; dimension 0 is the constant
    p = [c + CODE * (1 + d) for d in range(CONTEXT)]  # P_1..P_CONTEXT
    o = c + CODE * (1 + CONTEXT)
    assert o + CODE <= HIDDEN
    width = HEADS * HEAD_DIM
    tensors: dict[str, Any] = {}

    embed = np.zeros((vocab, HIDDEN), np.float32)
    embed[:, 0] = 1.0
    embed[:, c : c + CODE] = codes
    tensors["model.embed_tokens.weight"] = embed

    # Layer 0: the input is one constant and one code, each of length one, normalised.
    g0 = np.sqrt(HIDDEN / 2.0)
    half = HEAD_DIM // 2
    theta = ROPE_THETA ** (-np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    q0, k0, v0, o0 = (np.zeros(shape, np.float32) for shape in [(width, HIDDEN)] * 3 + [(HIDDEN, width)])
    for head in range(CONTEXT):
        back, row = head + 1, head * HEAD_DIM
        for pair in range(POSITION_PAIRS):
            q0[row + pair, 0] = POSITION_SCORE * np.cos(-theta[pair] * back) / g0
            q0[row + half + pair, 0] = POSITION_SCORE * np.sin(-theta[pair] * back) / g0
            k0[row + pair, 0] = POSITION_SCORE / g0
        for m in range(CODE):
            v0[row + m, c + m] = 1.0 / g0
            o0[p[head] + m, row + m] = 1.0
    _layer(tensors, 0, q0, k0, v0, o0)

    # Layer 1: the constant, the code and CONTEXT codes from layer 0.
    g1 = np.sqrt(HIDDEN / (2.0 + CONTEXT))
    slow = [pair for pair in range(half) if theta[pair] * 65536 < 0.1]
    slots = [d for pair in slow for d in (pair, pair + half)]  # the head's dimensions that never turn
    assert len(slots) >= CONTEXT * CODE
    q1, k1, v1, o1 = (np.zeros(shape, np.float32) for shape in [(width, HIDDEN)] * 3 + [(HIDDEN, width)])
    length = np.sqrt(MATCH_SCORE * np.sqrt(HEAD_DIM))  # score = length² x code . code / sqrt(HEAD_DIM)
    queries = [c, *p[: CONTEXT - 1]]  # this token, the one before, ...
    for block in range(CONTEXT):
        for m in range(CODE):
            slot = slots[block * CODE + m]
            q1[slot, queries[block] + m] = WEIGHTS[block] * length / g1
            k1[slot, p[block] + m] = length / g1
    # The two fastest pairs add about JITTER x cos(distance): a pseudo-random few logits, unlike for any two
    # positions, so that equal matches (a context that occurs twice) give one winner, not a blend
    # of two codes that reads as neither token.
    jitter = np.sqrt(JITTER * np.sqrt(HEAD_DIM))
    for pair in (0, 1):  # two frequencies: two positions' sums coincide less often than one cosine's
        q1[pair, 0] = -jitter / np.sqrt(2.0) / g1  # half a turn: a position is not its own best match
        k1[pair, 0] = jitter / np.sqrt(2.0) / g1
    for m in range(CODE):
        v1[m, c + m] = 1.0 / g1
        o1[o + m, m] = 1.0
    _layer(tensors, 1, q1, k1, v1, o1)

    tensors["model.norm.weight"] = np.ones(HIDDEN, np.float32)
    g2 = np.sqrt(HIDDEN / (3.0 + CONTEXT))
    head = np.zeros((vocab, HIDDEN), np.float32)
    head[:, o : o + CODE] = HEAD_SCORE * codes / g2
    tensors["lm_head.weight"] = head
    return tensors


def _layer(tensors: dict[str, Any], n: int, q: Any, k: Any, v: Any, o: Any) -> None:
    prefix = f"model.layers.{n}"
    tensors[f"{prefix}.input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
    tensors[f"{prefix}.post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
    tensors[f"{prefix}.self_attn.q_proj.weight"] = q
    tensors[f"{prefix}.self_attn.k_proj.weight"] = k
    tensors[f"{prefix}.self_attn.v_proj.weight"] = v
    tensors[f"{prefix}.self_attn.o_proj.weight"] = o
    tensors[f"{prefix}.mlp.gate_proj.weight"] = np.zeros((16, HIDDEN), np.float32)
    tensors[f"{prefix}.mlp.up_proj.weight"] = np.zeros((16, HIDDEN), np.float32)
    tensors[f"{prefix}.mlp.down_proj.weight"] = np.zeros((HIDDEN, 16), np.float32)
