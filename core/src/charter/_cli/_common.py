"""Helpers shared by the `charter` subcommand modules."""

from __future__ import annotations

import re

__all__ = ["short_reason"]

_LONG_PATTERN = re.compile(r"(matches forbidden pattern|does not match) '(.{48}).*?'(?=;|$)")


def short_reason(reason: str) -> str:
    """`reason` with long regular expressions cut short: they say little to a reader."""
    return _LONG_PATTERN.sub(lambda m: f"{m.group(1)} '{m.group(2)}…'", reason)
