"""Trust levels: how far a piece of recorded content is trusted, as a small ordered set.

``user`` > ``operator`` > ``internal`` > ``external``. The user is the person the agent works
for (their own messages); the operator configures Charter (trusted values, system prompts);
internal content is set by the organisation's own systems (a directory, an e-mail's sender as
the mail server recorded it, its own files); external content was written by anyone else (a
web page, an e-mail's body). Anything unmarked, or marked with a word this module does not
know, is ``external``: unknown content is never trusted.

Two older words are read as levels: ``trusted`` is ``internal`` and ``untrusted`` is
``external`` (trails recorded before the levels mark outside content ``untrusted``; a `forbid_after`
condition on ``properties.data.trust`` compares levels, so either word matches both).

Per-field trust on a step's output lives at ``properties.data.field_trust``: a mapping from a
path relative to the output (``emails[*].sender``, ``[*].from``, ``body``) to a level; the rest
of the output takes ``properties.data.trust``. `parse_output_path` reads those paths.
"""

from __future__ import annotations

import functools
from enum import IntEnum

__all__ = [
    "ALL",
    "TRUST_WORDS",
    "Trust",
    "parse_output_path",
    "parse_trust",
    "trust_level",
]


class Trust(IntEnum):
    """A trust level; a higher value is trusted further, so levels compare with < and >."""

    EXTERNAL = 0
    INTERNAL = 1
    OPERATOR = 2
    USER = 3

    @property
    def word(self) -> str:
        """The level's name as policies and templates write it (``internal``)."""
        return self.name.lower()


_WORDS: dict[str, Trust] = {
    "user": Trust.USER,
    "operator": Trust.OPERATOR,
    "internal": Trust.INTERNAL,
    "external": Trust.EXTERNAL,
    "trusted": Trust.INTERNAL,
    "untrusted": Trust.EXTERNAL,
    "unknown": Trust.EXTERNAL,
}
TRUST_WORDS: tuple[str, ...] = tuple(_WORDS)


def trust_level(value: object) -> Trust:
    """The level a recorded mark stands for; anything unknown (None, a typo, a number) is
    `Trust.EXTERNAL`: content nobody vouched for is never trusted."""
    if isinstance(value, str):
        return _WORDS.get(value, Trust.EXTERNAL)
    return Trust.EXTERNAL


def parse_trust(value: object, where: str = "trust") -> Trust:
    """A level written by a person (a policy param, a template); raises ValueError naming the
    accepted words for anything else."""
    if isinstance(value, str) and value in _WORDS:
        return _WORDS[value]
    raise ValueError(f"{where}: {value!r} is not a trust level; use one of {', '.join(_WORDS)}")


class _All:
    """The ``[*]`` step of an output path: every item of a list, every value of a mapping."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "[*]"


ALL = _All()

OutputPath = tuple[str | int | _All, ...]


@functools.lru_cache(maxsize=1024)
def parse_output_path(text: str) -> OutputPath:
    """A path relative to a step's output: keys separated by dots, each optionally followed
    by ``[n]`` or ``[*]`` steps, and a path may start with them (``[*].from``). The empty path
    and ``*`` mean the whole output. Raises ValueError saying what is wrong.

    A hand-written scanner: paths come from templates an integration loads, and a step's
    properties (where they are kept) are not a place for a backtracking pattern to run.
    """
    if not isinstance(text, str):
        raise ValueError(f"output path {text!r} must be a string such as 'emails[*].sender'")
    if text in ("", "*"):
        return ()
    steps: list[str | int | _All] = []
    i, n = 0, len(text)
    expect_key = not text.startswith("[")
    while i < n:
        if expect_key:
            j = i
            while j < n and text[j] not in ".[]":
                j += 1
            if j == i:
                raise ValueError(f"output path {text!r}: empty key at character {i + 1}")
            steps.append(text[i:j])
            i = j
        while i < n and text[i] == "[":
            end = text.find("]", i)
            if end < 0:
                raise ValueError(f"output path {text!r}: '[' at character {i + 1} is not closed")
            inner = text[i + 1 : end]
            if inner == "*":
                steps.append(ALL)
            elif inner.isascii() and inner.isdigit():
                steps.append(int(inner))
            else:
                raise ValueError(f"output path {text!r}: [{inner}] must be [*] or [n]")
            i = end + 1
        if i < n:
            if text[i] != "." or i + 1 == n:
                raise ValueError(
                    f"output path {text!r}: expected '.' and a key at character {i + 1}"
                )
            i += 1
            expect_key = True
    return tuple(steps)
