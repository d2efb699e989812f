"""Several forbidding patterns on one field, searched in one pass with an RE2 set.

A policy set often holds several ``field_matches`` policies in forbid mode on the same field
(``input.command`` against ``rm -rf /``, ``mkfs``, ``sudo`` ...). Searching each pattern on its
own encodes the text and runs RE2 once per policy; an `re2.Set` runs them all in one pass and
says which matched. The set only decides that a policy complies: a policy whose pattern the set
reports is judged by its own rule, so its violation and details are exactly the rule's.
"""

from __future__ import annotations

from collections.abc import Sequence

from charter._model.paths import FieldPath, iter_strings
from charter._policy.rules.basic import _Matches, field_matches

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PatternSet", "pattern_sets"]

# The memory RE2 may use for one set's program and DFA. A set searches with the DFA alone
# (a single pattern can fall back to the NFA), and RE2 gives up on a set whose DFA cannot hold
# the states of one step of its program; the cache it needs depends on the patterns, not on
# the text, so a budget well above a single pattern's 8 MB keeps every set a policy file can
# hold far from that edge. A set that does not compile within it is not built and its
# policies run one by one.
_SET_MEMORY = 64 << 20


class PatternSet:
    """The forbidding patterns of several policies on one field; `hits` searches them all."""

    __slots__ = ("_match", "path")

    def __init__(self, path: FieldPath, match: Any) -> None:
        self.path = path
        self._match = match

    def hits(self, view: Any) -> set[int] | None:
        """The indexes of the patterns found in any string at the field, or None when the field
        is absent (each policy's rule then says what a missing field means)."""
        values = self.path.resolve(view)
        if not values:
            return None
        match = self._match
        if len(values) == 1 and type(values[0]) is str:
            # One string, the common case: one search, no loop.
            return set(match(values[0].encode("utf-8", "surrogatepass")))
        found: set[int] = set()
        for text in iter_strings(values):
            matched = match(text.encode("utf-8", "surrogatepass"))
            if matched:
                found.update(matched)
        return found


def pattern_sets(
    candidates: Sequence[tuple[int, Any, Any]],
) -> dict[int, tuple[PatternSet, int]]:
    """Group the forbid-mode ``field_matches`` among `candidates` (key, rule function,
    prepared params) by field and case folding; each group of two or more gets one set.

    Returns, for each grouped key, its set and the index its pattern has in that set. Keys
    not returned are judged by their rule alone.
    """
    groups: dict[tuple[str, bool], list[tuple[int, _Matches]]] = {}
    for key, fn, prepared in candidates:
        if fn is field_matches and isinstance(prepared, _Matches) and prepared.forbid:
            groups.setdefault((prepared.path.text, prepared.ignore_case), []).append(
                (key, prepared)
            )
    out: dict[int, tuple[PatternSet, int]] = {}
    for (_, fold), members in groups.items():
        if len(members) < 2:
            continue
        built = _build([m.pattern for _, m in members], fold)
        if built is None:
            continue
        pset = PatternSet(members[0][1].path, built)
        for index, (key, _) in enumerate(members):
            out[key] = (pset, index)
    return out


def _build(patterns: list[str], fold: bool) -> Any:
    """The raw match function of a compiled set, or None when RE2 cannot build one."""
    import re2  # lazy: keeps `import charter` fast

    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not fold
    options.max_mem = _SET_MEMORY
    try:
        rset = re2.Set.SearchSet(options)
        for index, pattern in enumerate(patterns):
            if rset.Add(pattern) != index:
                return None
        rset.Compile()
    except re2.error:
        return None
    # The wrapper's Match encodes with strict UTF-8; the raw one takes the bytes `hits` built
    # the way the single-pattern search does (lone surrogates kept).
    return rset._set.Match
