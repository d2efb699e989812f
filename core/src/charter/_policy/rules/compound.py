"""Compound rules: all_of, any_of and not, over nested conditions checked recursively."""

from __future__ import annotations

from charter._policy.registry import RuleSpec, Violation, get_rule, rule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

if TYPE_CHECKING:
    Prepared = tuple[RuleSpec, Any]

_CONDITION: dict[str, Any] = {
    "type": "object",
    "format": "condition",
    "description": "A nested condition: {rule_type: <step rule>, params: {...}}.",
}
_CONDITIONS: dict[str, Any] = {"type": "array", "minItems": 1, "items": _CONDITION}


def _prepare_one(cond: dict[str, Any]) -> Prepared:
    spec = get_rule(cond["rule_type"])
    params = cond.get("params", {})
    prepared = spec.prepare(params) if spec.prepare else params
    if getattr(prepared, "scope", None) is not None and hasattr(prepared, "shared_demand"):
        # Its count is reserved for policies, not for conditions inside them: nested, it
        # would never get one (and `not` would turn that refusal into compliance).
        raise ValueError(
            f"{spec.name} with a scope beyond the task cannot be nested in all_of, any_of or "
            "not; make it a policy of its own"
        )
    return spec, prepared


def _prepare_many(params: dict[str, Any]) -> tuple[Prepared, ...]:
    return tuple(_prepare_one(c) for c in params["conditions"])


def _run(prepared: Prepared, view: Any, ctx: Any) -> Any:
    spec, p = prepared
    return spec.fn(view, p, ctx)


@rule(
    name="all_of",
    description="Complies when every nested condition complies.",
    params_schema={
        "type": "object",
        "required": ["conditions"],
        "properties": {"conditions": _CONDITIONS},
    },
    example_params={
        "conditions": [
            {"rule_type": "field_matches", "params": {"field": "input.to", "pattern": "@"}},
            {"rule_type": "field_compare", "params": {"field": "input.n", "op": "<", "value": 5}},
        ]
    },
    prepare=_prepare_many,
    _builtin=True,
)
def all_of(view: Any, conds: tuple[Prepared, ...], ctx: Any) -> Any:
    for cond in conds:
        verdict = _run(cond, view, ctx)
        if not verdict:
            return (
                verdict
                if isinstance(verdict, Violation)
                else Violation(f"condition {cond[0].name} was not met")
            )
    return True


@rule(
    name="any_of",
    description="Complies when at least one nested condition complies.",
    params_schema={
        "type": "object",
        "required": ["conditions"],
        "properties": {"conditions": _CONDITIONS},
    },
    example_params={
        "conditions": [
            {"rule_type": "field_in", "params": {"field": "verb", "values": ["GET"]}},
            {"rule_type": "field_matches", "params": {"field": "step_name", "pattern": "^safe_"}},
        ]
    },
    prepare=_prepare_many,
    _builtin=True,
)
def any_of(view: Any, conds: tuple[Prepared, ...], ctx: Any) -> Any:
    details = []
    for cond in conds:
        verdict = _run(cond, view, ctx)
        if verdict:
            return True
        details.append(getattr(verdict, "detail", None) or cond[0].name)
    return Violation("none of the conditions held: " + "; ".join(details))


@rule(
    name="not",
    description="Complies when the nested condition is violated.",
    params_schema={
        "type": "object",
        "required": ["condition"],
        "properties": {"condition": _CONDITION},
    },
    example_params={
        "condition": {"rule_type": "field_in", "params": {"field": "verb", "values": ["DELETE"]}}
    },
    prepare=lambda params: _prepare_one(params["condition"]),
    _builtin=True,
)
def not_(view: Any, cond: Prepared, ctx: Any) -> Any:
    if _run(cond, view, ctx):
        return Violation(f"condition {cond[0].name} held")
    return True
