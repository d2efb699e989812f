"""Dotted field paths (``input.command``, ``properties.target.url``, ``input.to[*]``).

Paths are parsed once when a policy is loaded and then resolved against behaviors on the hot
path, so parsing refuses bad syntax with a sentence and resolving never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["FieldPath", "iter_strings", "parse_path"]

ROOTS = ("input", "output", "properties", "meta")
SCALAR_ROOTS = ("step_name", "kind", "verb", "agent_id", "task_id", "action_id")
_SEGMENT = re.compile(r"([^.\[\]]+)((?:\[(?:\d+|\*)\])*)")
_INDEX = re.compile(r"\[(\d+|\*)\]")
_ALL = object()


class FieldPath:
    """A parsed path; `resolve` returns every value found (several with ``[*]``, none if absent)."""

    __slots__ = ("_simple", "root", "steps", "text")

    def __init__(self, text: str, root: str, steps: tuple[object, ...]) -> None:
        self.text = text
        self.root = root
        self.steps = steps
        self._simple = all(isinstance(s, str) for s in steps)

    def __repr__(self) -> str:
        return f"FieldPath({self.text!r})"

    def resolve(self, behavior: Any) -> list[Any]:
        value = getattr(behavior, self.root, None)
        if value is None:
            return []
        if self.root in ("kind", "verb"):
            value = value.value if hasattr(value, "value") else value
        if self._simple:
            # Plain key paths are the common case on the hot path: walk dicts without lists.
            for key in self.steps:
                if type(value) is not dict:
                    return []
                value = value.get(key)
                if value is None:
                    return []
            return [value]
        current = [value]
        for step in self.steps:
            nxt: list[Any] = []
            for v in current:
                if step is _ALL:
                    if isinstance(v, list):
                        nxt.extend(v)
                    elif isinstance(v, dict):
                        nxt.extend(v.values())
                elif isinstance(step, int):
                    if isinstance(v, list) and -len(v) <= step < len(v):
                        nxt.append(v[step])
                elif isinstance(v, dict) and step in v:
                    nxt.append(v[step])
            current = nxt
            if not current:
                return []
        return [v for v in current if v is not None]


def parse_path(text: object) -> FieldPath:
    """Parse a dotted path or raise ValueError saying what is wrong and what is accepted."""
    if not isinstance(text, str) or not text:
        raise ValueError("must be a dotted path such as 'input.command' or 'properties.target.url'")
    parts = text.split(".")
    root = parts[0]
    if root in SCALAR_ROOTS and len(parts) == 1:
        return FieldPath(text, root, ())
    if root not in ROOTS:
        accepted = ", ".join(ROOTS + SCALAR_ROOTS)
        raise ValueError(f"{text!r}: a path starts with one of {accepted}")
    steps: list[object] = []
    for part in parts[1:]:
        m = _SEGMENT.fullmatch(part)
        if m is None:
            raise ValueError(
                f"{text!r}: segment {part!r} is not a key optionally followed by [N] or [*]"
            )
        steps.append(m.group(1))
        for idx in _INDEX.findall(m.group(2)):
            steps.append(_ALL if idx == "*" else int(idx))
    return FieldPath(text, root, tuple(steps))


def iter_strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string inside `value`, searching lists and nested objects (keys excluded), in
    document order, however deep: no limit may hide a string from a rule that scans."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
