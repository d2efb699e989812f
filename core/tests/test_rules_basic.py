"""The stateless built-in rules, each with complying and violating steps."""

from __future__ import annotations

from typing import Any

import pytest
from charter import Behavior, Decision, EvalContext, PolicyEngine

CTX = EvalContext(agent_id="agent", task_id="t1", declared_tools=("search", "get_weather"))


def step(
    kind: str = "step.exec", verb: str | None = None, name: str = "Bash", **kw: Any
) -> Behavior:
    return Behavior(agent_id="agent", task_id="t1", kind=kind, verb=verb, step_name=name, **kw)


def verdict(rule_type: str, params: dict[str, Any], b: Behavior, ctx: EvalContext = CTX) -> Any:
    engine = PolicyEngine(
        [{"name": "p", "rule_type": rule_type, "severity": "critical", "params": params}]
    )
    result = engine.evaluate(b, ctx)
    assert len(result.results) == 1
    return result.results[0]


def test_deny_violates_every_matching_step_with_its_reason() -> None:
    r = verdict("deny", {"reason": "no deletes here"}, step())
    assert r.violated and r.details == "no deletes here"


def test_allow_only_with_a_list_of_globs() -> None:
    assert not verdict(
        "allow_only", {"tools": ["get_*", "search"]}, step(name="get_weather")
    ).violated
    r = verdict("allow_only", {"tools": ["get_*"]}, step(name="delete_all"))
    assert r.violated and "'delete_all' is not an allowed tool" in r.details


def test_allow_only_falls_back_to_declared_tools_and_fails_closed_without_them() -> None:
    assert not verdict("allow_only", {}, step(name="search")).violated
    assert verdict("allow_only", {}, step(name="rm")).violated
    bare = EvalContext(agent_id="agent", task_id="t1")
    r = verdict("allow_only", {}, step(name="search"), bare)
    assert r.violated and "declared no tools" in r.details


@pytest.mark.parametrize(
    ("command", "violated"),
    [("ls -la", False), ("sudo rm -rf /", True), ("echo ok && rm  -rf /var", True)],
)
def test_field_matches_forbid(command: str, violated: bool) -> None:
    params = {"field": "input.command", "pattern": r"rm\s+-rf\s+/"}
    assert verdict("field_matches", params, step(input={"command": command})).violated is violated


def test_field_matches_searches_lists_and_nested_values() -> None:
    params = {"field": "input", "pattern": "secret-project", "ignore_case": True}
    b = step(input={"files": [{"path": "a"}, {"path": "docs/SECRET-PROJECT/x"}]})
    assert verdict("field_matches", params, b).violated
    params = {"field": "input.files[*].path", "pattern": "^/etc/"}
    assert not verdict("field_matches", params, b).violated
    params = {"field": "input.files[*].path", "pattern": "^docs/", "mode": "require"}
    r = verdict("field_matches", params, b)
    assert r.violated and "value 'a' does not match" in r.details


def test_field_matches_require_mode_and_missing_fields() -> None:
    params = {"field": "properties.target.url", "pattern": "^https://", "mode": "require"}
    ok = step("step.resource", "GET", properties={"target": {"url": "https://x.org"}})
    bad = step("step.resource", "GET", properties={"target": {"url": "http://x.org"}})
    assert not verdict("field_matches", params, ok).violated
    r = verdict("field_matches", params, bad)
    assert r.violated and "does not match" in r.details
    r = verdict("field_matches", params, step("step.resource", "GET"))
    assert r.violated and "properties.target.url is missing" in r.details
    forbid = {"field": "input.command", "pattern": "x"}
    assert not verdict("field_matches", forbid, step()).violated


