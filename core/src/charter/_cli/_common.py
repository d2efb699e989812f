"""Helpers shared by the `charter` subcommand modules."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["plain_table", "short_reason"]

_LONG_PATTERN = re.compile(r"(matches forbidden pattern|does not match) '(.{48}).*?'(?=;|$)")


def short_reason(reason: str) -> str:
    """`reason` with long regular expressions cut short: they say little to a reader."""
    return _LONG_PATTERN.sub(lambda m: f"{m.group(1)} '{m.group(2)}…'", reason)


def plain_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[str] = ()
) -> str:
    """`rows` as plain text in aligned columns (two spaces apart, numbers right-aligned), for
    output that is not a terminal: no box drawing, one line per row, nothing folded."""
    right = set(numeric)
    table = [list(headers), *([_cell(str(c)) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    lines = []
    for row in table:
        cells = [
            cell.rjust(width) if headers[i] in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _cell(text: str) -> str:
    """One line: inner whitespace (newlines included) collapsed, leading indentation kept."""
    indent = len(text) - len(text.lstrip(" "))
    return " " * indent + " ".join(text.split())
