"""Manifests: parsing reports every error at once; loading is whole or nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import charter
import pytest
import yaml
from charter import PolicyEngine, PolicyLoadError, load_manifest_policies, parse_manifest
from hypothesis import given, settings
from hypothesis import strategies as st

GOOD = """
name: shell-safety
description: keep the shell safe
version: 3
policies:
  - name: no-rm-rf
    rule_type: field_matches
    severity: critical
    description: recursive deletes of the root destroy the machine
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: 'rm\\s+-rf\\s+/'}
  - name: deletes-ask
    rule_type: deny
    severity: high
    action: ask
    match: {kinds: [step.resource], verbs: [DELETE]}
    params: {}
  - name: must-have-owner
    rule_type: requires_fields
    severity: high
    enforcement_point: agent_registration
    params: {fields: [owner]}
"""


def test_a_valid_manifest_parses() -> None:
    result = parse_manifest(GOOD)
    assert result.valid, result.error_lines()
    assert result.name == "shell-safety" and result.version == "3"
    assert [p.name for p in result.policies] == ["no-rm-rf", "deletes-ask", "must-have-owner"]
    assert result.policies[1].action == "ask"


def test_every_error_is_reported_at_once_naming_policy_rule_and_key() -> None:
    text = """
name: broken
version: 1
policies:
  - name: typo
    rule_type: field_matchs
    severity: crit
    params: {}
  - name: bad-params
    rule_type: field_matches
    severity: high
    params: {field: input.x, pattern: '(?=lookahead)', mode: sometimes, extra: 1}
  - name: bad-nested
    rule_type: any_of
    severity: low
    params:
      conditions:
        - {rule_type: field_matches, params: {field: input.a, pattern: ok}}
        - {rule_type: field_matches, params: {field: input.b, pattern: '(a)\\1'}}
  - name: wrong-point
    rule_type: requires_fields
    severity: low
    params: {fields: [owner]}
