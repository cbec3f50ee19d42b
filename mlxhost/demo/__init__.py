"""Offline demo models: real mlx-lm model directories with random weights.

Nothing here downloads anything. A model directory is built from a seeded
random generator and a byte-level BPE tokenizer trained on text that this
module generates itself, so tests, benchmarks and demos get a model that
``mlx_lm.load`` treats exactly like a real Llama checkpoint.

Heavy libraries (numpy, safetensors, tokenizers) are imported inside the
functions that need them, and mlx is never imported: processes that only
want a path must stay cheap to start.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "BOS_TOKEN",
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SIZES",
    "SPECIAL_TOKENS",
    "ModelSize",
    "default_cache_dir",
    "ensure_demo_model",
    "make_model",
    "parameter_count",
]

# Part of the cache directory name and of the marker in config.json: bump it
# whenever the files this module writes change, so stale caches are ignored.
FORMAT_VERSION: Final = 1


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


SIZES: Final[dict[str, ModelSize]] = {
    # Small enough to build and load in well under a second. Untied like the
    # bench size: with tied embeddings a random model's greedy output just
    # repeats the last prompt token, which makes a dull demo.
    "tiny": ModelSize(
        vocab_size=1024,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        tie_word_embeddings=False,
        dtype="float32",
    ),
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
}

PAD_TOKEN: Final = "<|pad|>"
BOS_TOKEN: Final = "<|begin|>"
EOS_TOKEN: Final = "<|end|>"
# A token's id is its position here: the tokenizer trainer assigns special
# tokens the first ids, in order.
SPECIAL_TOKENS: Final = (
    PAD_TOKEN,
    BOS_TOKEN,
    EOS_TOKEN,
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
)
_ROLES: Final = ("system", "user", "assistant")

# Renders e.g. "<|begin|><|user|>\nhi<|end|>\n<|assistant|>\n". The end of
# turn marker doubles as eos, so a reply stops where a turn would end.
# Content may also be a list of OpenAI-style parts; only text parts count.
CHAT_TEMPLATE: Final = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unsupported role: ' + message['role']) }}"
    "{% endif %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_WEIGHTS_FILE: Final = "model.safetensors"
_FILES: Final = (
    "config.json",
    "generation_config.json",
    _WEIGHTS_FILE,
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if base and os.path.isabs(base):
        return Path(base) / "mlxhost"
    return Path.home() / ".cache" / "mlxhost"


def ensure_demo_model(cache_dir: Path | None = None) -> Path:
    """Return the tiny demo model directory, building it on first use."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return make_model(root / f"demo-tiny-v{FORMAT_VERSION}", "tiny", seed=0)


def parameter_count(size: str) -> int:
    spec = _size(size)
    head_dim = spec.hidden_size // spec.num_attention_heads
    q = spec.hidden_size * spec.num_attention_heads * head_dim
    kv = spec.hidden_size * spec.num_key_value_heads * head_dim
    attention = 2 * q + 2 * kv
    mlp = 3 * spec.hidden_size * spec.intermediate_size
    norms = 2 * spec.hidden_size
    embeddings = spec.vocab_size * spec.hidden_size
    heads = 0 if spec.tie_word_embeddings else embeddings
    layers = spec.num_hidden_layers * (attention + mlp + norms)
    return embeddings + layers + spec.hidden_size + heads


