"""Policies: what a manifest entry is, and how a set of them is checked and compiled."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from charter._model.frozen import Frozen
from charter._model.ijson import checked_copy
from charter._policy import rules as _builtin_rules  # noqa: F401  (the built-ins' loader)
from charter._policy.params import check_params
from charter._policy.registry import RuleSpec, check_condition, get_rule
from charter._policy.selector import SELECTOR_SCHEMA, Selector

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EnforcementPoint", "Policy", "PolicyProblem", "Severity"]


class Severity(StrEnum):
    """How bad a violation is: critical blocks, high/medium/low warn, info is only recorded."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"


class EnforcementPoint(StrEnum):
    """Where a policy is judged: on every step, or once when an agent registers."""

    STEP_EXECUTION = "step_execution"
    AGENT_REGISTRATION = "agent_registration"


POLICY_KEYS: dict[str, Any] = {
    "name": {"type": "string", "minLength": 1, "maxLength": 200},
    "rule_type": {"type": "string", "minLength": 1},
    "params": {"type": "object"},
    "severity": {"type": "string", "enum": [s.value for s in Severity]},
    "enforcement_point": {"type": "string", "enum": [p.value for p in EnforcementPoint]},
    "description": {"type": "string"},
    "action": {"type": "string", "enum": ["ask"]},
    "match": SELECTOR_SCHEMA,
    "environments": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "risk_classifications": {"type": "array", "items": {"type": "string", "minLength": 1}},
    "agents": {"type": "array", "items": {"type": "string", "minLength": 1}},
}
POLICY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "rule_type", "severity"],
    "properties": POLICY_KEYS,
}


class Policy(Frozen):
    """One policy: a rule with params, a severity and optional filters.

    Build from a mapping with `Policy.from_dict` (checked) or directly; either way a set is only
    enforced after `PolicyEngine.load_policies` has checked it whole.
    """

    __slots__ = (
        "action",
        "agents",
        "description",
        "enforcement_point",
        "environments",
        "match",
        "name",
        "params",
        "risk_classifications",
        "rule_type",
        "severity",
    )
    name: str
    rule_type: str
    severity: Severity
    params: Mapping[str, Any]
    enforcement_point: EnforcementPoint
    description: str | None
    action: str | None
    match: Mapping[str, Any] | None
    environments: tuple[str, ...] | None
    risk_classifications: tuple[str, ...] | None
    agents: tuple[str, ...] | None

    def __init__(
        self,
        name: str,
        rule_type: str,
        severity: Severity,
        params: Mapping[str, Any],
        enforcement_point: EnforcementPoint = EnforcementPoint.STEP_EXECUTION,
        description: str | None = None,
        action: str | None = None,
        match: Mapping[str, Any] | None = None,
        environments: tuple[str, ...] | None = None,
        risk_classifications: tuple[str, ...] | None = None,
        agents: tuple[str, ...] | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "name", name)
        put(self, "rule_type", rule_type)
        put(self, "severity", severity)
        put(self, "params", params)
        put(self, "enforcement_point", enforcement_point)
        put(self, "description", description)
        put(self, "action", action)
        put(self, "match", match)
        put(self, "environments", environments)
        put(self, "risk_classifications", risk_classifications)
        put(self, "agents", agents)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Policy:
        """Build from a manifest entry; raises ValueError listing every problem found."""
        policy, problems = _policy_from_mapping(data, 0)
        if policy is None:
            raise ValueError("; ".join(str(p) for p in problems))
        return policy

    def to_dict(self) -> dict[str, Any]:
        """The manifest form: parsing it back gives an equal policy."""
        out: dict[str, Any] = {
            "name": self.name,
            "rule_type": self.rule_type,
            "severity": self.severity.value,
            "enforcement_point": self.enforcement_point.value,
            "params": checked_copy(dict(self.params), "params"),
        }
        if self.description is not None:
            out["description"] = self.description
        if self.action is not None:
            out["action"] = self.action
        if self.match is not None:
            out["match"] = checked_copy(dict(self.match), "match")
        for key in ("environments", "risk_classifications", "agents"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value)
        return out


class PolicyProblem(Frozen):
    """One thing wrong with a policy set, naming the policy, its rule and the key."""

    __slots__ = (
        "key",
        "message",
        "policy",
        "rule",
        "source",
    )
    message: str
    key: str
    policy: str | None
    rule: str | None
    source: str | None

    def __init__(
        self,
        message: str,
        key: str = "",
        policy: str | None = None,
        rule: str | None = None,
        source: str | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "message", message)
        put(self, "key", key)
        put(self, "policy", policy)
        put(self, "rule", rule)
        put(self, "source", source)

    def __str__(self) -> str:
        where = []
        if self.source:
            where.append(self.source)
        if self.policy is not None:
            label = f"policy {self.policy!r}"
            if self.rule:
                label += f" (rule {self.rule})"
            where.append(label)
        prefix = ": ".join(where)
        body = f"{self.key}: {self.message}" if self.key else self.message
        return f"{prefix}: {body}" if prefix else body


