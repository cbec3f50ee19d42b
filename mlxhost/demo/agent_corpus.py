"""The text the agent demo tokenizer is trained on: what coding agents send, made up here.

A coding agent's first request is mostly instructions in English and Markdown, and tool
definitions as JSON Schema whose descriptions are more of the same, JSON-escaped (a newline is the
two characters `\\n`); then shell commands, file paths and code. All of it is generated from the
word lists in `agent_words` and the templates below by a `random.Random` with a fixed seed, whose
sequence is the same on every Python version and machine, so the vocabulary trained on it is
byte-identical everywhere. Nothing is read from disk.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Sequence
from typing import Any, Final

from mlxhost.demo import agent_words as w

__all__ = ["agent_corpus"]

_SEED: Final = 20250801

_DETERMINERS: Final = (
    "the", "the", "the", "the", "the", "a", "a", "an", "this", "that", "these", "those", "each",
    "every", "any", "some", "all", "your", "its", "their", "our", "the same", "another", "no",
    "one", "both", "either", "which", "what", "my", "his", "her", "such",
)
_PREPOSITIONS: Final = (
    "in", "in", "in", "on", "on", "for", "for", "for", "with", "with", "to", "to", "to", "of",
    "of", "of", "from", "by", "at", "into", "about", "over", "under", "through", "without",
    "within", "between", "after", "before", "during", "across", "against", "along", "around",
    "inside", "outside", "via", "per", "like", "than", "toward", "onto", "upon", "beyond",
)
_CONNECTIVES: Final = (
    "and", "and", "and", "or", "but", "so", "because", "while", "when", "if", "unless",
    "although", "since", "until", "whereas", "then", "as", "where", "once", "before", "after",
)
_MODALS: Final = (
    "should", "must", "can", "may", "might", "will", "would", "could", "need to", "have to",
    "should not", "must not", "cannot", "can't", "won't", "shouldn't", "do not", "don't",
    "should always", "must never", "can also", "will then", "are able to", "are allowed to",
)
_COPULAS: Final = (
    "is", "is", "are", "was", "were", "be", "been", "being", "is not", "isn't", "are not",
    "aren't", "must be", "should be", "can be", "will be", "may be", "might be", "has been",
    "have been", "becomes", "seems", "looks", "stays", "remains",
)
_EMPHASIS: Final = (
    "IMPORTANT", "NOTE", "Note", "CRITICAL", "Tip", "Warning", "NEVER", "ALWAYS", "MUST", "DO NOT",
    "ONLY", "NOT", "YOU MUST", "Example", "Usage", "Good", "Bad", "Why", "How to apply",
)
_UNICODE: Final = (
    "—", "—", "—", "–", "…", "“", "”", "‘", "’", "’", "→", "←", "•", "✓", "✗", "≥", "≤", "×", "·", "±",
)
_COMPOUND_PREFIXES: Final = ("sub", "multi", "non", "pre", "post", "re", "self", "cross", "well", "")
_QUOTES: Final = ("`{}`", "'{}'", '"{}"', "“{}”", "{}", "<{}>", "**{}**", "*{}*")
_PRONOUNS: Final = (
    "it", "them", "this", "that", "something", "anything", "everything", "nothing", "one", "yourself",
)
_GERUND_LEADS: Final = ("before", "after", "by", "without", "when", "while", "instead of", "for")
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
_BOUNDS: Final = ("up to", "at most", "at least", "about", "max", "over", "under")
_SCHEMA_URLS: Final = (
    "http://json-schema.org/draft-07/schema#",
    "https://json-schema.org/draft/2020-12/schema",
)
_STRING_FORMATS: Final = ("uri", "date-time", "email", "uuid", "path", "date", "hostname", "ipv4")
_STARTS: Final = (
    "You are", "You are an", "You are a", "Here is", "Here are", "This is", "There is",
    "There are", "It is", "If", "When", "Before", "After", "While", "Unless", "Once", "Use",
    "Do not", "Never", "Always", "Only", "Prefer", "Avoid", "Make sure", "Remember that",
    "Note that", "Keep in mind that", "For example,", "Otherwise,", "However,", "Instead,",
    "In that case,", "Then", "Finally,", "First,", "Next,", "Also,", "By default,",
)


class _Pick:
    """Draws from word lists with weights falling with rank, as words in real text do (Zipf)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)
        self.cum_weights = list(itertools.accumulate(1.0 / (rank + 8) for rank in range(len(self.words))))

    def __call__(self, rng: random.Random) -> str:
        return rng.choices(self.words, cum_weights=self.cum_weights)[0]