def test_field_in_and_field_not_in() -> None:
    hosts = {"field": "properties.target.host", "values": ["API.example.com"], "ignore_case": True}
    ok = step("step.resource", "GET", properties={"target": {"host": "api.example.com"}})
    bad = step("step.resource", "GET", properties={"target": {"host": "evil.example"}})
    assert not verdict("field_in", hosts, ok).violated
    assert verdict("field_in", hosts, bad).violated
    assert verdict("field_in", hosts, step("step.resource", "GET")).violated  # missing: closed
    tables = {"field": "input.tables", "values": ["users"]}
    assert verdict("field_not_in", tables, step(input={"tables": ["logs", "users"]})).violated
    assert not verdict("field_not_in", tables, step(input={"tables": ["logs"]})).violated
    assert not verdict("field_not_in", tables, step()).violated


@pytest.mark.parametrize(
    ("op", "value", "amount", "violated"),
    [
        ("<=", 100, 100, False),
        ("<=", 100, 100.5, True),
        ("<", 1, 0, False),
        (">", 5, 5, True),
        (">=", 5, 5, False),
        ("==", 3, 3, False),
        ("!=", 3, 3, True),
    ],
)
def test_field_compare(op: str, value: float, amount: float, violated: bool) -> None:
    params = {"field": "input.amount", "op": op, "value": value}
    assert verdict("field_compare", params, step(input={"amount": amount})).violated is violated


def test_field_compare_refuses_non_numbers_and_missing_values() -> None:
    params = {"field": "input.amount", "op": "<=", "value": 10}
    r = verdict("field_compare", params, step(input={"amount": "5"}))
    assert r.violated and "is not a number" in r.details
    assert verdict("field_compare", params, step()).violated
    lenient = {**params, "if_missing": "comply"}
    assert not verdict("field_compare", lenient, step()).violated


def test_compound_rules() -> None:
    is_get = {"rule_type": "field_in", "params": {"field": "verb", "values": ["GET"]}}
    safe = {
        "rule_type": "field_matches",
        "params": {"field": "step_name", "pattern": "^safe_", "mode": "require"},
    }
    get_safe = step("step.resource", "GET", name="safe_read")
    post_safe = step("step.resource", "POST", name="safe_write")
    post_other = step("step.resource", "POST", name="write")
    assert not verdict("all_of", {"conditions": [is_get, safe]}, get_safe).violated
    assert verdict("all_of", {"conditions": [is_get, safe]}, post_safe).violated
    assert not verdict("any_of", {"conditions": [is_get, safe]}, post_safe).violated
    r = verdict("any_of", {"conditions": [is_get, safe]}, post_other)
    assert r.violated and r.details.startswith("none of the conditions held")
    assert verdict("not", {"condition": safe}, post_safe).violated
    nested = {"condition": {"rule_type": "all_of", "params": {"conditions": [is_get, safe]}}}
    assert verdict("not", nested, get_safe).violated
    assert not verdict("not", nested, post_other).violated


def test_registration_rules() -> None:
    engine = PolicyEngine(
        [
            {
                "name": "owner",
                "rule_type": "requires_fields",
                "severity": "critical",
                "enforcement_point": "agent_registration",
                "params": {"fields": ["purpose", "owner"]},
            },
            {
                "name": "no-unacceptable",
                "rule_type": "classification_not_in",
                "severity": "high",
                "enforcement_point": "agent_registration",
                "params": {"values": ["unacceptable", "unclassified"]},
            },
        ]
    )
    bare = EvalContext(agent_id="agent", task_id="reg")
    result = engine.evaluate_registration(bare)
    assert result.decision is Decision.BLOCK
    details = {r.name: r.details for r in result.results}
    assert details["owner"] == "the agent must declare purpose, owner"
    assert details["no-unacceptable"] == "risk classification 'unclassified' is not allowed"
    full = EvalContext(
        agent_id="agent",
        task_id="reg",
        agent_purpose="answers tickets",
        agent_owner="support-team",
        risk_classification="limited",
    )
    assert engine.evaluate_registration(full).decision is Decision.ALLOW
    # registration policies are not judged on steps
    assert engine.evaluate(step(), CTX).results == ()
