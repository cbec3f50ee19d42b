"""A servable model as configured (`ModelSpec`): where it is, the names it answers to, its own
limits; and the checks that read one from a flag (PATH or ID=PATH) or a [[model]] table.

A model's aliases may be exact names or patterns (with * and ?) that requests' unknown names are
matched against; each name is checked here so that none is taken twice or hidden by another's.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlxhost.config_values import InvalidValue, integer, names, non_negative_number, optional_text
from mlxhost.catalog.tasks import task_list
from mlxhost.catalog.ranks import GroupSpec, InvalidGroup, group_spec

__all__ = [
    "KV_BITS",
    "KV_GROUP_SIZES",
    "MAX_DRAFT_TOKENS",
    "SPECULATE_MODES",
    "ModelSpec",
    "alias_list",
    "check_names",
    "draft_tokens_value",
    "is_pattern",
    "kv_bits_value",
    "kv_group_size_value",
    "model_list",
    "model_name",
    "speculate_value",
]

# A model's aliases may be patterns: '*' matches any run of characters, '?' any one.
WILDCARDS = "*?"
# The KV quantizations the engine's per-row batch takes (mlx's quantize): bits per value, 0 for
# none (the model's own precision), in groups of this many values.
KV_BITS = (0, 4, 8)
KV_GROUP_SIZES = (32, 64, 128)
# Speculative decoding in the per-row batch (the engine's `speculate`): "lookup" drafts each row's
# next tokens from its own prompt and output and verifies them where that is measured to pay,
# "always" wherever a row has drafts, "off" never drafts; at most MAX_DRAFT_TOKENS drafts per row
# and step.
SPECULATE_MODES = ("lookup", "always", "off")
MAX_DRAFT_TOKENS = 16


def is_pattern(name: str) -> bool:
    return any(c in WILDCARDS for c in name)


@dataclass(frozen=True)
class ModelSpec:
    """One servable model: where it is, what it is called, and its own limits.

    `aliases` are as configured: exact names, and patterns (with * or ?) that requests' unknown
    names are matched against. `names` are the exact ones only: the id first.
    """

    id: str
    path: str  # a model directory, or a Hugging Face repo id (pulled at start when not in the cache)
    aliases: tuple[str, ...] = ()
    preload: bool | None = None  # None: the default (first) model preloads, others on demand
    idle_ttl: float | None = None  # seconds unused before it is unloaded; None: the host's idle_ttl
    max_batch: int | None = None
    max_active: int | None = None  # sessions running at once; None: the host's max_active
    max_queued: int | None = None  # sessions waiting; None: the host's max_queued
    max_tokens_limit: int | None = None  # largest max_tokens; None: the host's max_tokens_limit
    kv_bits: int | None = None  # its KV quantized to 4 or 8 bits, 0 not; None: the host's kv_bits
    kv_group_size: int | None = None  # values per quantization group; None: the host's kv_group_size
    speculate: str | None = None  # "lookup", "always" or "off"; None: the host's speculate
    draft_tokens: int | None = None  # most drafts per row and step; None: the host's draft_tokens
    adapter: str | None = None  # a LoRA adapter directory (mlx-lm's), loaded over the model
    # A draft model (a directory or repo id, the model's own tokenizer) whose drafts the model
    # verifies (worker/engine/rows/drafter.py); None: drafts by prompt lookup.
    draft: str | None = None
    group: GroupSpec | None = None  # served by several MLX ranks (mlxhost.catalog.ranks); None: one worker
    # What it serves (mlxhost.catalog.tasks): "generate", "embed", "rerank"; None: as its files say.
    task: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.id, *(a for a in self.aliases if not is_pattern(a)))

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(a for a in self.aliases if is_pattern(a))

    def matches(self, name: str) -> bool:
        """Whether one of this model's patterns matches `name` (case-sensitive, as exact names)."""
        # '[' is escaped: a pattern's wildcards are * and ? only, whoever built the spec.
        return any(fnmatch.fnmatchcase(name, p.replace("[", "[[]")) for p in self.patterns)