_noun_base: Final = _Pick(w.NOUNS)
_verb_base: Final = _Pick(w.VERBS)
_adjective: Final = _Pick(w.ADJECTIVES)
_adverb: Final = _Pick(w.ADVERBS)
_phrase: Final = _Pick(w.PHRASES)
_acronym: Final = _Pick(w.ACRONYMS)
_ASIDES: Final = (
    "optional", "required", "default: {n}", "if any", "see below", "see above", "e.g. {c}",
    "for example {c}", "i.e. {c}", "in {n} seconds", "max {n}", "not {c}", "{c}", "such as {c}",
    "defaults to {n}", "recommended", "deprecated", "or {c}", "if set", "when {c} is set",
)


def agent_corpus(documents: int) -> list[str]:
    """`documents` pieces of agent-like text, the same on every machine."""
    rng = random.Random(_SEED)
    kinds: Sequence[tuple[float, Callable[[random.Random], str]]] = (
        (0.34, _instructions),
        (0.40, _tool_definitions),
        (0.06, _shell_session),
        (0.08, _python),
        (0.06, _typescript),
        (0.06, _tool_call),
    )
    weights = [weight for weight, _ in kinds]
    makers = [maker for _, maker in kinds]
    return [rng.choices(makers, weights)[0](rng) for _ in range(documents)]


# Words, inflected by the rules English mostly follows.


