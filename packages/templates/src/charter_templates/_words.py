"""Splitting tool names into words, and finding template words among them.

Template words are split by the same function as tool names, so ``post_message``,
``postMessage`` and ``post-message`` in a template all mean the phrase ("post", "message").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from ._model import Words

_CHUNK = r"[^\W_]+"
# Inside a chunk: plural acronyms (URLs), acronyms before a capitalised word (HTTPRequest),
# capitalised or lower words, digit runs, then any other letters (non-Latin scripts).
_PART = r"[A-Z]{2,}s(?![a-z])|[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+|[^\W\d_]+"


@functools.cache
def _expressions() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # Compiled on the first name that needs them: many processes (a Claude Code hook call
    # mapping Bash or Read) split only plain words.
    return re.compile(_CHUNK), re.compile(_PART)


def split_words(name: str) -> tuple[str, ...]:
    """Lower-case words of `name`, split at snake_case, camelCase, kebab-case, dots and digits.

    Never raises; a name without letters or digits gives ().
    """
    if name.isascii():
        # ASCII words, each lower-case or capitalised, joined by single underscores (every
        # template word, most tool names): the expressions would split them at the
        # underscores alone.
        parts = name.split("_")
        if all(part.isalpha() and (part.islower() or part.istitle()) for part in parts):
            return tuple(part.lower() for part in parts)
    chunks, parts_of = _expressions()
    return tuple(part.lower() for chunk in chunks.findall(name) for part in parts_of.findall(chunk))


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
