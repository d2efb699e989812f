"""Which built-in conditions judge a step by its kind, verb, step name and agent alone.

The engine remembers which policies select a step per (context, kind, verb, step name); a
policy whose verdict depends on nothing else gives the same result for every step of that
choice, so the engine judges it once per choice and reuses the result. Only built-in rule
functions are recognised (by identity, so a rule registered over a built-in name is judged
on every step), and only with params that read nothing else.
"""

from __future__ import annotations

from charter._model.paths import FieldPath
from charter._policy.rules import basic, compound

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["IDENTITY_FIELDS", "fixed_by_identity"]

#: What a remembered choice is keyed by, besides the context: the step's fields that a fixed
#: verdict may read (the agent is the context's, which `evaluate` checks is the step's).
IDENTITY_FIELDS = frozenset({"kind", "verb", "step_name", "agent_id"})

_FIELD_RULES = (basic.field_matches, basic.field_in, basic.field_not_in, basic.field_compare)
_MANY = (compound.all_of, compound.any_of)


def fixed_by_identity(fn: Any, prepared: Any) -> bool:
    """Whether the rule `fn` with `prepared` params reads only `IDENTITY_FIELDS` of the step
    (not its payloads, timestamp or ids, and nothing of the context or the task's history).

    Errs towards False: anything not known to read only those is judged on every step.
    """
    if fn is basic.deny:
        return True
    if fn is basic.allow_only:
        # Without a list it reads the context's declared tools.
        return isinstance(prepared, basic._AllowOnly) and prepared.listed is not None
    if fn in _FIELD_RULES:
        path = getattr(prepared, "path", None)
        return isinstance(path, FieldPath) and not path.steps and path.root in IDENTITY_FIELDS
    if fn in _MANY:
        return isinstance(prepared, tuple) and all(_nested_fixed(c) for c in prepared)
    if fn is compound.not_:
        return _nested_fixed(prepared)
    return False


def _nested_fixed(cond: Any) -> bool:
    if not (isinstance(cond, tuple) and len(cond) == 2):
        return False
    spec, prepared = cond
    return fixed_by_identity(getattr(spec, "fn", None), prepared)
