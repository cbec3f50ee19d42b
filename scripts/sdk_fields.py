"""Write mlxhost/wire/sdk_fields.json: every request field the official SDKs define, per dialect.

    .venv/bin/python scripts/sdk_fields.py          # rewrite the table from the installed SDKs
    .venv/bin/python scripts/sdk_fields.py --check  # exit 1, naming what differs, if it is stale

The host keeps no SDK at run time (`openai` and `anthropic` are test extras), so what they define
is read here, once, from their request types (TypedDicts, betas included), and committed. A field
is listed under the name of the field that holds its object ("" for the body's own fields), the
way `mlxhost.wire.fields` looks it up from an error's location. For fields whose items are told
apart by a `type` (tools, content blocks, input items), the `type` values the SDKs know are
listed too: a hosted tool the SDK defines is skipped, a made-up one is refused.
"""

from __future__ import annotations

import argparse
import collections.abc
import importlib
import importlib.metadata
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

import typing_extensions

TABLE = Path(__file__).resolve().parent.parent / "mlxhost" / "wire" / "sdk_fields.json"

# Each dialect's request types: the plain API's and its betas' (a client sends either).
ROOTS: dict[str, list[tuple[str, str]]] = {
    "chat": [("openai.types.chat.completion_create_params", "CompletionCreateParamsBase")],
    "completions": [("openai.types.completion_create_params", "CompletionCreateParamsBase")],
    "responses": [("openai.types.responses.response_create_params", "ResponseCreateParamsBase")],
    "messages": [
        ("anthropic.types.message_create_params", "MessageCreateParamsBase"),
        ("anthropic.types.beta.message_create_params", "MessageCreateParamsBase"),
    ],
    "count_tokens": [
        ("anthropic.types.message_count_tokens_params", "MessageCountTokensParams"),
        ("anthropic.types.beta.message_count_tokens_params", "MessageCountTokensParams"),
    ],
}
# Request options the SDKs send as headers, though their TypedDicts list them with the body's.
HEADER_OPTIONS = frozenset({"betas", "workspace_id", "user_profile_id"})


def _members(tp: Any) -> list[Any]:
    """The types `tp` is made of, through unions, containers, aliases and markers."""
    origin = typing.get_origin(tp)
    if isinstance(tp, typing_extensions.TypeAliasType) or isinstance(
        tp, getattr(typing, "TypeAliasType", ())
    ):
        return _members(tp.__value__)
    if origin in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(tp) for m in _members(a)]
    if origin is typing.Annotated or origin in (typing_extensions.Required, typing_extensions.NotRequired):
        return _members(typing.get_args(tp)[0])
    if origin is not None and origin in (typing.Required, typing.NotRequired, typing_extensions.ReadOnly):
        return _members(typing.get_args(tp)[0])
    if origin is typing.Literal:
        return []
    if origin in (list, tuple, set, frozenset, collections.abc.Iterable, collections.abc.Sequence):
        return [m for a in typing.get_args(tp) if a is not Ellipsis for m in _members(a)]
    if origin is dict or origin is collections.abc.Mapping:
        args = typing.get_args(tp)
        return _members(args[1]) if len(args) == 2 else []
    if origin is not None and typing.get_args(tp):  # SequenceNotStr[...] and other generics
        return [m for a in typing.get_args(tp) for m in _members(a)]
    return [tp] if typing_extensions.is_typeddict(tp) else []


def _hints(td: Any) -> dict[str, Any]:
    module = sys.modules[td.__module__]
    return typing.get_type_hints(td, globalns=vars(module), include_extras=True)


def _literals(tp: Any) -> list[str]:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return [a for a in typing.get_args(tp) if isinstance(a, str)]
    return [v for a in typing.get_args(tp) for v in _literals(a)]


def collect(roots: list[tuple[str, str]]) -> dict[str, dict[str, list[str]]]:
    fields: dict[str, set[str]] = collections.defaultdict(set)
    kinds: dict[str, set[str]] = collections.defaultdict(set)
    seen: set[tuple[str, int]] = set()
    pending: list[tuple[str, Any]] = []
    for module, name in roots:
        pending.append(("", getattr(importlib.import_module(module), name)))
    while pending:
        parent, td = pending.pop()
        if (parent, id(td)) in seen:
            continue
        seen.add((parent, id(td)))
        for field, hint in _hints(td).items():
            if parent == "" and field in HEADER_OPTIONS:
                continue
            fields[parent].add(field)
            for nested in _members(hint):
                nested_hints = _hints(nested)
                if "type" in nested_hints:
                    kinds[field].update(_literals(nested_hints["type"]))
                pending.append((field, nested))
    return {
        "fields": {k: sorted(v) for k, v in sorted(fields.items())},
        "types": {k: sorted(v) for k, v in sorted(kinds.items()) if v},
    }


def table() -> dict[str, Any]:
    return {
        "generated_by": "scripts/sdk_fields.py",
        "sdks": {name: importlib.metadata.version(name) for name in ("openai", "anthropic")},
        "dialects": {dialect: collect(roots) for dialect, roots in ROOTS.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed table")
    args = parser.parse_args(argv)
    fresh = table()
    text = json.dumps(fresh, indent=1, sort_keys=True) + "\n"
    if args.check:
        kept = json.loads(TABLE.read_text())
        if kept != fresh:
            print(f"{TABLE} differs from the installed SDKs {fresh['sdks']}: rerun {sys.argv[0]}")
            return 1
        return 0
    TABLE.write_text(text)
    counts = {d: sum(map(len, t["fields"].values())) for d, t in fresh["dialects"].items()}
    print(f"wrote {TABLE} from {fresh['sdks']}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
