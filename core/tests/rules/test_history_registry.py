"""The history rules and guards are registered built-ins with usable schemas and examples."""

from __future__ import annotations

from typing import Any

import pytest
from charter import (
    Behavior,
    EvalContext,
    PolicyEngine,
    PolicyLoadError,
    get_rule,
    manifest_schema,
)

RULES = [
    "max_steps",
    "rate_limit",
    "budget",
    "requires_gate",
    "forbid_after",
    "no_repeat",
    "time_window",
    "path_within_root",
    "no_secrets",
    "value_provenance",
]


@pytest.mark.parametrize("name", RULES)
def test_registered_with_description_schema_and_a_loadable_example(name: str) -> None:
    spec = get_rule(name)
    assert spec.builtin
    assert spec.enforcement_points == frozenset({"step_execution"})
    assert len(spec.description) > 40
    assert spec.params_schema["type"] == "object"
    assert spec.example_params is not None
    engine = PolicyEngine(
        [{"name": "p", "rule_type": name, "severity": "high", "params": spec.example_params}]
    )
    assert engine.load_report().state == "enforcing"


@pytest.mark.parametrize("name", RULES)
def test_unknown_params_are_refused(name: str) -> None:
    params = dict(get_rule(name).example_params or {})
    params["no_such_param"] = 1
    with pytest.raises(PolicyLoadError, match="no_such_param: unknown key"):
        PolicyEngine([{"name": "p", "rule_type": name, "severity": "high", "params": params}])


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("max_steps", {}, "params.max: required"),
        ("max_steps", {"max": -1}, "below the minimum"),
        ("max_steps", {"max": 2, "select": {"kinds": ["step.nope"]}}, "is not one of"),
        ("rate_limit", {"max": 1}, "window_seconds: required"),
        ("budget", {"field": "input.amount"}, "limit: required"),
        ("budget", {"field": "amount", "limit": 3}, "a path starts with"),
        ("requires_gate", {"gate_kind": "robot"}, "is not one of"),
        ("requires_gate", {"within_steps": 0}, "below the minimum"),
        ("forbid_after", {}, "after: required"),
        ("forbid_after", {"after": {"where": []}}, "at least 1 item"),
        ("no_repeat", {"max": 0}, "below the minimum"),
        ("value_provenance", {"fields": []}, "at least 1 item"),
        ("no_secrets", {"fields": ["nowhere"]}, "a path starts with"),
    ],
)
def test_bad_params_are_refused_with_the_key(
    name: str, params: dict[str, Any], message: str
) -> None:
    with pytest.raises(PolicyLoadError, match=message):
        PolicyEngine([{"name": "p", "rule_type": name, "severity": "high", "params": params}])


def test_the_manifest_schema_lists_them() -> None:
    names = manifest_schema()["$defs"]["policy"]["properties"]["rule_type"]["enum"]
    assert set(RULES) <= set(names)


def test_rules_work_inside_compound_rules() -> None:
    engine = PolicyEngine(
        [
            {
                "name": "p",
                "rule_type": "any_of",
                "severity": "critical",
                "params": {
                    "conditions": [
                        {"rule_type": "max_steps", "params": {"max": 0}},
                        {"rule_type": "no_repeat", "params": {}},
                    ]
                },
            }
        ]
    )
    ctx = EvalContext(agent_id="a", task_id="t")
    engine.record(Behavior(agent_id="a", task_id="t", kind="task.start", step_name="s"))
    b = Behavior(agent_id="a", task_id="t", kind="step.exec", step_name="x")
    assert not engine.evaluate(b, ctx).results[0].violated
