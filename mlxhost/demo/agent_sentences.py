"""English sentences for the agent corpus: noun and verb phrases, clauses and sentences.

The grammar is loose (a verb may take any of its forms anywhere): it is there to show a tokenizer
the words, their forms and the punctuation of instructions to a coding agent, not to be read.
A sentence cites paths, identifiers and shell commands (`cited`), and a command may quote a
sentence as its argument: one recursion, which is why `command` lives here with the grammar.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

from mlxhost.demo.agent_code_words import PROGRAMS
from mlxhost.demo.agent_nouns import COMPOUNDS
from mlxhost.demo.agent_verbs import PARTICLE_VERBS
from mlxhost.demo.agent_vocabulary import (
    acronym,
    adjective,
    adjective_or_participle,
    adverb,
    gerund,
    identifier,
    noun,
    noun_base,
    number,
    participle,
    path,
    phrase,
    third_person,
    verb,
    verb_base,
)
from mlxhost.demo.agent_words import SUBJECTS

__all__ = ["cited", "command", "sentence"]

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
_QUOTES: Final = ("`{}`", "'{}'", '"{}"', "“{}”", "{}", "<{}>", "**{}**", "*{}*")
_PRONOUNS: Final = (
    "it", "them", "this", "that", "something", "anything", "everything", "nothing", "one", "yourself",
)
_GERUND_LEADS: Final = ("before", "after", "by", "without", "when", "while", "instead of", "for")
_BOUNDS: Final = ("up to", "at most", "at least", "about", "max", "over", "under")
_STARTS: Final = (
    "You are", "You are an", "You are a", "Here is", "Here are", "This is", "There is",
    "There are", "It is", "If", "When", "Before", "After", "While", "Unless", "Once", "Use",
    "Do not", "Never", "Always", "Only", "Prefer", "Avoid", "Make sure", "Remember that",
    "Note that", "Keep in mind that", "For example,", "Otherwise,", "However,", "Instead,",
    "In that case,", "Then", "Finally,", "First,", "Next,", "Also,", "By default,",
)
_ASIDES: Final = (
    "optional", "required", "default: {n}", "if any", "see below", "see above", "e.g. {c}",
    "for example {c}", "i.e. {c}", "in {n} seconds", "max {n}", "not {c}", "{c}", "such as {c}",
    "defaults to {n}", "recommended", "deprecated", "or {c}", "if set", "when {c} is set",
)
_PERFECT: Final = ("has", "have", "had", "was", "were")
_CONDITIONS: Final = ("asks you to", "explicitly asks", "says so", "approves it", "needs it", "requests it")
_PURPOSES: Final = ("to", "when you need to", "whenever you", "only to", "to help")
_TOOL_SUBJECTS: Final = ("this tool", "the tool", "it", "the command")
_ENDINGS: Final = (".", ".", ".", ".", ".", ".", ":", "!", "?", ";", " :)")


# Phrases.


def _aside(rng: random.Random) -> str:
    text = rng.choice(_ASIDES)
    return "(" + text.replace("{n}", number(rng)).replace("{c}", _quoted(rng)) + ")"


def _quoted(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        word = identifier(rng, rng.choice(("snake", "camel")))
    elif r < 0.5:
        word = noun(rng)
    elif r < 0.6:
        word = acronym(rng)
    elif r < 0.7:
        word = verb(rng)
    elif r < 0.8:
        word = adjective(rng)
    else:
        word = _noun_phrase(rng)
    return rng.choice(_QUOTES).format(word)


def _noun_phrase(rng: random.Random) -> str:
    words = [rng.choice(_DETERMINERS)]
    if rng.random() < 0.4:
        if rng.random() < 0.1:
            words.append(adverb(rng))
        words.append(adjective_or_participle(rng))
    r = rng.random()
    if r < 0.12:
        words.append(noun_base(rng))
    words.append(rng.choice(COMPOUNDS) if r > 0.85 else noun(rng))
    if words[0] in ("a", "an"):
        words[0] = "an" if words[1][0] in "aeiou" else "a"
    if rng.random() < 0.1:
        words += ["of", _noun_phrase(rng)]
    elif rng.random() < 0.08:
        words.append(_aside(rng) if rng.random() < 0.6 else f"({cited(rng)})")
    elif rng.random() < 0.08:
        words.append(_quoted(rng))
    if rng.random() < 0.03:
        words[-1] = words[-1].upper()
    return " ".join(words)


def _verb_phrase(rng: random.Random, form: Callable[[str], str] = str) -> str:
    words = []
    if rng.random() < 0.15:
        words.append(adverb(rng))
    if rng.random() < 0.1:
        base, particle = rng.choice(PARTICLE_VERBS).split(" ", 1)
        words.append(f"{form(base)} {particle}")
    else:
        words.append(verb(rng, form))
    r = rng.random()
    if r < 0.7:
        words.append(_noun_phrase(rng))
    elif r < 0.8:
        words.append(rng.choice(_PRONOUNS))
    if rng.random() < 0.45:
        words += [rng.choice(_PREPOSITIONS), _noun_phrase(rng)]
    if rng.random() < 0.1:
        words.append(adverb(rng))
    r = rng.random()
    if r < 0.1:
        words += ["to", verb(rng), _noun_phrase(rng)]
    elif r < 0.2:
        words += [rng.choice(_GERUND_LEADS), verb(rng, gerund), _noun_phrase(rng)]
    return " ".join(words)


def cited(rng: random.Random) -> str:
    """What instructions put in backticks: a path, an identifier, a shell command or a `name=value`."""
    r = rng.random()
    if r < 0.3:
        return path(rng)
    if r < 0.5:
        return identifier(rng, rng.choice(("snake", "camel")))
    if r < 0.65:
        return identifier(rng, "pascal")
    if r < 0.85:
        return command(rng)
    return f"{identifier(rng, 'snake')}={number(rng)}"


def command(rng: random.Random) -> str:
    """A shell command line: a program, perhaps an argument (a path, a name or a quoted sentence),
    perhaps piped or chained to another program.
    """
    program = rng.choice(PROGRAMS)
    r = rng.random()
    if r < 0.4:
        argument = path(rng)
    elif r < 0.6:
        argument = f'"{identifier(rng, rng.choice(("snake", "camel")))}"'
    elif r < 0.75:
        argument = f'"{sentence(rng)}"'
    else:
        argument = ""
    line = f"{program} {argument}".rstrip()
    if rng.random() < 0.2:
        line += f" {rng.choice(('&&', '|', '||', ';', '2>&1 |', '>'))} {rng.choice(PROGRAMS)}"
    return line


# Clauses and sentences.


def _clause(rng: random.Random) -> str:
    subject = rng.choice(SUBJECTS)
    r = rng.random()
    if r < 0.3:
        action = verb(rng) if subject in ("you", "they", "we") else verb(rng, third_person)
        return f"{subject} {action} {_noun_phrase(rng)}"
    if r < 0.5:
        return f"{subject} {rng.choice(_MODALS)} {_verb_phrase(rng)}"
    if r < 0.65:
        return f"{_noun_phrase(rng)} {rng.choice(_COPULAS)} {adjective_or_participle(rng)}"
    if r < 0.8:
        return f"{subject} {rng.choice(_PERFECT)} {participle(verb_base(rng))} {_noun_phrase(rng)}"
    return (
        f"{_noun_phrase(rng)} {rng.choice(_COPULAS)} {participle(verb_base(rng))} "
        f"{rng.choice(_PREPOSITIONS)} {_noun_phrase(rng)}"
    )


def _clause_or_verb_phrase(rng: random.Random) -> str:
    return _clause(rng) if rng.random() < 0.5 else _verb_phrase(rng)


def sentence(rng: random.Random) -> str:
    """A sentence of instructions, capitalized and ended, now and then with a citation or an aside."""
    r = rng.random()
    if r < 0.14:
        text = _verb_phrase(rng)
    elif r < 0.30:
        text = _clause(rng)
    elif r < 0.40:
        text = f"{rng.choice(_CONNECTIVES)} {_clause(rng)}, {_clause_or_verb_phrase(rng)}"
    elif r < 0.46:
        text = f"do not {_verb_phrase(rng)} unless {rng.choice(SUBJECTS)} {rng.choice(_CONDITIONS)}"
    elif r < 0.52:
        text = f"use this tool {rng.choice(_PURPOSES)} {_verb_phrase(rng)}"
    elif r < 0.58:
        subject = rng.choice(_TOOL_SUBJECTS)
        text = f"{subject} {_verb_phrase(rng, third_person)} and {_verb_phrase(rng, third_person)}"
    elif r < 0.66:
        text = f"{rng.choice(_STARTS)} {_clause_or_verb_phrase(rng)}"
    elif r < 0.72:
        # Sentences and list items that open on any word, capitalized.
        first = rng.choice((adjective_or_participle, noun, adverb))(rng)
        text = f"{first} {_noun_phrase(rng) if rng.random() < 0.5 else _verb_phrase(rng)}"
    elif r < 0.75:
        text = f"{phrase(rng)}, {_clause(rng)} {rng.choice(_CONNECTIVES)} {_clause(rng)}"
    elif r < 0.79:
        text = (
            f"{gerund(verb_base(rng))} {_noun_phrase(rng)} {phrase(rng)} {_noun_phrase(rng)} "
            f"{rng.choice(_COPULAS)} {adjective(rng)}"
        )
    elif r < 0.84:
        subject = _noun_phrase(rng)
        text = f"{subject} that {_clause(rng)} {rng.choice(_COPULAS)} {adjective_or_participle(rng)}"
    elif r < 0.90:
        items = [_noun_phrase(rng) for _ in range(rng.randint(2, 4))]
        text = f"{_clause(rng)}: {', '.join(items[:-1])}, and {items[-1]}"
    else:
        parts = (phrase(rng) if rng.random() < 0.4 else _verb_phrase(rng) for _ in range(rng.randint(2, 4)))
        text = " ".join(parts)
    if rng.random() < 0.25:
        reference = cited(rng)
        text += f" {rng.choice(_PREPOSITIONS)} `{reference}`" if rng.random() < 0.8 else f" ({reference})"
    if rng.random() < 0.1:
        text += f" {rng.choice(_UNICODE)} {_clause(rng)}"
    if rng.random() < 0.08:
        text += f" {rng.choice(_BOUNDS)} {number(rng)} {noun(rng)}"
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