class CompiledPolicy(Frozen):
    """A checked policy with its rule resolved and params prepared for the hot path."""

    __slots__ = (
        "ask",
        "policy",
        "prepared",
        "selector",
        "spec",
    )
    policy: Policy
    spec: RuleSpec
    prepared: Any
    selector: Selector
    ask: bool

    def __init__(
        self,
        policy: Policy,
        spec: RuleSpec,
        prepared: Any,
        selector: Selector,
        ask: bool,
    ) -> None:
        put = object.__setattr__
        put(self, "policy", policy)
        put(self, "spec", spec)
        put(self, "prepared", prepared)
        put(self, "selector", selector)
        put(self, "ask", ask)


def _split(message: str) -> tuple[str, str]:
    key, sep, rest = message.partition(": ")
    return (key, rest) if sep else ("", message)


def _policy_from_mapping(data: Any, index: int) -> tuple[Policy | None, list[PolicyProblem]]:
    if not isinstance(data, Mapping):
        return None, [
            PolicyProblem(
                f"expected a mapping, got {type(data).__name__}", key=f"policies[{index}]"
            )
        ]
    name = data.get("name")
    label = name if isinstance(name, str) and name else f"policies[{index}]"
    rule_type = data.get("rule_type") if isinstance(data.get("rule_type"), str) else None
    problems = [
        PolicyProblem(msg, key=key.lstrip("."), policy=label, rule=rule_type)
        for key, msg in map(_split, check_params(dict(data), POLICY_SCHEMA, ""))
    ]
    spec: RuleSpec | None = None
    if rule_type is not None:
        try:
            spec = get_rule(rule_type)
        except KeyError as exc:
            problems.append(
                PolicyProblem(exc.args[0], key="rule_type", policy=label, rule=rule_type)
            )
    point_value = data.get("enforcement_point", "step_execution")
    if spec is not None and point_value in (p.value for p in EnforcementPoint):
        if point_value not in spec.enforcement_points:
            allowed = ", ".join(sorted(spec.enforcement_points))
            problems.append(
                PolicyProblem(
                    f"rule {spec.name!r} cannot be enforced at {point_value}; use {allowed}",
                    key="enforcement_point",
                    policy=label,
                    rule=rule_type,
                )
            )
    params = data.get("params", {})
    if spec is not None and isinstance(params, dict):
        for msg in check_params(params, spec.params_schema, "params", check_condition):
            key, text = _split(msg)
            problems.append(PolicyProblem(text, key=key, policy=label, rule=rule_type))
    if problems or spec is None:
        return None, problems
    point = EnforcementPoint(point_value)

    def _tuple(key: str) -> tuple[str, ...] | None:
        value = data.get(key)
        return tuple(value) if value is not None else None

    policy = Policy(
        name=data["name"],
        rule_type=data["rule_type"],
        severity=Severity(data["severity"]),
        params=checked_copy(dict(params), "params"),
        enforcement_point=point,
        description=data.get("description"),
        action=data.get("action"),
        match=checked_copy(dict(data["match"]), "match") if data.get("match") else None,
        environments=_tuple("environments"),
        risk_classifications=_tuple("risk_classifications"),
        agents=_tuple("agents"),
    )
    return policy, []


def compile_policies(
    items: Iterable[Policy | CompiledPolicy | Mapping[str, Any]], source: str | None = None
) -> tuple[list[CompiledPolicy], list[PolicyProblem]]:
    """Check and compile a whole set; returns the compiled set and every problem found.

    A set with any problem must be refused whole by the caller. Names must be unique.
    A `CompiledPolicy` (from an earlier call) is taken as it is: it was checked when it was
    compiled and cannot change since; only its name is checked against the rest of the set.
    """
    compiled: list[CompiledPolicy] = []
    problems: list[PolicyProblem] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if type(item) is CompiledPolicy:
            if item.policy.name in seen:
                problems.append(
                    PolicyProblem(
                        "duplicate policy name; names must be unique in a set",
                        key="name",
                        policy=item.policy.name,
                        rule=item.policy.rule_type,
                        source=source,
                    )
                )
                continue
            seen.add(item.policy.name)
            compiled.append(item)
            continue
        if isinstance(item, Policy):
            policy, found = _policy_from_mapping(item.to_dict(), index)
        else:
            policy, found = _policy_from_mapping(item, index)
        if policy is None:
            problems.extend(_with_source(p, source) for p in found)
            continue
        if policy.name in seen:
            problems.append(
                PolicyProblem(
                    "duplicate policy name; names must be unique in a set",
                    key="name",
                    policy=policy.name,
                    rule=policy.rule_type,
                    source=source,
                )
            )
            continue
        seen.add(policy.name)
        spec = get_rule(policy.rule_type)
        try:
            prepared = spec.prepare(dict(policy.params)) if spec.prepare else policy.params
        except ValueError as exc:
            problems.append(
                PolicyProblem(
                    str(exc), key="params", policy=policy.name, rule=policy.rule_type, source=source
                )
            )
            continue
        compiled.append(
            CompiledPolicy(
                policy=policy,
                spec=spec,
                prepared=prepared,
                selector=Selector.from_params(policy.match),
                ask=policy.action == "ask",
            )
        )
    return compiled, problems


def _with_source(p: PolicyProblem, source: str | None) -> PolicyProblem:
    if source is None:
        return p
    return PolicyProblem(p.message, key=p.key, policy=p.policy, rule=p.rule, source=source)