"""
    result = parse_manifest(text, source="p.yaml")
    assert not result.valid and result.policies == ()
    lines = result.error_lines()
    assert any(
        "policy 'typo' (rule field_matchs): rule_type: unknown rule_type 'field_matchs'; "
        "did you mean 'field_matches'" in line
        for line in lines
    ), lines
    assert any(
        "policy 'typo'" in line and "severity: 'crit' is not one of" in line for line in lines
    )
    assert any(
        "policy 'bad-params' (rule field_matches): params.pattern:" in line and "lookaround" in line
        for line in lines
    )
    assert any("params.mode: 'sometimes' is not one of 'forbid', 'require'" in ln for ln in lines)
    assert any("params.extra: unknown key" in line for line in lines)
    assert any(
        "policy 'bad-nested' (rule any_of): params.conditions[1].params.pattern:" in line
        and "backreferences" in line
        for line in lines
    ), lines
    assert any(
        "policy 'wrong-point'" in line
        and "enforcement_point" in line
        and "agent_registration" in line
        for line in lines
    )
    assert all(line.startswith("p.yaml: ") for line in lines)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "is empty"),
        ("- a\n- b\n", "must be a mapping"),
        ("name: x\nversion: 1\npolicies: [\n", "invalid YAML at line"),
        ("name: x\nname: y\nversion: 1\npolicies: []\n", "duplicate key 'name'"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("version: 1\npolicies: []\n", "manifest.name: required key is missing"),
        ("name: x\nversion: 1\npolicies: []\nextra: 1\n", "manifest.extra: unknown key"),
        ("name: x\nversion: 1\npolicies: {}\n", "manifest.policies: expected array"),
        (b"\xff\xfe", "is not UTF-8"),
    ],
)
def test_bad_manifests_are_reported_not_raised(text: str | bytes, expected: str) -> None:
    result = parse_manifest(text)
    assert not result.valid
    assert any(expected in line for line in result.error_lines()), result.error_lines()


def test_duplicate_policy_names_are_refused() -> None:
    text = (
        "name: x\nversion: 1\npolicies:\n"
        "  - {name: a, rule_type: deny, severity: low, params: {}}\n"
        "  - {name: a, rule_type: deny, severity: high, params: {}}\n"
    )
    result = parse_manifest(text)
    assert any("policy 'a'" in ln and "duplicate policy name" in ln for ln in result.error_lines())


def test_load_manifest_policies_from_several_files(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text(GOOD)
    b.write_text(
        "name: b\nversion: 1\npolicies:\n  - {name: other, rule_type: deny, severity: low}\n"
    )
    assert len(load_manifest_policies([a, b])) == 4
    assert len(load_manifest_policies(f"{a},{b}")) == 4


def test_load_refuses_the_whole_set_listing_every_problem(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text(GOOD)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: b\nversion: 1\npolicies:\n  - {name: no-rm-rf, rule_type: nope, severity: low}\n"
    )
    missing = tmp_path / "missing.yaml"
    with pytest.raises(PolicyLoadError) as info:
        load_manifest_policies([a, bad, missing])
    problems = info.value.problems
    assert any("missing.yaml: cannot be read" in p for p in problems)
    assert any(
        "bad.yaml: policy 'no-rm-rf' (rule nope): rule_type: unknown rule_type" in p
        for p in problems
    )
    assert "nothing was loaded" in str(info.value)


def test_same_policy_name_in_two_files_is_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text(GOOD)
    b = tmp_path / "b.yaml"
    b.write_text(GOOD.replace("shell-safety", "copy"))
    with pytest.raises(PolicyLoadError, match="also defined in"):
        load_manifest_policies([a, b])


def test_a_refused_load_leaves_the_previous_set_in_force() -> None:
    engine = PolicyEngine(parse_manifest(GOOD).policies)
    with pytest.raises(PolicyLoadError):
        engine.load_policies([{"name": "x", "rule_type": "nope", "severity": "low"}])
    assert [p.name for p in engine.policies] == ["no-rm-rf", "deletes-ask", "must-have-owner"]


def test_manifest_schema_is_built_from_the_registry() -> None:
    schema = charter.manifest_schema()
    policy = schema["$defs"]["policy"]
    rule_types = policy["properties"]["rule_type"]["enum"]
    assert {"deny", "allow_only", "field_matches", "all_of", "requires_fields"} <= set(rule_types)
    branch = next(
        b for b in policy["allOf"] if b["if"]["properties"]["rule_type"]["const"] == "field_matches"
    )
    params = branch["then"]["properties"]["params"]
    assert params["required"] == ["field", "pattern"]
    assert params["additionalProperties"] is False


def test_registered_example_params_are_valid() -> None:
    for spec in charter.registered_rules():
        if spec.example_params is None:
            continue
        point = sorted(spec.enforcement_points)[-1]
        engine = PolicyEngine()
        engine.load_policies(
            [
                {
                    "name": "p",
                    "rule_type": spec.name,
                    "severity": "low",
                    "enforcement_point": point,
                    "params": spec.example_params,
                }
            ]
        )


@given(st.text(max_size=400) | st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_parse_manifest_never_raises(text: str | bytes) -> None:
    result = parse_manifest(text)
    assert result.valid is (not result.errors)


class _NoAliasDumper(yaml.SafeDumper):
    """Manifests refuse aliases, so the generated ones must not contain any."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliasDumper)


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=10,
)


@given(st.dictionaries(st.sampled_from(["name", "version", "policies", "x"]), yaml_values))
@settings(max_examples=300, deadline=None)
def test_parse_manifest_never_raises_on_structured_garbage(data: dict[str, Any]) -> None:
    result = parse_manifest(dump(data))
    assert result.valid is (not result.errors)


policy_entries = st.builds(
    lambda i, sev, rule, ask: {
        "name": f"p{i}",
        "severity": sev,
        **rule,
        **({"action": "ask"} if ask else {}),
    },
    st.integers(0, 10_000),
    st.sampled_from(["critical", "high", "medium", "low", "info"]),
    st.sampled_from(
        [
            {"rule_type": "deny", "params": {"reason": "no"}},
            {"rule_type": "field_matches", "params": {"field": "input.a", "pattern": "x+"}},
            {"rule_type": "field_in", "params": {"field": "verb", "values": ["GET", "POST"]}},
            {
                "rule_type": "field_compare",
                "params": {"field": "input.n", "op": "<=", "value": 3.5},
                "match": {"kinds": ["step.resource"], "verbs": ["POST"]},
            },
            {"rule_type": "allow_only", "params": {"tools": ["get_*"]}, "environments": ["prod"]},
        ]
    ),
    st.booleans(),
)


@given(st.lists(policy_entries, max_size=6, unique_by=lambda p: p["name"]))
@settings(max_examples=150, deadline=None)
def test_valid_manifests_round_trip(entries: list[dict[str, Any]]) -> None:
    text = dump({"name": "m", "version": "1", "policies": entries})
    first = parse_manifest(text)
    assert first.valid, first.error_lines()
    again = parse_manifest(
        dump({"name": "m", "version": "1", "policies": [p.to_dict() for p in first.policies]})
    )
    assert again.valid and again.policies == first.policies
