"""The field policy: what mlxhost does with each field a request carries.

    implemented   a field of the dialect's request model (openai.py, responses.py, anthropic.py)
    skipped       not implemented, but an official SDK defines it (sdk_fields.json), or it is not
                  something a local host can do and is safe to leave out (a hosted tool, an
                  `include` entry): taken out of the body, and named in the answer's
                  `x-mlxhost-ignored` header and in the session's outcome
    refused       anything else: a 400 that names it, as a typo in a sampling parameter deserves;
                  and the few fields an SDK defines whose absence would change what the answer
                  means (REFUSED: a text completion's `echo`, a background response)

Agents' request shapes change every month (Claude Code's first request carries seven betas), so
refusing every field a host does not implement locks them out; accepting anything would hide
mistakes. The official SDKs' request types are the line between the two: `scripts/sdk_fields.py`
reads them from the installed `openai` and `anthropic` packages into sdk_fields.json, and a test
keeps that table in step with them. A field is looked up under the name of the field that holds
its object ("" for the body's own fields), so `cache_control` is known in a content block and a
system block, and a misspelt `temprature` is known nowhere.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from mlxhost.wire.inert import excerpt

__all__ = ["IGNORED_HEADER", "MAX_NAMED", "REFUSED", "Skipped", "known_field", "known_type"]

# Named in every answer with something skipped (the parent relays it to the client).
IGNORED_HEADER: Final = "x-mlxhost-ignored"
MAX_NAMED: Final = 32  # distinct names kept: a body with thousands of skipped keys names this many
_TABLE: Final = Path(__file__).with_name("sdk_fields.json")
# Body fields an SDK defines that are refused all the same: without them the client would get
# another answer than it asked for (the prompt echoed, an answer to poll for later, audio, a
# conversation or prompt template kept on the server, functions in the old form), not the same
# answer with a hint left out.
REFUSED: Final = {
    "chat": frozenset({"audio", "modalities", "functions", "function_call"}),
    "completions": frozenset({"echo", "suffix", "best_of"}),
    "responses": frozenset({"background", "conversation", "prompt"}),
}
_INDEX = re.compile(r"\[[^\]]*\]")


@functools.cache
def _table() -> dict[str, Any]:
    dialects: dict[str, Any] = json.loads(_TABLE.read_text())["dialects"]
    return {
        name: (
            {parent: frozenset(names) for parent, names in table["fields"].items()},
            {holder: frozenset(kinds) for holder, kinds in table["types"].items()},
        )
        for name, table in dialects.items()
    }


def known_field(dialect: str, parent: str, name: str) -> bool:
    """Whether `name`, in an object held by a field called `parent` ("" for the body itself) in
    `dialect`'s requests, is one to skip: an official SDK defines it, and it is not REFUSED."""
    fields, _ = _table()[dialect]
    if parent == "" and name in REFUSED.get(dialect, ()):
        return False
    return name in fields.get(parent, ())


def known_type(dialect: str, holder: str, kind: str) -> bool:
    """Whether an official SDK defines objects of `type` `kind` in `holder` (a tool type in
    `tools`, a block type in `content`)."""
    _, kinds = _table()[dialect]
    return kind in kinds.get(holder, ())


@dataclass
class Skipped:
    """What one request carried that mlxhost left out, by name (list positions dropped:
    `messages.content.cache_control` once, however many blocks held one)."""

    names: list[str] = field(default_factory=list)

    def add(self, param: str) -> None:
        # ASCII only: it goes into a header, and a client's own strings (an `include` entry) may not be.
        name = excerpt(_INDEX.sub("", param), 128).encode("ascii", "backslashreplace").decode()
        if name not in self.names and len(self.names) < MAX_NAMED:
            self.names.append(name)

    def __bool__(self) -> bool:
        return bool(self.names)

    def header(self) -> str:
        return ", ".join(self.names)

    def headers(self) -> dict[str, str]:
        """The response headers that say what was skipped: none when nothing was."""
        return {IGNORED_HEADER: self.header()} if self.names else {}