def make_model(path: Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write an mlx-lm model directory at ``path`` and return ``path``.

    The same ``(size, seed)`` always gives byte-identical files. The
    directory appears all at once, by renaming a finished sibling into
    place, so readers never see a half-written model; if a matching model
    is already there (say another process won the race) it is left alone.
    """
    path = Path(path)
    spec = _size(size)
    marker = _marker(size, seed)
    if _is_complete(path, marker):
        return path
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        # Never clobber something we did not write, or a model built with
        # other settings: the caller asked for this exact model.
        raise FileExistsError(f"{path} exists and is not a {size!r} seed={seed} demo model")

    path.parent.mkdir(parents=True, exist_ok=True)
    # A unique sibling, on the same filesystem so the rename is atomic.
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
    tmp.mkdir()
    renamed = False
    try:
        _write_model(tmp, spec, seed, marker)
        try:
            # Replaces an empty directory too, so pytest's tmp_path works.
            os.replace(tmp, path)
            renamed = True
        except OSError:
            if _is_complete(path, marker):
                return path
            raise
    finally:
        if not renamed:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def _size(size: str) -> ModelSize:
    try:
        return SIZES[size]
    except KeyError:
        raise ValueError(f"unknown size {size!r}, expected one of {sorted(SIZES)}") from None


def _marker(size: str, seed: int) -> dict[str, Any]:
    return {"format": FORMAT_VERSION, "size": size, "seed": seed}


def _is_complete(path: Path, marker: dict[str, Any]) -> bool:
    # Only finished directories are ever renamed into place, so every file
    # being present plus a matching marker means the model is usable.
    if not all((path / name).is_file() for name in _FILES):
        return False
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("mlxhost_demo") == marker


def _write_model(directory: Path, spec: ModelSize, seed: int, marker: dict[str, Any]) -> None:
    bos, eos, pad = (SPECIAL_TOKENS.index(t) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN))
    head_dim = spec.hidden_size // spec.num_attention_heads
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "torch_dtype": spec.dtype,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "mlxhost_demo": marker,
    }
    _write_json(directory / "config.json", config)
    _write_json(
        directory / "generation_config.json",
        {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad},
    )
    _write_weights(directory / _WEIGHTS_FILE, spec, seed)
    _write_tokenizer(directory, spec)
    # The rename is only atomic for the directory entry; flushing the
    # contents first means a crash cannot expose empty files under it.
    for name in _FILES:
        fd = os.open(directory / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _weight_shapes(spec: ModelSize) -> list[tuple[str, tuple[int, ...]]]:
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
            (f"{p}.post_attention_layernorm.weight", (h,)),
            (f"{p}.mlp.gate_proj.weight", (i, h)),
            (f"{p}.mlp.up_proj.weight", (i, h)),
            (f"{p}.mlp.down_proj.weight", (h, i)),
        ]
    shapes.append(("model.norm.weight", (h,)))
    if not spec.tie_word_embeddings:
        shapes.append(("lm_head.weight", (spec.vocab_size, h)))
    return shapes


def _write_weights(path: Path, spec: ModelSize, seed: int) -> None:
    import numpy as np
    from safetensors.numpy import save

    rng = np.random.default_rng(seed)
    dtype = np.dtype(spec.dtype)
    tensors: dict[str, Any] = {}
    # Drawn in a fixed order from one generator, so the bytes depend only
    # on (spec, seed). Norms start at one, as a freshly initialised model's.
    for name, shape in _weight_shapes(spec):
        if len(shape) == 1:
            tensors[name] = np.ones(shape, dtype=dtype)
        else:
            values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            tensors[name] = values.astype(dtype)
    # Written by us rather than save_file, which creates the file 0600; a
    # shared model directory should follow the umask like its other files.
    path.write_bytes(save(tensors, metadata={"format": "pt"}))


def _write_tokenizer(directory: Path, spec: ModelSize) -> None:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    # GPT-2 style byte-level BPE: every byte has a token, so any text
    # encodes, and mlx_lm picks its byte-level streaming detokenizer.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The corpus depends on the vocabulary size only, not the seed, so a
    # token id means the same thing for every seed of a size.
    tokenizer.train_from_iterator(_corpus(words=spec.vocab_size * 40), trainer)
    if tokenizer.get_vocab_size() != spec.vocab_size:
        # Ids past the tokenizer's vocabulary would be unprintable samples.
        raise RuntimeError(
            f"tokenizer has {tokenizer.get_vocab_size()} tokens, expected {spec.vocab_size}"
        )
    tokenizer.save(str(directory / "tokenizer.json"))

    extra = [t for t in SPECIAL_TOKENS if t not in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)]
    special_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": extra,
    }
    _write_json(directory / "special_tokens_map.json", special_map)
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special_map,
        # The chat template adds bos itself; encode() leaves text alone so
        # that decode(encode(text)) == text.
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": spec.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, token in enumerate(SPECIAL_TOKENS)
        },
    }
    _write_json(directory / "tokenizer_config.json", tokenizer_config)


# Word pools for the tokenizer corpus. Multi-byte UTF-8 is deliberately
# plentiful (accents, CJK, other scripts, emoji) so the vocabulary holds
# merged multi-byte characters as well as the lone continuation bytes that
# make streaming detokenizers wait for the rest of a character.
_WORDS: Final = (
    "the a of and to in is it that was for on are with as this be at by from or "
    "have not but what all were when we there can an your which their said if do "
    "will each about how up out them then she many some so these would other into "
    "has more her two like him see time could no make than first been its who now "
    "model token stream reply server request cache batch prompt answer question "
    "hello world thanks please yes okay good morning evening weather today"
).split()
_ACCENTED: Final = (
    "café naïve façade déjà vu crème brûlée résumé garçon señor niño jalapeño "
    "piñata über straße größe Zürich Müller smörgåsbord Ångström coöperate "
    "élève forêt hôtel Noël Æsir œuvre São Paulo açaí Kraków Łódź Dvořák "
    "Malmö fjörður Reykjavík"
).split()
_CJK: Final = (
    "日本語のテキスト 日本語 東京 京都 こんにちは ありがとう 今日は 天気 学生 "
    "先生 世界 カタカナ ひらがな 漢字 中文 你好 谢谢 北京 上海 汉字 "
    "한국어 안녕하세요 감사합니다 서울"
).split()
_OTHER_SCRIPTS: Final = (
    "Привет мир спасибо Москва Ελληνικά καλημέρα Αθήνα שלום مرحبا شكرا "
    "नमस्ते धन्यवाद สวัสดี Γειά"
).split()
_EMOJI: Final = (
    "🙂 🚀 🎉 👍 🔥 🤖 🌍 ✨ 😂 ❤️ 👩‍💻 🇯🇵 🍣 🐍 ☕ 🙂🚀 ✅ 💡"
).split()
_PUNCTUATION: Final = (",", ".", "!", "?", ":", ";", "...", "—", "…", "«", "»", "“", "”")
_CONSONANTS: Final = "bcdfghjklmnprstvwzçñßšž"
_VOWELS: Final = "aeiouyàáâäèéêëìíîïòóôöùúûüå"
_KANA: Final = "あいうえおかきくけこさしすせそたちつてとなにぬねのまみむめもらりるれろアイウエオカキクケコサシスセソ"
_HANGUL: Final = "가나다라마바사아자차카타파하"


def _corpus(words: int) -> list[str]:
    # random.Random's sequence for a given seed is stable across Python
    # versions, which keeps the trained vocabulary byte-identical.
    rng = random.Random(20240601)
    out: list[str] = []
    for _ in range(words):
        r = rng.random()
        if r < 0.30:
            # Invented words give BPE enough distinct pairs to fill a large
            # vocabulary, and spread accents across many merges.
            w = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 4)))
        elif r < 0.45:
            w = rng.choice(_WORDS)
        elif r < 0.52:
            w = rng.choice(_ACCENTED)
        elif r < 0.60:
            w = rng.choice(_CJK)
        elif r < 0.66:
            w = "".join(rng.choice(_KANA) for _ in range(rng.randint(2, 5)))
        elif r < 0.70:
            w = "".join(rng.choice(_HANGUL) for _ in range(rng.randint(2, 4)))
        elif r < 0.75:
            w = rng.choice(_OTHER_SCRIPTS)
        elif r < 0.81:
            w = rng.choice(_EMOJI)
        elif r < 0.87:
            w = str(rng.randint(0, 99999))
        elif r < 0.95:
            w = rng.choice(_PUNCTUATION)
        else:
            w = "\n"
        if rng.random() < 0.1:
            w = w.capitalize()
        out.append(w)
    # Short chunks, the way documents would be fed to the trainer.
    return [" ".join(out[i : i + 200]) for i in range(0, len(out), 200)]
