"""Scripted demo models: real mlx-lm Llama weights, set (not trained) to answer with a fixed script.

A random model cannot show that an agent works: its answer is noise, it rarely ends a turn on its
own, and it never calls a tool. A scripted model is a demo model (its tokenizer, template and
context) whose weights are written so that, whatever the prompt and at any temperature,

    before any tool result in the conversation:  `first`  (a text, or a tool call), then the end
    once a tool result is in it:                  `after`  (a text), then the end

Each piece of a script is one token, added to the base tokenizer (so the script's text is exact
and no token repeats: the next token follows from the current one alone). The weights, on the
tiny Llama shape (hidden size 64):

- Embeddings are basis vectors: e0 for every ordinary token, e1 for the tool turn's marker
  (`<|tool|>`), e3.. for the script's tokens.
- Layer 0 has one attention head that finds the marker: the query of e0 meets the key of e1 with a
  score of 30, every other key scores 0. Its value writes e2 ("a tool result was seen") into the
  stream. Query and key sit on the slowest rotary pair, and `rope_theta` is 1e12, so position
  does not change the score. Every other projection, and both MLPs, are zero.
- The head reads the stream: from e0 the first token of `first` (or, with e2 beside it, of
  `after`), from each script token the next, and from the last one the end-of-turn token. Every
  margin is 40 logits or more, so sampling at temperature 1 follows the script too.

Nothing is trained and nothing is random. numpy, safetensors and tokenizers are imported only
when a model is written.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["CLAUDE_CODE_BASH", "CODEX_EXEC", "HELLO", "Script", "make_scripted_model"]

TOOL_MARKER: Final = "<|tool|>"
END_OF_TURN: Final = "<|end|>"
ROPE_THETA: Final = 1e12
_OTHER, _MARKER, _SEEN, _FIRST_SCRIPT_DIM = 0, 1, 2, 3
_STEP = 5.0  # logit per unit of a normalised basis vector (x8 after the norm): 40
_START = 8.0  # the first piece of `first`: 64 from e0, 45 beside e2
_AFTER_BASE, _AFTER_SEEN = 3.0, 15.0  # the first piece of `after`: 24 from e0, 102 beside e2


@dataclass(frozen=True)
class Script:
    """What a scripted model answers: `first` until the conversation holds a tool result, then
    `after`. Each piece is one token; a piece that is already a token of the tokenizer (a tool
    call's tags) is that token."""

    name: str
    first: tuple[str, ...]
    after: tuple[str, ...] = ()


HELLO: Final = Script("hello", ("Hello from mlxhost.",))
# The tool calls Claude Code and Codex can run, in the demo template's form (<tool_call> JSON).
CLAUDE_CODE_BASH: Final = Script(
    "claude-code-bash",
    ("<tool_call>", '\n{"name": "Bash", "arguments": {"command": "echo mlxhost-tool-ok"}}\n', "</tool_call>"),
    ("The command ran.",),
)
CODEX_EXEC: Final = Script(
    "codex-exec",
    (
        "<tool_call>",
        '\n{"name": "exec_command", "arguments": {"cmd": "echo mlxhost-tool-ok"}}\n',
        "</tool_call>",
    ),
    ("The command ran.",),
)


def make_scripted_model(base: Path, path: Path, script: Script) -> Path:
    """Write a model at `path` that answers `script`, from the demo model at `base` (a Llama
    demo size); the directory appears whole, by a rename."""
    path = Path(path)
    if (path / "config.json").exists():
        config = json.loads((path / "config.json").read_text())
        if config.get("mlxhost_script") == _marker(script):
            return path
        raise FileExistsError(f"{path} exists and is not the {script.name!r} scripted model")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    shutil.copytree(base, tmp)
    try:
        _write(tmp, script)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _marker(script: Script) -> dict[str, Any]:
    return {"name": script.name, "first": list(script.first), "after": list(script.after)}


def _write(folder: Path, script: Script) -> None:
    import numpy as np
    from safetensors.numpy import load_file, save
    from tokenizers import AddedToken, Tokenizer

    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ValueError(
            f"a scripted model is made from a Llama demo model, not {config.get('model_type')!r}"
        )
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    pieces = [*script.first, *script.after]
    new = [p for p in dict.fromkeys(pieces) if tokenizer.token_to_id(p) is None]
    tokenizer.add_tokens([AddedToken(p, normalized=False, special=False) for p in new])
    tokenizer.save(str(folder / "tokenizer.json"))
    ids = {p: tokenizer.token_to_id(p) for p in pieces}
    if len(set(ids.values())) != len(pieces):
        raise ValueError(f"script {script.name!r}: every piece must be a token of its own, used once")
    _add_to_tokenizer_config(folder, {ids[p]: p for p in new})

    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = hidden // heads
    vocab = tokenizer.get_vocab_size()
    if _FIRST_SCRIPT_DIM + len(pieces) > hidden:
        raise ValueError(f"script {script.name!r} is longer than the model's {hidden} dimensions allow")
    weights = load_file(str(folder / "model.safetensors"))
    out = {name: np.zeros_like(value) for name, value in weights.items()}
    for name, value in weights.items():
        if name.endswith("norm.weight"):
            out[name] = np.ones_like(value)

    embed = np.zeros((vocab, hidden), dtype=np.float32)
    embed[:, _OTHER] = 1.0
    marker = tokenizer.token_to_id(TOOL_MARKER)
    embed[marker] = np.eye(hidden, dtype=np.float32)[_MARKER]
    for i, piece in enumerate(pieces):
        embed[ids[piece]] = np.eye(hidden, dtype=np.float32)[_FIRST_SCRIPT_DIM + i]
    out["model.embed_tokens.weight"] = embed

    slow = head_dim // 2 - 1  # the slowest rotary pair's first dimension, in head 0
    q = out["model.layers.0.self_attn.q_proj.weight"]
    q[slow, _OTHER] = 15.0 / 8.0  # x8 after the norm: 15
    k = out["model.layers.0.self_attn.k_proj.weight"]
    k[slow, _MARKER] = 1.0  # 8 after the norm; 15 * 8 / sqrt(16) = 30
    v = out["model.layers.0.self_attn.v_proj.weight"]
    v[0, _MARKER] = 1.0 / 8.0
    o = out["model.layers.0.self_attn.o_proj.weight"]
    o[_SEEN, 0] = 1.0

    head = np.zeros((vocab, hidden), dtype=np.float32)
    end = tokenizer.token_to_id(END_OF_TURN)
    head[ids[script.first[0]], _OTHER] = _START
    for chain in (c for c in (script.first, script.after) if c):
        for here, following in zip(chain, [*chain[1:], None], strict=True):
            head[end if following is None else ids[following], _FIRST_SCRIPT_DIM + pieces.index(here)] = _STEP
    if script.after:
        head[ids[script.after[0]], _OTHER] = _AFTER_BASE
        head[ids[script.after[0]], _SEEN] = _AFTER_SEEN
    out["lm_head.weight"] = head

    (folder / "model.safetensors").write_bytes(save(out, metadata={"format": "pt"}))
    config.update(vocab_size=vocab, rope_theta=ROPE_THETA, mlxhost_script=_marker(script))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def _add_to_tokenizer_config(folder: Path, added: dict[int, str]) -> None:
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    decoder = config.setdefault("added_tokens_decoder", {})
    for token_id, content in added.items():
        decoder[str(token_id)] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": False,
        }
    path.write_text(json.dumps(config, indent=2) + "\n")
