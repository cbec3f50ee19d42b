"""The agent scenario's conversation (`bench.agent`): the tools every request declares, a system
prompt of tool documentation grown to a length in tokens, and one path's conversation, which
alternates between a tool call's result and the user's next words, re-sent whole every turn."""

from __future__ import annotations

import copy
import json
from typing import Any

from bench.raw import RawMLX

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {arg: {"type": "string", "description": doc} for arg, doc in args.items()},
                "required": list(args),
            },
        },
    }
    for name, description, args in (
        ("read_file", "Read a file of the repository.", {"path": "path from the repository root"}),
        ("list_dir", "List a directory.", {"path": "path from the repository root"}),
        ("search_code", "Search the code for a string.", {"query": "the text to look for"}),
        ("run_shell", "Run a shell command.", {"command": "the command line"}),
        (
            "edit_file",
            "Replace text in a file.",
            {"path": "the file", "old": "the text", "new": "its replacement"},
        ),
    )
]

PREAMBLE = (
    "You are a coding agent working in a Python repository. You answer briefly, and you use the "
    "tools below to read, search, run and edit code. Never guess the content of a file: read it."
)
# The documentation the system prompt repeats until it is long enough (agents' system prompts are
# mostly such text).
TOOL_DOCS = (
    (
        "read_file returns the whole file with line numbers. Read a file before you edit it, and read "
        "it again after an edit if you need its new line numbers. Large files are cut at 2,000 lines; "
        "ask for a range with the path and the first line when you need more."
    ),
    (
        "list_dir lists the entries of one directory, folders first, with their sizes. It does not "
        "recurse: list the folders you need one by one. Hidden files are listed too."
    ),
    (
        "search_code finds a string in every tracked file and returns the matching lines with their "
        "paths and line numbers, at most 200 of them. Prefer a specific string to a common word."
    ),
    (
        "run_shell runs one command in the repository root with a timeout of two minutes and returns "
        "its exit status and its output, the last 10,000 characters of it. It cannot read from stdin."
    ),
    (
        "edit_file replaces one exact occurrence of a text in a file. The old text must match exactly, "
        "whitespace included, and appear once; otherwise nothing is changed and you are told why."
    ),
)
USER_TURNS = (
    "The test suite fails on test_prompt_cache. Find out why and fix it.",
    "Good. Does the same bug exist in the Responses API path?",
    "Run the unit tests again and tell me what still fails.",
    "Add a test for the case you fixed, next to the existing ones.",
    "Now check that the linter is happy with your change.",
    "Summarise what you changed, in two sentences.",
    "One more thing: the README still names the old option. Fix it.",
)
TOOL_STEPS = (
    (
        "search_code",
        {"query": "def test_prompt_cache"},
        "tests/unit/test_prompt_cache.py:41: def test_prompt_cache_hit():",
    ),
    (
        "read_file",
        {"path": "mlxhost/worker/cache/memory.py"},
        '1 | """The prompt cache."""\n2 | \n3 | from __future__ import annotations',
    ),
    ("run_shell", {"command": "pytest -q tests/unit"}, "exit 1\n1 failed, 212 passed in 9.81s"),
    (
        "edit_file",
        {"path": "mlxhost/worker/cache/memory.py", "old": "len(rest)", "new": "len(rest) - 1"},
        "edited: 1 replacement",
    ),
    (
        "list_dir",
        {"path": "tests/unit"},
        "test_prompt_cache.py 4.1 kB\ntest_reading.py 7.9 kB\ntest_wire.py 3.2 kB",
    ),
    ("run_shell", {"command": "ruff check mlxhost"}, "exit 0\nAll checks passed!"),
    ("read_file", {"path": "README.md"}, "1 | # mlxhost\n2 | \n3 | A host for MLX models."),
)


def system_prompt(raw: RawMLX, target_tokens: int) -> tuple[str, int]:
    """The preamble and as many tool notes as bring the rendered system turn (the tools declared
    included) to `target_tokens`; and its length in tokens."""
    parts = [PREAMBLE]

    def rendered() -> int:
        messages = [{"role": "system", "content": "\n\n".join(parts)}]
        return len(raw.tokenizer.apply_chat_template(messages, tools=TOOLS))

    count = rendered()
    while count < target_tokens:
        note = len(parts)
        parts.append(f"Note {note}. {TOOL_DOCS[(note - 1) % len(TOOL_DOCS)]}")
        count = rendered()
    return "\n\n".join(parts), count


class Conversation:
    """One path's conversation: what turn `n` sends is the history, the model's previous reply,
    and the turn's new message (a tool result after a tool call, or the user's next words)."""

    def __init__(self, system: str) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.turns = 0

    def next_request(self, previous_reply: str | None) -> list[dict[str, Any]]:
        turn = self.turns
        if turn == 0:
            self.messages.append({"role": "user", "content": USER_TURNS[0]})
        elif turn % 2 == 1:  # the reply came with a tool call; its result follows
            name, arguments, result = TOOL_STEPS[(turn // 2) % len(TOOL_STEPS)]
            call_id = f"call_{turn}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            self.messages.append({"role": "assistant", "content": previous_reply or "", "tool_calls": [call]})
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            self.messages.append({"role": "assistant", "content": previous_reply or ""})
            self.messages.append({"role": "user", "content": USER_TURNS[(turn // 2) % len(USER_TURNS)]})
        self.turns += 1
        return copy.deepcopy(self.messages)  # a server may not change what the next turn sends
