"""Splitting tool names into words, and finding template words among them.

Template words are split by the same function as tool names, so ``post_message``,
``postMessage`` and ``post-message`` in a template all mean the phrase ("post", "message").
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ._model import Words

_CHUNK = re.compile(r"[^\W_]+")
# Inside a chunk: plural acronyms (URLs), acronyms before a capitalised word (HTTPRequest),
# capitalised or lower words, digit runs, then any other letters (non-Latin scripts).
_PART = re.compile(r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+")


def split_words(name: str) -> tuple[str, ...]:
    """Lower-case words of `name`, split at snake_case, camelCase, kebab-case, dots and digits.

    Never raises; a name without letters or digits gives ().
    """
    if name.isascii():
        # Lower-case ASCII words joined by single underscores (most template words, many
        # tool names) split as the expressions would split them, at the underscores.
        parts = name.split("_")
        if all(part.isalpha() and part.islower() for part in parts):
            return tuple(parts)
    return tuple(part.lower() for chunk in _CHUNK.findall(name) for part in _PART.findall(chunk))


def _same(token: str, word: str, plural: bool) -> bool:
    if token == word:
        return True
    return plural and (token == word + "s" or token == word + "es")


def find(tokens: tuple[str, ...], phrase: tuple[str, ...], *, plural: bool) -> Iterator[int]:
    """Positions where `phrase` occurs as a run of `tokens`.

    With `plural`, a token also matches a word plus "s" or "es" (emails, messages, passwords).
    """
    size = len(phrase)
    for start in range(len(tokens) - size + 1):
        if all(_same(tokens[start + i], phrase[i], plural) for i in range(size)):
            yield start


def contains_any(tokens: tuple[str, ...], words: Words, *, plural: bool) -> bool:
    """True when any phrase of `words` occurs in `tokens`."""
    return any(next(find(tokens, phrase, plural=plural), None) is not None for phrase in words)
