"""Code for the agent corpus: shell sessions, Python, TypeScript and JSON, as agents read and write them.

Each is a corpus document of its own, and also what Markdown (`agent_markdown`) fences in its code
blocks. The comments, error messages and docstrings in it are sentences from `agent_sentences`.
"""

from __future__ import annotations

import json
import random
from typing import Final

from mlxhost.demo.agent_code_words import PYTHON_TYPES, TS_TYPES
from mlxhost.demo.agent_sentences import cited, command, sentence
from mlxhost.demo.agent_vocabulary import identifier, path

__all__ = ["json_example", "python_code", "shell_session", "typescript_code"]

_PYTHON_IMPORTS: Final = (
    "from __future__ import annotations", "import json", "import os", "from pathlib import Path",
    "from typing import Any", "import pytest", "import asyncio",
)


def json_example(rng: random.Random) -> str:
    """A small JSON object of names and what instructions cite, compact or indented."""
    value = {identifier(rng, "snake"): cited(rng) for _ in range(rng.randint(1, 4))}
    return json.dumps(value, ensure_ascii=False, indent=rng.choice((None, 2)))


def shell_session(rng: random.Random) -> str:
    """Shell command lines, some after a `$ ` or `# ` prompt, some followed by the paths they printed."""
    lines = []
    for _ in range(rng.randint(1, 6)):
        lines.append(f"{rng.choice(('$ ', '', '', '# '))}{command(rng)}")
        if rng.random() < 0.5:
            lines.extend(path(rng) for _ in range(rng.randint(1, 4)))
    return "\n".join(lines)


def _python_statement(rng: random.Random, body: str, indent: str) -> str:
    variable, other = identifier(rng, "snake"), identifier(rng, "snake")
    match rng.randrange(7):
        case 0:
            return f"{body}{variable} = {other}({identifier(rng, 'snake')})"
        case 1:
            message = f'f"{sentence(rng)} {{{variable}!r}}"'
            return f"{body}if not {variable}:\n{body}{indent}raise ValueError({message})"
        case 2:
            target = identifier(rng, "snake")
            return f"{body}for {variable} in {other}:\n{body}{indent}{target}.append({variable})"
        case 3:
            return f'{body}with open({variable}, encoding="utf-8") as f:\n{body}{indent}{other} = f.read()'
        case 4:
            return f"{body}{variable} = await {other}.{identifier(rng, 'snake')}()"
        case 5:
            return f"{body}assert {variable} == {other}"
        case _:
            return f"{body}self.{variable} = {other}"


def python_code(rng: random.Random) -> str:
    """A Python function (or a method, in a class) with type hints and a few statements."""
    indent = "    "
    name = identifier(rng, "snake")
    args = [f"{identifier(rng, 'snake')}: {rng.choice(PYTHON_TYPES)}" for _ in range(rng.randint(0, 3))]
    lines = []
    if rng.random() < 0.5:
        lines += [rng.choice(_PYTHON_IMPORTS), ""]
    prefix = ""
    if rng.random() < 0.3:
        lines += [f"class {identifier(rng, 'pascal')}:", f'{indent}"""{sentence(rng)}"""', ""]
        prefix, args = indent, ["self", *args]
    keyword = rng.choice(("def", "def", "async def"))
    lines.append(f"{prefix}{keyword} {name}({', '.join(args)}) -> {rng.choice(PYTHON_TYPES)}:")
    body = prefix + indent
    if rng.random() < 0.5:
        lines.append(f"{body}# {sentence(rng)}")
    lines += [_python_statement(rng, body, indent) for _ in range(rng.randint(1, 5))]
    lines.append(f"{body}return {identifier(rng, 'snake')}")
    return "\n".join(lines)


def _typescript_statement(rng: random.Random, indent: str) -> str:
    variable, other = identifier(rng, "camel"), identifier(rng, "camel")
    match rng.randrange(5):
        case 0:
            return f"{indent}const {variable} = await {other}.{identifier(rng, 'camel')}();"
        case 1:
            error = f"throw new Error(`{sentence(rng)} ${{{variable}}}`);"
            return f"{indent}if (!{variable}) {{\n{indent * 2}{error}\n{indent}}}"
        case 2:
            return f"{indent}// {sentence(rng)}"
        case 3:
            argument, result = identifier(rng, "camel"), identifier(rng, "camel")
            return f"{indent}let {variable} = {other}.map(({argument}) => {result});"
        case _:
            return f"{indent}console.log({variable});"


def typescript_code(rng: random.Random) -> str:
    """A TypeScript function, perhaps after an import and an interface."""
    indent = "  "
    lines = []
    if rng.random() < 0.5:
        lines.append(f'import {{ {identifier(rng, "camel")} }} from "./{identifier(rng, "camel")}";')
    if rng.random() < 0.4:
        lines.append(f"export interface {identifier(rng, 'pascal')} {{")
        for _ in range(rng.randint(1, 4)):
            field = identifier(rng, "camel") + rng.choice(("", "?"))
            lines.append(f"{indent}{field}: {rng.choice(TS_TYPES)};")
        lines.append("}")
    args = ", ".join(
        f"{identifier(rng, 'camel')}: {rng.choice(TS_TYPES)}" for _ in range(rng.randint(0, 3))
    )
    keyword = rng.choice(("export function", "export async function", "function", "const"))
    name = identifier(rng, "camel")
    if keyword == "const":
        lines.append(f"const {name} = ({args}): {rng.choice(TS_TYPES)} => {{")
    else:
        lines.append(f"{keyword} {name}({args}): {rng.choice(TS_TYPES)} {{")
    lines += [_typescript_statement(rng, indent) for _ in range(rng.randint(1, 4))]
    lines.append(f"{indent}return {identifier(rng, 'camel')};")
    lines.append("};" if keyword == "const" else "}")
    return "\n".join(lines)