def model_name(value: object) -> str | None:
    """a model name without * or ? (empty for none)"""
    name = optional_text(value)
    if name is not None and is_pattern(name):
        raise InvalidValue(
            "an exact model name: a model's id cannot hold * or ? (patterns go in its aliases)"
        )
    return name


def kv_bits_value(value: object) -> int:
    """0 (off), 4 or 8"""
    bits = integer(0)(value)
    if bits not in KV_BITS:
        raise ValueError
    return bits


def kv_group_size_value(value: object) -> int:
    """32, 64 or 128"""
    size = integer(1)(value)
    if size not in KV_GROUP_SIZES:
        raise ValueError
    return size


def speculate_value(value: object) -> str:
    if not isinstance(value, str) or value.lower() not in SPECULATE_MODES:
        raise ValueError
    return value.lower()


speculate_value.__doc__ = f"one of {', '.join(SPECULATE_MODES)}"
draft_tokens_value = integer(1, MAX_DRAFT_TOKENS)


def alias_list(value: object) -> tuple[str, ...]:
    """a name or pattern (* and ?), a comma-separated list of them, or a list of them"""
    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        value = ",".join(value)  # a repeated flag may carry commas as the environment does
    aliases = names(value)
    for alias in aliases:
        if (problem := _alias_problem(alias)) is not None:
            raise InvalidValue(problem)
    if len(set(aliases)) < len(aliases):
        raise InvalidValue("each name or pattern once")
    return aliases


def _alias_problem(alias: str) -> str | None:
    """Why `alias` cannot be a model's alias; None when it can."""
    if not is_pattern(alias):
        return None  # an exact name: anything a request may send, as before
    if any(c.isspace() or not c.isprintable() for c in alias):
        return f"a pattern without spaces or control characters, not {alias!r}"
    if "[" in alias or "]" in alias:
        # fnmatch would read [...] as a character class; model names carry brackets literally
        # (Claude Code's "[1m]"), so the two meanings would be easy to confuse: neither is taken.
        return f"a pattern whose only wildcards are * and ?, not {alias!r} ([ and ] are not allowed in one)"
    return None


_MODEL_KEYS = {
    "id", "path", "aliases", "preload", "idle_ttl", "max_batch", "max_active", "max_queued",
    "max_tokens_limit", "kv_bits", "kv_group_size", "speculate", "draft_tokens", "adapter", "draft", "ranks",
    "backend", "hosts", "hostfile", "sharding", "task",
}  # fmt: skip

# A [[model]]'s own values over the host's settings of the same name: each key's check.
_OWN_VALUES: dict[str, Callable[[object], object]] = {
    "idle_ttl": non_negative_number,
    "max_batch": integer(1, 1024),
    "max_active": integer(1),
    "max_queued": integer(0),
    "max_tokens_limit": integer(1),
    "kv_bits": kv_bits_value,
    "kv_group_size": kv_group_size_value,
    "speculate": speculate_value,
    "draft_tokens": draft_tokens_value,
}


def model_list(value: object) -> tuple[ModelSpec, ...]:
    """a model directory or repo id, ID=PATH, or a list of those or of [[model]] tables"""
    if isinstance(value, str):
        items: list[object] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ValueError
    specs = tuple(_model_spec(item) for item in items)
    check_names(specs)
    return specs


def check_names(specs: tuple[ModelSpec, ...]) -> None:
    """Every exact name once, every pattern once, and no pattern hidden by an earlier model's."""
    seen: set[str] = set()
    for spec in specs:
        for name in spec.names:
            if name in seen:
                raise InvalidValue(f"the model name '{name}' is used twice")
            seen.add(name)
    patterns = [(pattern, spec.id) for spec in specs for pattern in spec.patterns]  # in order
    for at, (pattern, model) in enumerate(patterns):
        for first, owner in patterns[:at]:
            if pattern == first:
                raise InvalidValue(f"the pattern '{pattern}' is used twice")
            if owner != model and _covers(first, pattern):
                raise InvalidValue(
                    f"the pattern '{pattern}' (model '{model}') would never match: the pattern "
                    f"'{first}' of model '{owner}', earlier, takes every name it would (the first "
                    f"model's pattern wins): narrow '{first}' (e.g. 'claude-sonnet-*' beside "
                    "'claude-haiku-*'), or list this model first"
                )


