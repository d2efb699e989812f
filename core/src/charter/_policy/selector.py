"""Selectors: which steps a policy (or a history rule's counter) looks at."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Verb

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SELECTOR_SCHEMA", "Selector"]

_STEP_KINDS = frozenset(ActionKind) - TASK_BOUNDARY_KINDS

SELECTOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Which steps this applies to. A step must match every key given. Without `kinds`, every "
        "step kind matches but task boundaries (task.*) do not."
    ),
    "properties": {
        "kinds": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "enum": [k.value for k in ActionKind]},
        },
        "verbs": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "enum": [v.value for v in Verb]},
        },
        "step_names": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "minLength": 1},
            "description": "Shell-style globs on step_name (case-sensitive), e.g. 'delete_*'.",
        },
    },
}


class Selector:
    """A parsed ``{kinds, verbs, step_names}`` mapping; `matches` is called on the hot path."""

    __slots__ = ("_names", "key", "kinds", "verbs")

    def __init__(
        self,
        kinds: frozenset[ActionKind] | None = None,
        verbs: frozenset[Verb] | None = None,
        step_names: tuple[str, ...] | None = None,
    ) -> None:
        self.kinds = kinds if kinds is not None else _STEP_KINDS
        self.verbs = verbs
        self._names = (
            re.compile("|".join(fnmatch.translate(g) for g in step_names)) if step_names else None
        )
        self.key = (
            tuple(sorted(self.kinds)),
            tuple(sorted(verbs)) if verbs is not None else None,
            step_names,
        )

    @classmethod
    def from_params(cls, data: Mapping[str, Any] | None) -> Selector:
        """Build from an already schema-checked mapping; None selects every step kind."""
        if not data:
            return cls()
        kinds = data.get("kinds")
        verbs = data.get("verbs")
        names = data.get("step_names")
        return cls(
            frozenset(ActionKind(k) for k in kinds) if kinds else None,
            frozenset(Verb(v) for v in verbs) if verbs else None,
            tuple(names) if names else None,
        )

    def matches(self, b: Behavior) -> bool:
        if b.kind not in self.kinds:
            return False
        if self.verbs is not None and b.verb not in self.verbs:
            return False
        return self._names is None or self._names.match(b.step_name) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)
