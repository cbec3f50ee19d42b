"""The demo models' tokenizer: byte-level BPE trained on the demo corpus, with a chat template.

The "agent" size has its own tokenizer (`agent_tokenizer`), with the same special tokens and chat
template.

The `tokenizers` library is imported only when a tokenizer is trained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mlxhost.demo.corpus import corpus
from mlxhost.demo.weights import ModelSize

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "BOS_TOKEN",
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "ROLE_TOKENS",
    "SPECIAL_TOKENS",
    "THINK_END",
    "THINK_START",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "tokenizer_documents",
    "write_tokenizer",
]

PAD_TOKEN: Final = "<|pad|>"
BOS_TOKEN: Final = "<|begin|>"
EOS_TOKEN: Final = "<|end|>"
# Tool calls and thinking in the tags Qwen and Hermes models use, which mlx-lm recognises: a
# template that names `<tool_call>` and `tool_call.name` gets its `json_tools` parser, and a
# vocabulary holding `<think>` and `</think>` makes `has_thinking` true. So the demo model
# exercises tool calling and reasoning offline, as a real model of that family would.
TOOL_CALL_START: Final = "<tool_call>"
TOOL_CALL_END: Final = "</tool_call>"
THINK_START: Final = "<think>"
THINK_END: Final = "</think>"
# A token's id is its position here: the tokenizer trainer assigns special
# tokens the first ids, in order. Every variant (demo/families/) keeps the roles' tokens and
# replaces the markers after them with its family's own.
ROLE_TOKENS: Final = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>")
SPECIAL_TOKENS: Final = (*ROLE_TOKENS, TOOL_CALL_START, TOOL_CALL_END, THINK_START, THINK_END)

# Renders e.g. "<|begin|><|user|>\nhi<|end|>\n<|assistant|>\n". The end of
# turn marker doubles as eos, so a reply stops where a turn would end.
# Content may also be a list of OpenAI-style parts; only text parts count.
#
# With `tools`, a system turn lists them (after the caller's own system text) and says how to
# call one; an assistant turn's `tool_calls` render as `<tool_call>{"name", "arguments"}</tool_call>`
# (arguments as OpenAI sends them, a JSON string, or as an object), its `reasoning_content` as
# `<think>…</think>` before the answer, and a `tool` turn carries a result. `enable_thinking=False`
# closes an empty think block in the generation prompt, as Qwen3's template does. Without tools,
# tool calls or reasoning, a conversation renders exactly as it did before these were added.
CHAT_TEMPLATE: Final = (
    "{% macro text(content) %}"
    "{% if content is string %}{{ content }}"
    "{% elif content %}{% for part in content %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endmacro %}"
    "{{ bos_token }}"
    "{% set skip_first = tools and messages and messages[0]['role'] == 'system' %}"
    "{% if tools %}"
    "<|system|>\n"
    "{% if skip_first %}{{ text(messages[0]['content']) }}\n\n{% endif %}"
    "You may call these tools:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    "</tools>\nTo call one, reply with <tool_call>\n"
    '{"name": <the tool\'s name>, "arguments": <its arguments as a JSON object>}\n'
    "</tool_call><|end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('Unsupported role: ' + message['role']) }}"
    "{% endif %}"
    "{% if not (loop.first and skip_first) %}"
    "<|{{ message['role'] }}|>\n"
    "{% if message['role'] == 'assistant' and message['reasoning_content'] %}"
    "<think>\n{{ message['reasoning_content'] }}\n</think>\n\n"
    "{% endif %}"
    "{{ text(message['content']) }}"
    "{% if message['role'] == 'assistant' and message['tool_calls'] %}"
    "{% for tool_call in message['tool_calls'] %}"
    "{% if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
    # An expression, not a literal: the template environment drops a newline right after a tag.
    "{% if not loop.first or message['content'] %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ tool_call.name }}", "arguments":'
    "{% if tool_call.arguments is string %} {{ tool_call.arguments }}"
    "{% else %} {{ tool_call.arguments | tojson }}{% endif %}"
    "}\n</tool_call>"
    "{% endfor %}"
    "{% endif %}"
    "<|end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


def write_tokenizer(path: Path, spec: ModelSize, special_tokens: Sequence[str] = SPECIAL_TOKENS) -> None:
    """Train the tokenizer for `spec`'s vocabulary and save it (tokenizer.json) at `path`."""
    if spec.tokenizer == "agent":
        # Imported here: its word lists are of no use to a process that only wants a path.
        from mlxhost.demo.agent_tokenizer import train_agent_tokenizer

        tokenizer = train_agent_tokenizer(spec.vocab_size, special_tokens)
    else:
        tokenizer = _train(spec, special_tokens)
    if tokenizer.get_vocab_size() != spec.vocab_size:
        # Ids past the tokenizer's vocabulary would be unprintable samples.
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} tokens, expected {spec.vocab_size}")
    tokenizer.save(str(path))


def _train(spec: ModelSize, special_tokens: Sequence[str]) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    # GPT-2 style byte-level BPE: every byte has a token, so any text
    # encodes, and mlx_lm picks its byte-level streaming detokenizer.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # The corpus depends on the vocabulary size only, not the seed, so a
    # token id means the same thing for every seed of a size.
    tokenizer.train_from_iterator(corpus(words=spec.vocab_size * 40), trainer)
    return tokenizer


def tokenizer_documents(
    spec: ModelSize,
    chat_template: str = CHAT_TEMPLATE,
    special_tokens: Sequence[str] = SPECIAL_TOKENS,
    extra_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The tokenizer's other files, by name: its special tokens and its configuration."""
    extra = [t for t in special_tokens if t not in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)]
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
        "chat_template": chat_template,
        **(extra_config or {}),
        "added_tokens_decoder": {
            str(i): {
                "content": token,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, token in enumerate(special_tokens)
        },
    }
    return {"special_tokens_map.json": special_map, "tokenizer_config.json": tokenizer_config}
