"""The demo models' tokenizer: byte-level BPE trained on the demo corpus, with a chat template.

The `tokenizers` library is imported only when a tokenizer is trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from mlxhost.demo.corpus import corpus
from mlxhost.demo.weights import ModelSize

__all__ = [
    "BOS_TOKEN",
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "tokenizer_documents",
    "write_tokenizer",
]

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


def write_tokenizer(path: Path, spec: ModelSize) -> None:
    """Train the tokenizer for `spec`'s vocabulary and save it (tokenizer.json) at `path`."""
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
    tokenizer.train_from_iterator(corpus(words=spec.vocab_size * 40), trainer)
    if tokenizer.get_vocab_size() != spec.vocab_size:
        # Ids past the tokenizer's vocabulary would be unprintable samples.
        raise RuntimeError(
            f"tokenizer has {tokenizer.get_vocab_size()} tokens, expected {spec.vocab_size}"
        )
    tokenizer.save(str(path))


def tokenizer_documents(spec: ModelSize) -> dict[str, Any]:
    """The tokenizer's other files, by name: its special tokens and its configuration."""
    extra = [t for t in SPECIAL_TOKENS if t not in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)]
    special_map = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "additional_special_tokens": extra,
    }
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
    return {"special_tokens_map.json": special_map, "tokenizer_config.json": tokenizer_config}
