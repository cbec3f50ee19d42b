"""Single words for the agent corpus: drawn from the word lists, inflected, and made into names.

`Pick` draws a word with a weight that falls with its rank in its list, as words fall in real text.
The inflections (plural, third person, past, participle, gerund, comparison) follow the rules
English mostly follows, with the exceptions the word lists spell out. Identifiers, file paths and
numbers are the names and figures instructions cite; they are built from the same words.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Final

from mlxhost.demo.agent_code_words import ABBREVIATIONS, DIRECTORIES, EXTENSIONS
from mlxhost.demo.agent_nouns import IRREGULAR_PLURAL, NOUNS, UNCOUNTABLE
from mlxhost.demo.agent_verbs import DOUBLED, IRREGULAR_PARTICIPLE, IRREGULAR_PAST, VERBS
from mlxhost.demo.agent_words import ACRONYMS, ADJECTIVES, ADVERBS, PHRASES

__all__ = [
    "Pick",
    "acronym",
    "adjective",
    "adjective_or_participle",
    "adverb",
    "compared",
    "gerund",
    "identifier",
    "noun",
    "noun_base",
    "number",
    "participle",
    "past",
    "path",
    "phrase",
    "plural",
    "third_person",
    "verb",
    "verb_base",
]

_COMPOUND_PREFIXES: Final = ("sub", "multi", "non", "pre", "post", "re", "self", "cross", "well", "")
_FILE_NAMES: Final = (
    "README", "AGENTS", "CLAUDE", "CHANGELOG", "LICENSE", "Makefile", "package", "pyproject",
    "tsconfig", "index", "main", "__init__", "config", "setup", "settings", "MEMORY", "SKILL",
)
_ROOTS: Final = (
    "/", "./", "../", "~/", "/home/user/", "/tmp/", "/Users/dev/", "/workspace/", "$HOME/", "", "", "",
)
_ROUND_NUMBERS: Final = (
    30, 50, 60, 64, 90, 100, 120, 128, 200, 256, 270, 300, 500, 512, 1000, 1024, 1200, 1800, 2000,
    3600, 4096, 8000, 10000, 30000, 60000, 120000, 600000,
)
_UNITS: Final = ("s", "ms", "m", "h", "k", "K", "KB", "MB", "GB", "%", "px", "x", "+")
_RANGES: Final = ("–", "-", "–", " to ", "…", "/", "×", " → ", "-")


class Pick:
    """Draws from word lists with weights falling with rank, as words in real text do (Zipf)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)
        self.cum_weights = list(itertools.accumulate(1.0 / (rank + 8) for rank in range(len(self.words))))

    def __call__(self, rng: random.Random) -> str:
        return rng.choices(self.words, cum_weights=self.cum_weights)[0]


noun_base: Final = Pick(NOUNS)
verb_base: Final = Pick(VERBS)
adjective: Final = Pick(ADJECTIVES)
adverb: Final = Pick(ADVERBS)
phrase: Final = Pick(PHRASES)
acronym: Final = Pick(ACRONYMS)


# Words, inflected by the rules English mostly follows.


