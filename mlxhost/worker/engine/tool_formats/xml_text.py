"""Raw text as the XML families write a string argument, the regexes that force it, and the Lark
rules of a value's forms.

A string value stands as it is between an element's tags, so the grammar's terminal for it must
keep to the schema's string keywords (length, pattern), never hold the words that would end the
element early, and never read as another type in the family's parser. llguidance's regexes are
Rust's, with `&` and `~` on terminals but no lookaround; JSON schema patterns are ECMA-262's, so a
pattern is translated to the same set of strings before it is used.

Hand-written because no library builds these pieces (llguidance takes them as they are).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from llguidance import LLMatcher

from mlxhost.worker.engine.tool_formats import json_rule

__all__ = [
    "ANY_TEXT",
    "PY_SPACE",
    "STRIPPED",
    "Unforceable",
    "ValueRules",
    "avoiding",
    "ecma_regex",
    "lark_literal",
    "regex_escape",
    "text_terminal",
]

ANY_TEXT: Final = "(?s:.*)"
# What str.strip() removes (str.isspace()), and the texts it leaves as they are.
PY_SPACE: Final = (
    r"\t-\r\x1C-\x20\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
)
STRIPPED: Final = rf"(?s:(?:[^{PY_SPACE}](?:.*[^{PY_SPACE}])?)?)"

# Keywords that combine or negate schemas: a raw text cannot be checked against them here.
_COMBINATORS: Final = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef")
_REGEX_META: Final = frozenset("\\.+*?()|[]{}^$#&-~/")
_CLASS_META: Final = frozenset("\\[]^-&~")
# ECMA-262's classes, which are narrower than Rust's Unicode ones (JSON schema validators use them).
_ECMA_SPACE: Final = (
    r"\t\n\x0B\x0C\r \xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}"
)
_ECMA_CLASSES: Final = {"d": "0-9", "w": "0-9A-Za-z_", "s": _ECMA_SPACE}
_ECMA_DOT: Final = r"[^\n\r\x{2028}\x{2029}]"


class Unforceable(Exception):
    """A parameter whose values the family's syntax cannot force soundly (the message says why)."""


def regex_escape(text: str) -> str:
    """`text` as a literal in a Rust regex inside a Lark /…/ (Python's re.escape is unfit: Rust
    reads an escaped "<" as a word boundary)."""
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


def lark_literal(text: str) -> str:
    """A Lark string literal of `text`."""
    return json.dumps(text, ensure_ascii=False)


