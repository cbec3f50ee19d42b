"""Markdown for the agent corpus: the instructions a coding agent is given.

Paragraphs, lists, headings, fenced code, XML-like tags and environment listings, nested as system
prompts nest them. Tool descriptions (`agent_tools`) are written in it too.
"""

from __future__ import annotations

import random
from typing import Final

from mlxhost.demo.agent_code import json_example, python_code, shell_session, typescript_code
from mlxhost.demo.agent_sentences import cited, sentence
from mlxhost.demo.agent_vocabulary import adjective_or_participle, noun, noun_base, number, path, verb
from mlxhost.demo.agent_words import TAGS, TOPICS

__all__ = ["instructions", "markdown", "paragraph"]

_BULLETS: Final = ("- ", "- ", " - ", "* ", "  - ", "• ")
_LABEL_MARKS: Final = (":", " —", " -", ".", "")
_FENCES: Final = ("bash", "sh", "python", "typescript", "json", "markdown", "text", "")
_SETTINGS: Final = (
    "Yes", "No", "true", "false", "linux", "darwin", "bash", "zsh", "none", "enabled", "restricted",
)


def paragraph(rng: random.Random) -> str:
    """One to six sentences."""
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 6)))


def _list_item(rng: random.Random) -> str:
    item = sentence(rng)
    if rng.random() < 0.3:
        if rng.random() < 0.3:
            label = rng.choice(TOPICS)
        else:
            label = rng.choice((noun, adjective_or_participle, verb))(rng).capitalize()
        return f"**{label}**{rng.choice(_LABEL_MARKS)} {item}"
    if rng.random() < 0.2:
        return f"`{cited(rng)}` {rng.choice(('—', '-', ':'))} {item}"
    return item


def markdown(rng: random.Random, depth: int = 0) -> str:
    """One to five Markdown blocks; a tag inside a tag holds only a paragraph, so tags nest two deep."""
    blocks = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.35:
            blocks.append(paragraph(rng))
        elif r < 0.60:
            bullet = rng.choice(_BULLETS)
            numbered = rng.random() < 0.3
            items = [_list_item(rng) for _ in range(1, rng.randint(2, 8))]
            lines = (f"{n}. {item}" if numbered else bullet + item for n, item in enumerate(items, 1))
            blocks.append("\n".join(lines))
        elif r < 0.70:
            if rng.random() < 0.6:
                title = rng.choice(TOPICS)
            else:
                title = " ".join(noun_base(rng).capitalize() for _ in range(rng.randint(1, 3)))
            blocks.append(f"{'#' * rng.randint(1, 3)} {title}")
        elif r < 0.80:
            language = rng.choice(_FENCES)
            write = {"python": python_code, "typescript": typescript_code, "json": json_example}.get(language)
            blocks.append(f"```{language}\n{(write or shell_session)(rng)}\n```")
        elif r < 0.90:
            tag = rng.choice(TAGS)
            inner = paragraph(rng) if depth else markdown(rng, depth + 1)
            blocks.append(f"<{tag}>\n{inner}\n</{tag}>")
        else:
            blocks.append("\n".join(_setting(rng) for _ in range(rng.randint(1, 5))))
    return "\n\n".join(blocks)


def _setting(rng: random.Random) -> str:
    """A line of an environment listing: `Working directory: /tmp/x`."""
    key = noun_base(rng).capitalize()
    if rng.random() < 0.5:
        key += " " + noun_base(rng)
    r = rng.random()
    value = path(rng) if r < 1 / 3 else rng.choice(_SETTINGS) if r < 2 / 3 else number(rng)
    return f"{rng.choice(('', '- ', ' - '))}{key}: {value}"


def instructions(rng: random.Random) -> str:
    """One to three Markdown documents, one after another, as a system prompt strings them together."""
    return "\n\n".join(markdown(rng) for _ in range(rng.randint(1, 3)))