def plural(word: str) -> str:
    """The plural of the noun `word` (an uncountable one stays as it is)."""
    if word in UNCOUNTABLE:
        return word
    if word in IRREGULAR_PLURAL:
        return IRREGULAR_PLURAL[word]
    if word.endswith(("s", "x", "sh", "ch", "z")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def third_person(word: str) -> str:
    """The verb `word` after he, she or it: runs, fixes, has."""
    if word == "have":
        return "has"
    if word.endswith(("s", "x", "sh", "ch", "z", "o")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def past(word: str) -> str:
    """The past tense of the verb `word`: ran, committed, used."""
    if word in IRREGULAR_PAST:
        return IRREGULAR_PAST[word]
    if word in DOUBLED:
        return word + word[-1] + "ed"
    if word.endswith("e"):
        return word + "d"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ied"
    return word + "ed"


def participle(word: str) -> str:
    """The past participle of the verb `word`: written, committed, used."""
    return IRREGULAR_PARTICIPLE.get(word) or past(word)


def gerund(word: str) -> str:
    """The verb `word` with -ing: running, writing, tying."""
    if word in DOUBLED:
        return word + word[-1] + "ing"
    if word.endswith("ie"):
        return word[:-2] + "ying"
    if word.endswith("e") and not word.endswith(("ee", "ye", "oe")):
        return word[:-1] + "ing"
    return word + "ing"


def noun(rng: random.Random) -> str:
    """A noun, singular or plural, or an acronym, or a hyphenated compound."""
    r = rng.random()
    if r < 0.06:
        return acronym(rng)
    if r < 0.09:
        # Compounds: sub-agent, multi-step, read-only.
        prefix = rng.choice(_COMPOUND_PREFIXES) or adjective(rng)
        return f"{prefix}-{noun_base(rng)}"
    base = noun_base(rng)
    return plural(base) if r < 0.4 else base


def verb(rng: random.Random, form: Callable[[str], str] = str) -> str:
    """A verb in `form` (the base form by default), or now and then in any of its forms."""
    r = rng.random()
    base = verb_base(rng)
    if rng.random() < 0.2:
        # Any form anywhere: the grammar suffers, the coverage of each verb's forms does not.
        form = rng.choice((str, third_person, past, participle, gerund))
    if r < 0.04:
        base = "re" + base if not base.startswith("re") else base
    elif r < 0.06:
        base = "un" + base if not base.startswith("un") else base
    return form(base)


def adjective_or_participle(rng: random.Random) -> str:
    """What may stand before a noun: an adjective (perhaps compared), a participle, a gerund."""
    r = rng.random()
    if r < 0.15:
        return participle(verb_base(rng))
    if r < 0.22:
        return gerund(verb_base(rng))
    if r < 0.25:
        return "non-" + adjective(rng)
    if r < 0.30:
        return compared(adjective(rng), rng.choice(("er", "est", "ly")))
    return adjective(rng)


def compared(word: str, suffix: str) -> str:
    """The adjective `word` with -er, -est or -ly (or more and most, for long ones)."""
    if suffix == "ly":
        if word.endswith("le"):
            return word[:-1] + "y"
        return word[:-1] + "ily" if word.endswith("y") else word + "ly"
    if "-" in word or len(word) > 7:
        return f"{'more' if suffix == 'er' else 'most'} {word}"
    if word.endswith("y"):
        return word[:-1] + "i" + suffix
    return word + suffix[1:] if word.endswith("e") else word + suffix


# Names and figures, for instructions to cite and code to use.


def identifier(rng: random.Random, style: str) -> str:
    """A name made of words, in `style`: snake, kebab, pascal, upper or (anything else) camel case."""
    parts = [verb_base(rng)] if rng.random() < 0.5 else []
    parts += [noun_base(rng) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.4:
        parts.insert(rng.choice((0, len(parts))), rng.choice(ABBREVIATIONS))
    parts = [part.replace("-", "_").replace("'", "") for part in parts]
    if style == "snake":
        return "_".join(parts)
    if style == "kebab":
        return "-".join(parts).replace("_", "-")
    if style == "pascal":
        return "".join(part.replace("_", " ").title().replace(" ", "") for part in parts)
    if style == "upper":
        return "_".join(parts).upper()
    head, *rest = parts
    return head + "".join(part.title().replace("_", "") for part in rest)


def path(rng: random.Random) -> str:
    """A file path: a root (or none), up to four directories, and a file name with its extension."""
    parts = [rng.choice(DIRECTORIES) for _ in range(rng.randint(0, 4))]
    name = identifier(rng, rng.choice(("snake", "snake", "kebab", "pascal", "camel")))
    if rng.random() < 0.1:
        name = rng.choice(_FILE_NAMES)
    return rng.choice(_ROOTS) + "/".join([*parts, f"{name}.{rng.choice(EXTENSIONS)}"])


def number(rng: random.Random) -> str:
    """A number as instructions write one: small, round, decimal or a year, perhaps with a unit or a range."""
    r = rng.random()
    if r < 0.4:
        text = str(rng.randint(0, 20))
    elif r < 0.7:
        text = str(rng.choice(_ROUND_NUMBERS))
    elif r < 0.8:
        text = str(rng.randint(0, 9999))
    elif r < 0.9:
        text = f"{rng.randint(0, 99)}.{rng.randint(0, 9)}"
    else:
        text = str(rng.randint(2000, 2030))
    r = rng.random()
    if r < 0.15:
        # A unit, or a range: 30s, 5–10, 2x.
        text += rng.choice(_UNITS)
    elif r < 0.25:
        text += rng.choice(_RANGES) + str(rng.randint(1, 99))
    return text