def _covers(wide: str, narrow: str) -> bool:
    """Whether every name `narrow` matches, `wide` matches too, in the case that is easy to be
    sure of and easy to write by mistake: `wide` is a plain prefix and a '*' ("claude-*", "*")."""
    head = wide.rstrip("*")
    return not is_pattern(head) and narrow.startswith(head)


def _model_spec(item: object) -> ModelSpec:
    if isinstance(item, str):
        model_id, sep, path = item.strip().partition("=")
        if not sep:
            path = model_id
            model_id = Path(path).name if Path(path).expanduser().is_dir() else path
        if not model_id or not path:
            raise InvalidValue(f"'{item}' is not PATH or ID=PATH")
        if is_pattern(model_id):
            raise InvalidValue(
                f"an exact model id in '{item}': ids cannot hold * or ? (patterns go in aliases)"
            )
        return ModelSpec(model_id, path)
    if not isinstance(item, dict):
        raise ValueError
    unknown = set(item) - _MODEL_KEYS
    if unknown:
        raise InvalidValue(f"unknown model key(s) {sorted(unknown)}; valid: {sorted(_MODEL_KEYS)}")
    location = item.get("path")
    if not isinstance(location, str) or not location:
        raise InvalidValue("each [[model]] needs a 'path'")
    model_id = item.get("id", Path(location).name)
    aliases = item.get("aliases", [])
    if not isinstance(model_id, str) or not model_id:
        raise InvalidValue("a model 'id' must be a non-empty string")
    if is_pattern(model_id):
        raise InvalidValue(
            f"a model 'id' is an exact name, listed by /v1/models: '{model_id}' holds * or ?; "
            "put patterns in 'aliases'"
        )
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise InvalidValue("'aliases' must be a list of names or patterns (* and ?)")
    for alias in aliases:
        if (problem := _alias_problem(alias)) is not None:
            raise InvalidValue(f"model '{model_id}': each of 'aliases' must be {problem}")
    preload = item.get("preload")
    if preload is not None and not isinstance(preload, bool):
        raise InvalidValue("'preload' must be true or false")
    own = {name: _own_value(model_id, name, item[name]) for name in _OWN_VALUES if item.get(name) is not None}
    adapter = item.get("adapter")
    if adapter is not None and (not isinstance(adapter, str) or not adapter):
        raise InvalidValue("'adapter' must be an adapter directory")
    try:
        group = group_spec(item)
    except InvalidGroup as exc:
        raise InvalidValue(f"model '{model_id}': {exc}") from None
    if group is not None and adapter is not None:
        raise InvalidValue(f"model '{model_id}': 'adapter' is not served by a group of ranks yet")
    draft = item.get("draft")
    if draft is not None and (not isinstance(draft, str) or not draft):
        raise InvalidValue(f"model '{model_id}': 'draft' must be a model directory or repo id")
    if group is not None and draft is not None:
        raise InvalidValue(f"model '{model_id}': 'draft' is not served by a group of ranks yet")
    task = None
    if item.get("task") is not None:
        try:
            task = task_list(item["task"])
        except ValueError:
            raise InvalidValue(
                f"model '{model_id}': 'task' must be {task_list.__doc__}, not {item['task']!r}"
            ) from None
    if group is not None and task is not None and task != ("generate",):
        raise InvalidValue(f"model '{model_id}': embeddings and reranking are not served by a group yet")
    return ModelSpec(
        model_id, location, tuple(aliases), preload, adapter=adapter, draft=draft, group=group, task=task,
        **own,
    )  # fmt: skip


def _own_value(model_id: str, name: str, raw: object) -> object:
    """A [[model]]'s own `name`, checked; an error names the model, the key and what is valid."""
    parse = _OWN_VALUES[name]
    try:
        return parse(raw)
    except (ValueError, TypeError):
        raise InvalidValue(f"model '{model_id}': '{name}' must be {parse.__doc__}, not {raw!r}") from None