def avoiding(words: Iterable[str]) -> str:
    """A regex (Rust syntax, to anchor) of the strings that hold none of `words`.

    Written without lookaround, which llguidance's regexes lack: every word starts with "<" and has
    no other "<", so a text is runs of other characters and chunks that begin at a "<" and leave
    every word's path (a chunk that ends on a word's unfinished prefix is followed by another "<"
    or by the end)."""
    trie: dict[str, Any] = {}
    for word in words:
        if not word.startswith("<") or "<" in word[1:]:
            raise ValueError(f"avoiding() takes words that start with '<' and hold no other: {word!r}")
        node = trie
        for char in word[1:]:
            node = node.setdefault(char, {})
        node[""] = {}  # the end of a word

    def on(node: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:  # steps that stay off a word's end
        return [(c, child) for c, child in sorted(node.items()) if c and "" not in child]

    def left(node: dict[str, Any]) -> str:  # a character off every path, after the chunk so far
        chars = "".join("\\" + c if c in _CLASS_META else c for c in sorted(set(node) - {""}))
        options = [f"[^<{chars}]"] + [regex_escape(c) + left(child) for c, child in on(node)]
        return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"

    def stopped(node: dict[str, Any]) -> str:  # a chunk that stops on a path (before a "<" or the end)
        options = [regex_escape(c) + stopped(child) for c, child in on(node)]
        return "" if not options else "(?:" + "|".join(options) + ")?"

    return f"[^<]*(?:<{left(trie)}[^<]*|<{stopped(trie)})*"


def ecma_regex(pattern: str) -> str:
    """A JSON schema `pattern` (ECMA-262) as a Rust regex of the same strings: \\d, \\w, \\s and "."
    made ECMA's; what has no exact counterpart here (\\b, a negated class escape inside a class)
    raises Unforceable."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            code = pattern[i + 1]
            if code.lower() in _ECMA_CLASSES:
                chars = _ECMA_CLASSES[code.lower()]
                if in_class and code.isupper():
                    raise Unforceable(f"the pattern's \\{code} inside a class cannot be forced")
                out.append(chars if in_class else f"[{'^' if code.isupper() else ''}{chars}]")
            elif code in "bB":
                raise Unforceable("the pattern's word boundary cannot be forced")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            negated = pattern.startswith("[^", i)
            i += 2 if negated else 1
            if pattern.startswith("]", i):  # ECMA's "[]" and "[^]": no counterpart worth a rule
                raise Unforceable("the pattern's empty class cannot be forced")
            out.append("[^" if negated else "[")
            in_class = True
            continue
        if in_class and (char in "[&~" or pattern.startswith("--", i)):
            out.append("\\" + char)  # literal in an ECMA class; nesting or set operations in Rust's
        else:
            out.append(_ECMA_DOT if char == "." and not in_class else char)
        in_class = in_class and char != "]"
        i += 1
    return "".join(out)


def text_terminal(
    schema: Mapping[str, Any],
    words: Sequence[str],
    exclude: Sequence[str] = (),
    require: Sequence[str] = (),
) -> str:
    """A Lark terminal's body: raw text of a string value of `schema` (its minLength, maxLength and
    pattern), holding none of `words`, matching none of the regexes `exclude` (whole-text matches:
    the texts the family would read as something else) and every regex of `require`.

    Raises Unforceable for string keywords it cannot force (format; a combinator)."""
    for key in _COMBINATORS:
        if key in schema:
            raise Unforceable(f"a string value under '{key}' cannot be forced as raw text")
    if "format" in schema:
        raise Unforceable(f"a string value's format ({schema['format']!r}) cannot be forced as raw text")
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if not isinstance(low, int) or not (high is None or isinstance(high, int)):
        raise Unforceable("minLength and maxLength must be integers")
    if high is not None and high < low:
        raise Unforceable("maxLength is below minLength")
    bounds = f"{low},{'' if high is None else high}"
    parts = [f"/(?s:.{{{bounds}}})/" if (low or high is not None) else f"/{ANY_TEXT}/"]
    if isinstance(schema.get("pattern"), str):
        parts.append(f"/{_search(schema['pattern'])}/")
    parts += [f"~/{ANY_TEXT}{regex_escape(w)}{ANY_TEXT}/" for w in words]
    parts += [f"~/{_lark_regex(e)}/" for e in exclude]
    parts += [f"/{_lark_regex(r)}/" for r in require]
    body = " & ".join(parts)
    error = _terminal_error(body)
    if error is not None:
        raise Unforceable(f"its pattern cannot be forced ({error})")
    return body


def _search(pattern: str) -> str:
    # A JSON schema pattern matches anywhere in the string; llguidance matches whole lexemes. A
    # leading "^" or trailing "$" anchors that end; any other anchor fails to compile (refused).
    start = pattern[1:] if pattern.startswith("^") else pattern
    escapes = len(start[:-1]) - len(start[:-1].rstrip("\\"))
    end = start.endswith("$") and escapes % 2 == 0
    body = _lark_regex(ecma_regex(start[:-1] if end else start))
    return ("" if pattern.startswith("^") else ANY_TEXT) + f"(?:{body})" + ("" if end else ANY_TEXT)


def _lark_regex(regex: str) -> str:
    """`regex` inside Lark's /…/: every "/" not already escaped, escaped."""
    out, i = [], 0
    while i < len(regex):
        if regex[i] == "\\" and i + 1 < len(regex):
            out.append(regex[i : i + 2])
            i += 2
            continue
        out.append("\\/" if regex[i] == "/" else regex[i])
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def _terminal_error(body: str) -> str | None:
    # Compiled alone (no tokenizer) so that a pattern llguidance cannot read is refused with the
    # tool's name, not failed later as the whole grammar.
    grammar = LLMatcher.grammar_from_lark(f"start: VALUE\nVALUE: {body}")
    try:
        failed, errors = LLMatcher.validate_grammar_with_warnings(grammar)
    except (TypeError, ValueError) as exc:
        return " ".join(str(exc).split())[:200]
    return " ".join(" ".join(errors).split())[:200] if failed else None


class ValueRules:
    """The forms one value may be written in, as the Lark rule `name`: each form followed by
    `close`, the end of the value's element (a literal, a JSON value, or a raw text that ends where
    the close can, lazily)."""

    def __init__(self, name: str, close: str) -> None:
        self.name, self.close = name, close
        self.options: list[str] = []
        self.defined: list[str] = []

    def literal(self, text: str) -> None:
        # One literal with the close: apart, the lexer would read "null" on as the start of a text.
        self.options.append(lark_literal(text + self.close))

    def json(self, schema: Mapping[str, Any]) -> None:
        rule = f"{self.name}_{len(self.options)}"
        self.options.append(f"{rule} {lark_literal(self.close)}")
        self.defined.append(f"{rule}: {json_rule(schema)}")

    def text(self, terminal: str, opening: str = "", closing: str = "") -> None:
        """A raw text (`terminal`, a Lark terminal's body) between `opening` and `closing` (a CDATA
        section's), then the close."""
        rule = f"{self.name}_{len(self.options)}"
        token = rule.upper().replace("-", "_")
        self.options.append(f"{lark_literal(opening)} {rule}" if opening else rule)
        self.defined += [
            f"{rule}[suffix={lark_literal(closing + self.close)}]: {token}",
            f"{token}: {terminal}",
        ]

    def rules(self) -> list[str]:
        if not self.options:
            raise Unforceable("no form of its values reads back valid")
        return [f"{self.name}: {' | '.join(self.options)}", *self.defined]