def _plural(noun: str) -> str:
    if noun in w.UNCOUNTABLE:
        return noun
    if noun in w.IRREGULAR_PLURAL:
        return w.IRREGULAR_PLURAL[noun]
    if noun.endswith(("s", "x", "sh", "ch", "z")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _third_person(verb: str) -> str:
    if verb == "have":
        return "has"
    if verb.endswith(("s", "x", "sh", "ch", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _past(verb: str) -> str:
    if verb in w.IRREGULAR_PAST:
        return w.IRREGULAR_PAST[verb]
    if verb in w.DOUBLED:
        return verb + verb[-1] + "ed"
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2:-1] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


def _participle(verb: str) -> str:
    return w.IRREGULAR_PARTICIPLE.get(verb) or _past(verb)


def _gerund(verb: str) -> str:
    if verb in w.DOUBLED:
        return verb + verb[-1] + "ing"
    if verb.endswith("ie"):
        return verb[:-2] + "ying"
    if verb.endswith("e") and not verb.endswith(("ee", "ye", "oe")):
        return verb[:-1] + "ing"
    return verb + "ing"


def _noun(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.06:
        return _acronym(rng)
    if r < 0.09:
        # Compounds: sub-agent, multi-step, read-only.
        prefix = rng.choice(_COMPOUND_PREFIXES) or _adjective(rng)
        return f"{prefix}-{_noun_base(rng)}"
    noun = _noun_base(rng)
    return _plural(noun) if r < 0.4 else noun


def _aside(rng: random.Random) -> str:
    text = rng.choice(_ASIDES)
    return "(" + text.replace("{n}", _number(rng)).replace("{c}", _quoted(rng)) + ")"


def _quoted(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        word = _identifier(rng, rng.choice(("snake", "camel")))
    elif r < 0.5:
        word = _noun(rng)
    elif r < 0.6:
        word = _acronym(rng)
    elif r < 0.7:
        word = _verb(rng)
    elif r < 0.8:
        word = _adjective(rng)
    else:
        word = _noun_phrase(rng)
    return rng.choice(_QUOTES).format(word)


def _verb(rng: random.Random, form: Callable[[str], str] = str) -> str:
    r = rng.random()
    verb = _verb_base(rng)
    if rng.random() < 0.2:
        # Any form anywhere: the grammar suffers, the coverage of each verb's forms does not.
        form = rng.choice((str, _third_person, _past, _participle, _gerund))
    if r < 0.04:
        verb = "re" + verb if not verb.startswith("re") else verb
    elif r < 0.06:
        verb = "un" + verb if not verb.startswith("un") else verb
    return form(verb)


def _adjective_or_participle(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.15:
        return _participle(_verb_base(rng))
    if r < 0.22:
        return _gerund(_verb_base(rng))
    if r < 0.25:
        return "non-" + _adjective(rng)
    if r < 0.30:
        return _compared(_adjective(rng), rng.choice(("er", "est", "ly")))
    return _adjective(rng)


def _compared(adjective: str, suffix: str) -> str:
    """`adjective` with -er, -est or -ly (or more and most, for long ones)."""
    if suffix == "ly":
        if adjective.endswith("le"):
            return adjective[:-1] + "y"
        return adjective[:-1] + "ily" if adjective.endswith("y") else adjective + "ly"
    if "-" in adjective or len(adjective) > 7:
        return f"{'more' if suffix == 'er' else 'most'} {adjective}"
    if adjective.endswith("y"):
        return adjective[:-1] + "i" + suffix
    return adjective + suffix[1:] if adjective.endswith("e") else adjective + suffix


def _noun_phrase(rng: random.Random) -> str:
    words = [rng.choice(_DETERMINERS)]
    if rng.random() < 0.4:
        if rng.random() < 0.1:
            words.append(_adverb(rng))
        words.append(_adjective_or_participle(rng))
    r = rng.random()
    if r < 0.12:
        words.append(_noun_base(rng))
    words.append(rng.choice(w.COMPOUNDS) if r > 0.85 else _noun(rng))
    if words[0] in ("a", "an"):
        words[0] = "an" if words[1][0] in "aeiou" else "a"
    if rng.random() < 0.1:
        words += ["of", _noun_phrase(rng)]
    elif rng.random() < 0.08:
        words.append(_aside(rng) if rng.random() < 0.6 else f"({_cited(rng)})")
    elif rng.random() < 0.08:
        words.append(_quoted(rng))
    if rng.random() < 0.03:
        words[-1] = words[-1].upper()
    return " ".join(words)


def _verb_phrase(rng: random.Random, form: Callable[[str], str] = str) -> str:
    words = []
    if rng.random() < 0.15:
        words.append(_adverb(rng))
    if rng.random() < 0.1:
        verb, particle = rng.choice(w.PARTICLE_VERBS).split(" ", 1)
        words.append(f"{form(verb)} {particle}")
    else:
        words.append(_verb(rng, form))
    r = rng.random()
    if r < 0.7:
        words.append(_noun_phrase(rng))
    elif r < 0.8:
        words.append(rng.choice(_PRONOUNS))
    if rng.random() < 0.45:
        words += [rng.choice(_PREPOSITIONS), _noun_phrase(rng)]
    if rng.random() < 0.1:
        words.append(_adverb(rng))
    r = rng.random()
    if r < 0.1:
        words += ["to", _verb(rng), _noun_phrase(rng)]
    elif r < 0.2:
        words += [rng.choice(_GERUND_LEADS), _verb(rng, _gerund), _noun_phrase(rng)]
    return " ".join(words)


def _identifier(rng: random.Random, style: str) -> str:
    parts = [_verb_base(rng)] if rng.random() < 0.5 else []
    parts += [_noun_base(rng) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.4:
        parts.insert(rng.choice((0, len(parts))), rng.choice(w.ABBREVIATIONS))
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


def _path(rng: random.Random) -> str:
    parts = [rng.choice(w.DIRECTORIES) for _ in range(rng.randint(0, 4))]
    name = _identifier(rng, rng.choice(("snake", "snake", "kebab", "pascal", "camel")))
    if rng.random() < 0.1:
        name = rng.choice(_FILE_NAMES)
    return rng.choice(_ROOTS) + "/".join([*parts, f"{name}.{rng.choice(w.EXTENSIONS)}"])


def _number(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.4:
        number = str(rng.randint(0, 20))
    elif r < 0.7:
        number = str(rng.choice(_ROUND_NUMBERS))
    elif r < 0.8:
        number = str(rng.randint(0, 9999))
    elif r < 0.9:
        number = f"{rng.randint(0, 99)}.{rng.randint(0, 9)}"
    else:
        number = str(rng.randint(2000, 2030))
    r = rng.random()
    if r < 0.15:
        # A unit, or a range: 30s, 5–10, 2x.
        number += rng.choice(_UNITS)
    elif r < 0.25:
        number += rng.choice(_RANGES) + str(rng.randint(1, 99))
    return number


def _cited(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return _path(rng)
    if r < 0.5:
        return _identifier(rng, rng.choice(("snake", "camel")))
    if r < 0.65:
        return _identifier(rng, "pascal")
    if r < 0.85:
        return _command(rng)
    return f"{_identifier(rng, 'snake')}={_number(rng)}"


# English and Markdown.

_PERFECT: Final = ("has", "have", "had", "was", "were")
_CONDITIONS: Final = ("asks you to", "explicitly asks", "says so", "approves it", "needs it", "requests it")
_PURPOSES: Final = ("to", "when you need to", "whenever you", "only to", "to help")
_TOOL_SUBJECTS: Final = ("this tool", "the tool", "it", "the command")
_ENDINGS: Final = (".", ".", ".", ".", ".", ".", ":", "!", "?", ";", " :)")
_BULLETS: Final = ("- ", "- ", " - ", "* ", "  - ", "• ")
_LABEL_MARKS: Final = (":", " —", " -", ".", "")
_FENCES: Final = ("bash", "sh", "python", "typescript", "json", "markdown", "text", "")
_SETTINGS: Final = (
    "Yes", "No", "true", "false", "linux", "darwin", "bash", "zsh", "none", "enabled", "restricted",
)


def _clause(rng: random.Random) -> str:
    subject = rng.choice(w.SUBJECTS)
    r = rng.random()
    if r < 0.3:
        verb = _verb(rng) if subject in ("you", "they", "we") else _verb(rng, _third_person)
        return f"{subject} {verb} {_noun_phrase(rng)}"
    if r < 0.5:
        return f"{subject} {rng.choice(_MODALS)} {_verb_phrase(rng)}"
    if r < 0.65:
        return f"{_noun_phrase(rng)} {rng.choice(_COPULAS)} {_adjective_or_participle(rng)}"
    if r < 0.8:
        return f"{subject} {rng.choice(_PERFECT)} {_participle(_verb_base(rng))} {_noun_phrase(rng)}"
    return (
        f"{_noun_phrase(rng)} {rng.choice(_COPULAS)} {_participle(_verb_base(rng))} "
        f"{rng.choice(_PREPOSITIONS)} {_noun_phrase(rng)}"
    )


def _clause_or_verb_phrase(rng: random.Random) -> str:
    return _clause(rng) if rng.random() < 0.5 else _verb_phrase(rng)


def _sentence(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.14:
        text = _verb_phrase(rng)
    elif r < 0.30:
        text = _clause(rng)
    elif r < 0.40:
        text = f"{rng.choice(_CONNECTIVES)} {_clause(rng)}, {_clause_or_verb_phrase(rng)}"
    elif r < 0.46:
        text = f"do not {_verb_phrase(rng)} unless {rng.choice(w.SUBJECTS)} {rng.choice(_CONDITIONS)}"
    elif r < 0.52:
        text = f"use this tool {rng.choice(_PURPOSES)} {_verb_phrase(rng)}"
    elif r < 0.58:
        subject = rng.choice(_TOOL_SUBJECTS)
        text = f"{subject} {_verb_phrase(rng, _third_person)} and {_verb_phrase(rng, _third_person)}"
    elif r < 0.66:
        text = f"{rng.choice(_STARTS)} {_clause_or_verb_phrase(rng)}"
    elif r < 0.72:
        # Sentences and list items that open on any word, capitalized.
        first = rng.choice((_adjective_or_participle, _noun, _adverb))(rng)
        text = f"{first} {_noun_phrase(rng) if rng.random() < 0.5 else _verb_phrase(rng)}"
    elif r < 0.75:
        text = f"{_phrase(rng)}, {_clause(rng)} {rng.choice(_CONNECTIVES)} {_clause(rng)}"
    elif r < 0.79:
        text = (
            f"{_gerund(_verb_base(rng))} {_noun_phrase(rng)} {_phrase(rng)} {_noun_phrase(rng)} "
            f"{rng.choice(_COPULAS)} {_adjective(rng)}"
        )
    elif r < 0.84:
        subject = _noun_phrase(rng)
        text = f"{subject} that {_clause(rng)} {rng.choice(_COPULAS)} {_adjective_or_participle(rng)}"
    elif r < 0.90:
        items = [_noun_phrase(rng) for _ in range(rng.randint(2, 4))]
        text = f"{_clause(rng)}: {', '.join(items[:-1])}, and {items[-1]}"
    else:
        parts = (_phrase(rng) if rng.random() < 0.4 else _verb_phrase(rng) for _ in range(rng.randint(2, 4)))
        text = " ".join(parts)
    if rng.random() < 0.25:
        cited = _cited(rng)
        text += f" {rng.choice(_PREPOSITIONS)} `{cited}`" if rng.random() < 0.8 else f" ({cited})"
    if rng.random() < 0.1:
        text += f" {rng.choice(_UNICODE)} {_clause(rng)}"
    if rng.random() < 0.08:
        text += f" {rng.choice(_BOUNDS)} {_number(rng)} {_noun(rng)}"
    if rng.random() < 0.08:
        text += f" {_aside(rng)}"
    if rng.random() < 0.15:
        # Some writers (and their editors) use the typographic apostrophe.
        text = text.replace("'", "’")
    text = text[0].upper() + text[1:]
    if rng.random() < 0.07:
        text = f"{rng.choice(_EMPHASIS)}: {text}"
    elif rng.random() < 0.03:
        first, _, rest = text.partition(" ")
        text = f"{first.upper()} {rest}"
    return text + rng.choice(_ENDINGS)


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 6)))


def _list_item(rng: random.Random) -> str:
    item = _sentence(rng)
    if rng.random() < 0.3:
        if rng.random() < 0.3:
            label = rng.choice(w.TOPICS)
        else:
            label = rng.choice((_noun, _adjective_or_participle, _verb))(rng).capitalize()
        return f"**{label}**{rng.choice(_LABEL_MARKS)} {item}"
    if rng.random() < 0.2:
        return f"`{_cited(rng)}` {rng.choice(('—', '-', ':'))} {item}"
    return item


def _markdown(rng: random.Random, depth: int = 0) -> str:
    blocks = []
    for _ in range(rng.randint(1, 5)):
        r = rng.random()
        if r < 0.35:
            blocks.append(_paragraph(rng))
        elif r < 0.60:
            bullet = rng.choice(_BULLETS)
            numbered = rng.random() < 0.3
            items = [_list_item(rng) for _ in range(1, rng.randint(2, 8))]
            lines = (f"{n}. {item}" if numbered else bullet + item for n, item in enumerate(items, 1))
            blocks.append("\n".join(lines))
        elif r < 0.70:
            if rng.random() < 0.6:
                title = rng.choice(w.TOPICS)
            else:
                title = " ".join(_noun_base(rng).capitalize() for _ in range(rng.randint(1, 3)))
            blocks.append(f"{'#' * rng.randint(1, 3)} {title}")
        elif r < 0.80:
            language = rng.choice(_FENCES)
            write = {"python": _python, "typescript": _typescript, "json": _json_example}.get(language)
            blocks.append(f"```{language}\n{(write or _shell_session)(rng)}\n```")
        elif r < 0.90:
            tag = rng.choice(w.TAGS)
            inner = _paragraph(rng) if depth else _markdown(rng, depth + 1)
            blocks.append(f"<{tag}>\n{inner}\n</{tag}>")
        else:
            blocks.append("\n".join(_setting(rng) for _ in range(rng.randint(1, 5))))
    return "\n\n".join(blocks)


def _setting(rng: random.Random) -> str:
    """A line of an environment listing: `Working directory: /tmp/x`."""
    key = _noun_base(rng).capitalize()
    if rng.random() < 0.5:
        key += " " + _noun_base(rng)
    r = rng.random()
    value = _path(rng) if r < 1 / 3 else rng.choice(_SETTINGS) if r < 2 / 3 else _number(rng)
    return f"{rng.choice(('', '- ', ' - '))}{key}: {value}"


def _instructions(rng: random.Random) -> str:
    return "\n\n".join(_markdown(rng) for _ in range(rng.randint(1, 3)))


# JSON Schema, as tools are defined to a model.


def _description(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.35:
        return _sentence(rng)
    if r < 0.6:
        return _paragraph(rng)
    return _markdown(rng)


def _enum_value(rng: random.Random) -> str:
    return _identifier(rng, rng.choice(("snake", "kebab"))) if rng.random() < 0.3 else _noun_base(rng)


def _property_schema(rng: random.Random, depth: int) -> dict[str, Any]:
    r = rng.random()
    schema: dict[str, Any]
    if r < 0.40:
        schema = {"type": "string"}
        if rng.random() < 0.1:
            schema["format"] = rng.choice(_STRING_FORMATS)
        if rng.random() < 0.05:
            schema["minLength"] = 1
    elif r < 0.52:
        schema = {"type": rng.choice(("number", "integer"))}
        if rng.random() < 0.3:
            schema["minimum"] = rng.choice((0, 1))
        if rng.random() < 0.2:
            # The last is JavaScript's largest safe integer, which TypeScript schemas often carry.
            schema["maximum"] = rng.choice((10, 20, 100, 1000, 2000, 600000, 9007199254740991))
        if rng.random() < 0.05:
            schema["exclusiveMinimum"] = 0
    elif r < 0.62:
        schema = {"type": "boolean"}
        if rng.random() < 0.3:
            schema["default"] = rng.random() < 0.5
    elif r < 0.74:
        schema = {"type": "string", "enum": [_enum_value(rng) for _ in range(rng.randint(2, 5))]}
    elif r < 0.90 or depth > 1:
        items = _property_schema(rng, depth + 1) if depth < 2 else {"type": "string"}
        schema = {"type": "array", "items": items}
        if rng.random() < 0.2:
            schema[rng.choice(("minItems", "maxItems"))] = rng.randint(1, 8)
    else:
        schema = _object_schema(rng, depth + 1)
    if rng.random() < 0.75:
        schema["description"] = _description(rng) if rng.random() < 0.4 else _sentence(rng)
    if rng.random() < 0.05 and depth == 0:
        schema = {"anyOf": [schema, {"type": "null"}]}
    elif rng.random() < 0.05:
        schema = {"type": [schema.pop("type"), "null"], **schema}
    return schema


def _object_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    names = [_identifier(rng, rng.choice(("snake", "snake", "camel"))) for _ in range(rng.randint(1, 6))]
    names = list(dict.fromkeys(names))
    properties = {name: _property_schema(rng, depth) for name in names}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if rng.random() < 0.8:
        schema["required"] = [n for n in names if rng.random() < 0.6] or names[:1]
    if rng.random() < 0.6:
        schema["additionalProperties"] = False
    if depth == 0 and rng.random() < 0.3:
        schema["$schema"] = rng.choice(_SCHEMA_URLS)
    if rng.random() < 0.3:
        # Keys in either order: tools from different clients write them differently.
        schema = dict(reversed(list(schema.items())))
    return schema


def _tool_definitions(rng: random.Random) -> str:
    tools = []
    for _ in range(rng.randint(1, 3)):
        name = _identifier(rng, rng.choice(("snake", "pascal", "pascal", "camel")))
        function: dict[str, Any] = {
            "name": name,
            "description": _description(rng),
            "parameters": _object_schema(rng),
        }
        if rng.random() < 0.2:
            function["strict"] = rng.random() < 0.5
        # As a chat template writes them with `tojson`: json.dumps's default separators, unicode as is.
        tools.append(json.dumps({"type": "function", "function": function}, ensure_ascii=False))
    return "\n".join(tools)


def _json_example(rng: random.Random) -> str:
    value = {_identifier(rng, "snake"): _cited(rng) for _ in range(rng.randint(1, 4))}
    return json.dumps(value, ensure_ascii=False, indent=rng.choice((None, 2)))


def _argument(rng: random.Random) -> str | int:
    r = rng.random()
    if r < 0.4:
        return _path(rng)
    if r < 0.6:
        return _command(rng)
    return _sentence(rng) if r < 0.9 else rng.randint(0, 1000)


def _tool_call(rng: random.Random) -> str:
    name = _identifier(rng, rng.choice(("snake", "pascal")))
    arguments = {_identifier(rng, "snake"): _argument(rng) for _ in range(rng.randint(1, 3))}
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{call}\n</tool_call>"


# The shell and code.

_PYTHON_IMPORTS: Final = (
    "from __future__ import annotations", "import json", "import os", "from pathlib import Path",
    "from typing import Any", "import pytest", "import asyncio",
)


def _command(rng: random.Random) -> str:
    program = rng.choice(w.PROGRAMS)
    r = rng.random()
    if r < 0.4:
        argument = _path(rng)
    elif r < 0.6:
        argument = f'"{_identifier(rng, rng.choice(("snake", "camel")))}"'
    elif r < 0.75:
        argument = f'"{_sentence(rng)}"'
    else:
        argument = ""
    command = f"{program} {argument}".rstrip()
    if rng.random() < 0.2:
        command += f" {rng.choice(('&&', '|', '||', ';', '2>&1 |', '>'))} {rng.choice(w.PROGRAMS)}"
    return command


def _shell_session(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 6)):
        lines.append(f"{rng.choice(('$ ', '', '', '# '))}{_command(rng)}")
        if rng.random() < 0.5:
            lines.extend(_path(rng) for _ in range(rng.randint(1, 4)))
    return "\n".join(lines)


def _python_statement(rng: random.Random, body: str, indent: str) -> str:
    variable, other = _identifier(rng, "snake"), _identifier(rng, "snake")
    match rng.randrange(7):
        case 0:
            return f"{body}{variable} = {other}({_identifier(rng, 'snake')})"
        case 1:
            message = f'f"{_sentence(rng)} {{{variable}!r}}"'
            return f"{body}if not {variable}:\n{body}{indent}raise ValueError({message})"
        case 2:
            target = _identifier(rng, "snake")
            return f"{body}for {variable} in {other}:\n{body}{indent}{target}.append({variable})"
        case 3:
            return f'{body}with open({variable}, encoding="utf-8") as f:\n{body}{indent}{other} = f.read()'
        case 4:
            return f"{body}{variable} = await {other}.{_identifier(rng, 'snake')}()"
        case 5:
            return f"{body}assert {variable} == {other}"
        case _:
            return f"{body}self.{variable} = {other}"


def _python(rng: random.Random) -> str:
    indent = "    "
    name = _identifier(rng, "snake")
    args = [f"{_identifier(rng, 'snake')}: {rng.choice(w.PYTHON_TYPES)}" for _ in range(rng.randint(0, 3))]
    lines = []
    if rng.random() < 0.5:
        lines += [rng.choice(_PYTHON_IMPORTS), ""]
    prefix = ""
    if rng.random() < 0.3:
        lines += [f"class {_identifier(rng, 'pascal')}:", f'{indent}"""{_sentence(rng)}"""', ""]
        prefix, args = indent, ["self", *args]
    keyword = rng.choice(("def", "def", "async def"))
    lines.append(f"{prefix}{keyword} {name}({', '.join(args)}) -> {rng.choice(w.PYTHON_TYPES)}:")
    body = prefix + indent
    if rng.random() < 0.5:
        lines.append(f"{body}# {_sentence(rng)}")
    lines += [_python_statement(rng, body, indent) for _ in range(rng.randint(1, 5))]
    lines.append(f"{body}return {_identifier(rng, 'snake')}")
    return "\n".join(lines)


def _typescript_statement(rng: random.Random, indent: str) -> str:
    variable, other = _identifier(rng, "camel"), _identifier(rng, "camel")
    match rng.randrange(5):
        case 0:
            return f"{indent}const {variable} = await {other}.{_identifier(rng, 'camel')}();"
        case 1:
            error = f"throw new Error(`{_sentence(rng)} ${{{variable}}}`);"
            return f"{indent}if (!{variable}) {{\n{indent * 2}{error}\n{indent}}}"
        case 2:
            return f"{indent}// {_sentence(rng)}"
        case 3:
            argument, result = _identifier(rng, "camel"), _identifier(rng, "camel")
            return f"{indent}let {variable} = {other}.map(({argument}) => {result});"
        case _:
            return f"{indent}console.log({variable});"


def _typescript(rng: random.Random) -> str:
    indent = "  "
    lines = []
    if rng.random() < 0.5:
        lines.append(f'import {{ {_identifier(rng, "camel")} }} from "./{_identifier(rng, "camel")}";')
    if rng.random() < 0.4:
        lines.append(f"export interface {_identifier(rng, 'pascal')} {{")
        for _ in range(rng.randint(1, 4)):
            field = _identifier(rng, "camel") + rng.choice(("", "?"))
            lines.append(f"{indent}{field}: {rng.choice(w.TS_TYPES)};")
        lines.append("}")
    args = ", ".join(
        f"{_identifier(rng, 'camel')}: {rng.choice(w.TS_TYPES)}" for _ in range(rng.randint(0, 3))
    )
    keyword = rng.choice(("export function", "export async function", "function", "const"))
    name = _identifier(rng, "camel")
    if keyword == "const":
        lines.append(f"const {name} = ({args}): {rng.choice(w.TS_TYPES)} => {{")
    else:
        lines.append(f"{keyword} {name}({args}): {rng.choice(w.TS_TYPES)} {{")
    lines += [_typescript_statement(rng, indent) for _ in range(rng.randint(1, 4))]
    lines.append(f"{indent}return {_identifier(rng, 'camel')};")
    lines.append("};" if keyword == "const" else "}")
    return "\n".join(lines)
