"""Registration rules: judged once, on the agent itself, not on its steps."""

from __future__ import annotations

from typing import Any

from charter._model.context import EvalContext, RuleContext
from charter._policy.registry import Violation, rule

_FIELDS = {"name": "agent_name", "purpose": "agent_purpose", "owner": "agent_owner"}


@rule(
    name="requires_fields",
    description="The agent must declare every listed field (name, purpose, owner).",
    params_schema={
        "type": "object",
        "required": ["fields"],
        "properties": {
            "fields": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": sorted(_FIELDS)},
            }
        },
    },
    enforcement_points=("agent_registration",),
    example_params={"fields": ["purpose", "owner"]},
    _builtin=True,
)
def requires_fields(view: EvalContext, params: dict[str, Any], ctx: RuleContext) -> Any:
    missing = [f for f in params["fields"] if not getattr(view, _FIELDS[f])]
    if missing:
        return Violation(f"the agent must declare {', '.join(missing)}")
    return True


@rule(
    name="classification_not_in",
    description=(
        "The agent's risk classification must not be one of `values`; an agent without one "
        "counts as 'unclassified'."
    ),
    params_schema={
        "type": "object",
        "required": ["values"],
        "properties": {
            "values": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}}
        },
    },
    enforcement_points=("agent_registration",),
    example_params={"values": ["unacceptable", "unclassified"]},
    _builtin=True,
)
def classification_not_in(view: EvalContext, params: dict[str, Any], ctx: RuleContext) -> Any:
    cls = view.risk_classification or "unclassified"
    if cls in params["values"]:
        return Violation(f"risk classification {cls!r} is not allowed")
    return True
