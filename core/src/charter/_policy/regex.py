"""RE2 for every user-supplied pattern: linear time, so no policy can hang the gate."""

from __future__ import annotations

import functools

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["compile_re2", "fullmatch_function", "re2_text"]


def re2_text(text: str) -> str:
    """`text` as RE2 can read it: RE2 reads UTF-8, which cannot hold a lone surrogate, so
    each one is read as U+FFFD. Same length, so match positions stay those of `text`; a
    value holding one never matches a pattern that wanted the surrogate (fails closed)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


@functools.lru_cache(maxsize=1024)
def compile_re2(pattern: str, ignore_case: bool = False) -> Any:
    """Compile `pattern` with RE2; raise ValueError with RE2's reason when it cannot run it.

    Lookaround and backreferences need backtracking, which RE2 refuses by design.
    """
    import re2  # lazy: keeps `import charter` fast

    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        hint = ""
        if "(?=" in pattern or "(?!" in pattern or "(?<" in pattern:
            hint = " (lookaround is not supported: RE2 runs in linear time)"
        elif any(f"\\{d}" in pattern for d in "123456789"):
            hint = " (backreferences are not supported: RE2 runs in linear time)"
        raise ValueError(f"pattern {pattern!r} cannot be compiled by RE2: {reason}{hint}") from None


def search_function(compiled: Any) -> Any:
    """A ``text -> bool`` search for a pattern from `compile_re2`, without the wrapper's cost.

    The google-re2 Python wrapper rebuilds match objects and character offsets on every call
    (several microseconds); a policy only needs "does it match anywhere", so this calls the
    compiled RE2 object directly on the UTF-8 bytes.
    """
    import re2

    raw = compiled._regexp
    unanchored = re2._Anchor.UNANCHORED
    no_match = (-1, -1)
    match = raw.Match

    def search(text: str) -> bool:
        data = text.encode("utf-8", "surrogatepass")
        return bool(match(unanchored, data, 0, len(data))[0] != no_match)

    return search


def fullmatch_function(compiled: Any) -> Any:
    """A ``text -> bool`` whole-value match for a pattern from `compile_re2` (as
    `search_function`, anchored at both ends)."""
    import re2

    raw = compiled._regexp
    both = re2._Anchor.ANCHOR_BOTH
    no_match = (-1, -1)
    match = raw.Match

    def fullmatch(text: str) -> bool:
        data = text.encode("utf-8", "surrogatepass")
        return bool(match(both, data, 0, len(data))[0] != no_match)

    return fullmatch
