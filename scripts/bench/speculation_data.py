"""The speculation bench's text, generated from a seed (`bench.speculation`): Python-like source
files, small edits to them described in words, the chat examples that ask for a file back with its
edits applied, and prompts with nothing in them to copy.

An edit example is what prompt lookup is for: the answer re-emits the prompt's file, a few lines
changed. The same generator writes the fine-tune's dataset (`write_edit_dataset`) and the bench's
prompts, from other seeds, so the model is measured on files it never trained on.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxhost.demo.agent_vocabulary import noun_base

# The names every file shares, the words of its comments; each file draws names of its own too
# (`FILE_NAMES`, from the agent demo's word lists, which its tokenizer spells in few tokens), so that
# a file's lines are its own, as a real file's are.
NOUNS = (
    "path", "name", "value", "count", "total", "index", "item", "items", "result", "config", "data",
    "handle", "line", "lines", "size", "limit", "offset", "buffer", "record", "records", "key",
    "entry", "entries", "state", "token", "tokens", "model", "batch", "step", "request", "response",
    "session", "worker", "queue", "cache", "prompt", "text", "error", "message", "field",
)  # fmt: skip
VERBS = (
    "load", "read", "write", "parse", "build", "check", "find", "make", "send", "close", "open",
    "start", "stop", "run", "update", "reset", "count", "split", "join", "format",
)  # fmt: skip
METHODS = ("append", "get", "pop", "strip", "split", "items", "keys", "update", "encode", "copy")
COMMENT_WORDS = (
    "the", "a", "of", "to", "is", "when", "each", "one", "every", "before", "after", "keeps",
    "reads", "writes", "returns", "here", "once", "first", "last", "file", "list",
)  # fmt: skip
FILE_NAMES = 80
EDIT_SYSTEM = "You edit files. Answer with the whole file, the edits applied, and nothing else."


class Names:
    """A file's names (the shared nouns and its own), drawn by its generator."""

    def __init__(self, rng: random.Random) -> None:
        own = sorted({noun_base(rng) for _ in range(FILE_NAMES)} - set(NOUNS))
        self.nouns = (*NOUNS, *own)
        self.rng = rng

    def noun(self) -> str:
        return self.rng.choice(self.nouns)

    def number(self) -> str:
        """Numbers as settings hold them: mostly small, now and then up to 9,999."""
        return str(self.rng.randrange(100 if self.rng.random() < 0.6 else 10_000))


def _statement(names: Names, indent: str) -> str:
    rng = names.rng
    a, b = names.noun(), names.noun()
    kind = rng.randrange(9)
    if kind == 0:
        return f"{indent}{a} = {b}.{rng.choice(METHODS)}({names.noun()})"
    if kind == 1:
        return f"{indent}{a} = {names.number()}"
    if kind == 2:
        return f"{indent}{a} += {b}[{names.number()}]"
    if kind == 3:
        return f"{indent}{a}.{rng.choice(METHODS)}({b})"
    if kind == 4:
        return f'{indent}{a} = "{rng.choice(VERBS)} {b}"'
    if kind == 5:
        return f"{indent}{a} = {rng.choice(VERBS)}_{b}({names.noun()}, {names.number()})"
    if kind == 6:
        words = " ".join(rng.choice(COMMENT_WORDS) for _ in range(rng.randint(3, 7)))
        return f"{indent}# {a} {words} {b}"
    if kind == 7:
        return f'{indent}{a} = {{"{b}": {names.number()}}}'
    return f"{indent}{a} = [{b} for {b} in {names.noun()} if {b}]"


def source_file(names: Names, lines: int) -> list[str]:
    """`lines` lines of Python-like code: functions of a few statements, loops and branches."""
    rng = names.rng
    out: list[str] = [f"import {names.noun()}", ""]
    while len(out) < lines:
        name, first, second = f"{rng.choice(VERBS)}_{names.noun()}", names.noun(), names.noun()
        out.append(f"def {name}({first}, {second}={names.number()}):")
        for _ in range(rng.randint(2, 6)):
            shape = rng.randrange(5)
            if shape == 0:
                out.append(f"    for {names.noun()} in {names.noun()}:")
                out.append(_statement(names, "        "))
            elif shape == 1:
                out.append(f"    if {names.noun()} > {names.number()}:")
                out.append(_statement(names, "        "))
            else:
                out.append(_statement(names, "    "))
        out.append(f"    return {names.noun()}")
        out.append("")
    return out[:lines]


@dataclass(frozen=True)
class EditedFile:
    """A file, the edits asked of it in words, and the file with them applied."""

    source: list[str]
    instructions: list[str]
    edited: list[str]

    def prompt(self) -> str:
        asks = "\n".join(f"- {instruction}" for instruction in self.instructions)
        return f"Edit this file:\n{asks}\n\n```python\n" + "\n".join(self.source) + "\n```"

    def answer(self) -> str:
        return "```python\n" + "\n".join(self.edited) + "\n```"

    def messages(self) -> list[dict[str, str]]:
        """The request's messages, without the answer."""
        return [{"role": "system", "content": EDIT_SYSTEM}, {"role": "user", "content": self.prompt()}]

    def example(self) -> dict[str, Any]:
        """A chat example of the fine-tune's dataset: the request and its answer."""
        return {"messages": [*self.messages(), {"role": "assistant", "content": self.answer()}]}


def edit_file(rng: random.Random, lines: int, edits: int = 2) -> EditedFile:
    """A new file of `lines` lines and `edits` small edits to it (a word changed, a number changed,
    a line removed or added), each on its own line, described by the line's number in the source."""
    names = Names(rng)
    source = source_file(names, lines)
    candidates = [number for number in range(2, len(source)) if source[number].strip()]
    chosen = sorted(rng.sample(candidates, k=min(edits, len(candidates))))
    edited = list(source)
    instructions: list[str] = []
    # From the bottom up, so that each edit's line number is still the source's.
    for number in reversed(chosen):
        line = source[number]
        kind = rng.randrange(3)
        words = [word for word in names.nouns if word in line.split()]
        if kind == 0 and words:
            old, new = rng.choice(words), names.noun()
            edited[number] = line.replace(old, new)
            instructions.append(f"On line {number + 1}, change `{old}` to `{new}`.")
        elif kind == 1:
            instructions.append(f"Delete line {number + 1}.")
            del edited[number]
        else:
            indent = line[: len(line) - len(line.lstrip())] or "    "
            added = _statement(names, indent)
            edited.insert(number + 1, added)
            instructions.append(f"After line {number + 1}, add `{added.strip()}`.")
    instructions.reverse()
    return EditedFile(source, instructions, edited)


def write_edit_dataset(where: Path, train: int, valid: int, lines: int, seed: int) -> Path:
    """`train.jsonl` and `valid.jsonl` of edit examples of `lines`-line files, in mlx-lm's chat format."""
    where.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, count in (("train.jsonl", train), ("valid.jsonl", valid)):
        with (where / name).open("w") as file:
            for _ in range(count):
                file.write(json.dumps(edit_file(rng, lines).example()) + "\n")
    return where


def random_prompt(rng: random.Random, words: int) -> list[dict[str, str]]:
    """A question of `words` words drawn at random: nothing in it for an answer to copy."""
    pool = NOUNS + VERBS + COMMENT_WORDS
    text = " ".join(rng.choice(pool) for _ in range(words))
    return [{"role": "user", "content": f"{text}?"}]
