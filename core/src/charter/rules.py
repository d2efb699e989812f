"""What a rule author needs: register a rule, say why it failed, read the step and its context.

``charter.rule`` registers a function ``fn(view, params, ctx) -> bool | Violation``; the
built-in rules are registered before any user rule, so a name clash is always reported.
``value_trust(ctx, value)`` is the highest `Trust` level a value was seen at in the task (what
``value_provenance`` compares), for rules that judge where an argument came from.
"""

from __future__ import annotations

from charter._model.behavior import Behavior
from charter._model.context import EvalContext, RuleContext
from charter._model.trust import Trust, trust_level
from charter._policy import rules as _builtin_rules  # noqa: F401  (the built-ins' loader)
from charter._policy.registry import RuleSpec, Violation, get_rule, registered_rules, rule
from charter._policy.rules._provenance import value_trust

__all__ = [
    "Behavior",
    "EvalContext",
    "RuleContext",
    "RuleSpec",
    "Trust",
    "Violation",
    "get_rule",
    "registered_rules",
    "rule",
    "trust_level",
    "value_trust",
]
