"""Hypothesis fuzzing of the public entry points: manifests, behaviors and step inputs raise
only their documented errors, with a message, and never lose a record."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import charter
import pytest
import yaml
from charter import Behavior, Governor, PolicyLoadError, parse_manifest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Text with everything awkward in it: lone surrogates, controls, invisible characters.
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=24)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(TEXT, st.integers()), inner, max_size=4),
    ),
    max_leaves=20,
)
FIELDS = (
    "agent_id",
    "task_id",
    "kind",
    "verb",
    "step_name",
    "action_id",
    "seq",
    "timestamp",
    "input",
    "output",
    "properties",
    "meta",
)
KINDS = st.sampled_from(["task.start", "step.exec", "step.resource", "step.model", "nope"])
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(FIELDS),
        st.one_of(JSONISH, KINDS, st.sampled_from(["GET", "POST", "t1", "2026-01-01T00:00:00Z"])),
    )
)
def test_behavior_from_dict_raises_only_value_error(data: dict[str, Any]) -> None:
    try:
        b = Behavior.from_dict(data)
    except ValueError as exc:
        assert str(exc)
    else:
        assert Behavior.from_dict(b.to_dict()) == b


@FUZZ
@given(JSONISH)
def test_behavior_from_dict_of_anything(data: Any) -> None:
    with pytest.raises(ValueError):
        Behavior.from_dict(data if not isinstance(data, dict) else {**data, "kind": 1})


POLICY_KEYS = st.sampled_from(
    ["name", "rule_type", "severity", "params", "match", "action", "description", "agents"]
)
POLICY = st.dictionaries(
    POLICY_KEYS,
    st.one_of(
        JSONISH,
        st.sampled_from(["field_matches", "no_secrets", "deny", "critical", "low", "ask"]),
        st.fixed_dictionaries({"field": st.sampled_from(["input.command", "x", "input.[", ""])}),
    ),
)
MANIFEST = st.fixed_dictionaries(
    {"name": st.one_of(TEXT, JSONISH), "version": JSONISH, "policies": st.lists(POLICY, max_size=3)}
)


@FUZZ
@given(MANIFEST)
def test_manifests_are_refused_with_problems_never_crashes(manifest: dict[str, Any]) -> None:
    try:
        text = yaml.safe_dump(manifest, allow_unicode=True)
    except yaml.YAMLError:
        return  # not representable as YAML: nothing to parse
    result = parse_manifest(text)
    assert all("could not be parsed" not in str(e) for e in result.errors), result.errors
    assert result.valid or result.errors


@FUZZ
@given(st.text(max_size=200))
def test_manifest_text_never_crashes(text: str) -> None:
    result = parse_manifest(text)
    assert all("could not be parsed" not in str(e) for e in result.errors), result.errors


@FUZZ
@given(st.lists(POLICY, max_size=3))
def test_inline_policies_raise_only_policy_load_error(policies: list[dict[str, Any]]) -> None:
    try:
        gov = Governor(policies=policies, audit_location="none")
    except PolicyLoadError as exc:
        assert exc.problems
    else:
        gov.close()


class _Weird:
    def __init__(self, fail: bool) -> None:
        self.fail = fail

    def __repr__(self) -> str:
        if self.fail:
            raise RuntimeError("no repr")
        return "Weird()"


PYTHON = st.recursive(
    st.one_of(
        SCALARS,
        st.binary(max_size=16),
        st.integers(min_value=10**4400, max_value=10**4401),
        st.datetimes(timezones=st.just(dt.UTC)),
        st.decimals(allow_nan=True),
        st.builds(_Weird, st.booleans()),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.frozensets(st.integers(), max_size=3),
        st.dictionaries(st.one_of(TEXT, st.integers(), st.booleans()), inner, max_size=4),
    ),
    max_leaves=16,
)


@pytest.fixture(scope="module")
def governor(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("fuzz") / "audit.jsonl"
    gov = Governor(
        policies=[
            {
                "name": "no-rm",
                "rule_type": "field_matches",
                "severity": "critical",
                "params": {"field": "input.command", "pattern": "rm -rf"},
            },
            {"name": "no-secrets", "rule_type": "no_secrets", "severity": "high"},
        ],
        audit_location=f"jsonl:///{path}",
        audit_durability="sync",
    )
    yield gov
    assert gov.status()["counters"]["redaction_errors"] == 0
    gov.close()
    assert charter.verify(f"jsonl:///{path}").ok


@FUZZ
@given(PYTHON, PYTHON)
def test_step_inputs_are_judged_and_recorded(governor: Governor, value: Any, output: Any) -> None:
    with governor.task():
        try:
            with governor.step(
                "step.exec", name="tool", input={"command": "ls", "arg": value}
            ) as s:
                s.output = output
        except charter.BlockedError as exc:
            assert str(exc)
