"""Tests for charter._policy.params: the quick conforming walk never changes a verdict.

`check_params` first asks a walk that only answers yes or no, and names errors with the full
walk only when it says no. The property below holds it to the definition: the full walk run
alone (`_reference`) finds the same errors, in the same order, and raises the same exceptions.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from typing import Any

import pytest
from charter._policy.params import _check, check_params
from charter._policy.policy import POLICY_SCHEMA
from charter._policy.registry import check_condition, registered_rules
from hypothesis import given, settings
from hypothesis import strategies as st


def _reference(
    value: Any, schema: dict[str, Any], path: str = "params", checker: Any = None
) -> list[str]:
    errors: list[str] = []
    _check(value, schema, path, errors, checker)
    return errors


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as exc:
        return "raised", (type(exc), str(exc))


def _stub_checker(cond: Any, path: str) -> list[str]:
    return [f"{path}: not a good condition"] if cond.get("bad") else []


class Level(enum.IntEnum):
    LOW = 1


class Colour(enum.StrEnum):
    RED = "red"


_TYPE_NAMES = ["string", "integer", "number", "boolean", "array", "object", "null"]
_FORMATS = [None, "re2", "path", "glob", "timezone", "condition"]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-5, 5),
    st.just(float("nan")),
    st.sampled_from(["", "a", "abc", "a.b", "a[", "(?=x)", "UTC", "Nowhere/Zone", "x" * 12]),
    st.text(max_size=6),
    st.just(Level.LOW),
    st.just(Colour.RED),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["a", "b", "c", "bad", "rule_type"]), inner, max_size=4),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2).map(OrderedDict),
    ),
    max_leaves=12,
)


def _schema_strategy() -> st.SearchStrategy[dict[str, Any]]:
    bound = st.one_of(st.integers(-3, 3), st.floats(-3, 3, allow_nan=False))
    type_field = st.one_of(
        st.sampled_from(_TYPE_NAMES),
        st.lists(st.sampled_from(_TYPE_NAMES), min_size=1, max_size=3),
        st.just("unknown"),
    )
    leaf = st.fixed_dictionaries(
        {},
        optional={
            "type": type_field,
            "enum": st.lists(_scalars, max_size=3),
            "minimum": bound,
            "maximum": bound,
            "exclusiveMinimum": bound,
            "minLength": st.integers(0, 4),
            "maxLength": st.integers(0, 6),
            "minItems": st.integers(0, 3),
            "maxItems": st.integers(0, 4),
            "format": st.sampled_from(_FORMATS),
        },
    )

    def nested(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        return st.builds(
            lambda base, extra: {**base, **extra},
            leaf,
            st.fixed_dictionaries(
                {},
                optional={
                    "items": inner,
                    "properties": st.dictionaries(
                        st.sampled_from(["a", "b", "c", "rule_type"]), inner, max_size=3
                    ),
                    "required": st.lists(st.sampled_from(["a", "b", "c"]), max_size=2),
                    "additionalProperties": st.one_of(st.booleans(), inner),
                },
            ),
        )

    return st.recursive(leaf, nested, max_leaves=6)


@settings(max_examples=1500, deadline=None)
@given(
    value=_values,
    schema=_schema_strategy(),
    checker=st.sampled_from([None, _stub_checker]),
)
def test_the_quick_walk_agrees_with_the_full_walk(
    value: Any, schema: dict[str, Any], checker: Any
) -> None:
    assert _outcome(check_params, value, schema, "p", checker) == _outcome(
        _reference, value, schema, "p", checker
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_built_in_rule_schemas_judge_as_before(data: st.DataObject) -> None:
    spec = data.draw(st.sampled_from(registered_rules()))
    params = data.draw(
        st.one_of(
            st.just(spec.example_params or {}),
            st.dictionaries(st.sampled_from(sorted(_keys(spec.params_schema))), _values),
        )
    )
    assert _outcome(check_params, params, spec.params_schema, "params", check_condition) == (
        _outcome(_reference, params, spec.params_schema, "params", check_condition)
    )


def _keys(schema: dict[str, Any]) -> set[str]:
    return set(schema.get("properties", {})) | {"unknown_key"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            {"name": "n", "rule_type": "x", "severity": "bad", "extra": 1},
            [
                ".severity: 'bad' is not one of 'critical', 'high', 'medium', 'low', 'info'",
                ".extra: unknown key; expected one of: action, agents, description, "
                "enforcement_point, environments, match, name, params, risk_classifications, "
                "rule_type, severity",
            ],
        ),
        (
            {"rule_type": "x"},
            [".name: required key is missing", ".severity: required key is missing"],
        ),
        (
            {"name": "", "rule_type": "x", "severity": "low"},
            [".name: must be at least 1 characters"],
        ),
        (
            {"name": "n", "rule_type": "x", "severity": "low", "agents": ["a", 3]},
            [".agents[1]: expected string, got integer 3"],
        ),
    ],
)
def test_policy_keys_are_named_as_before(policy: dict[str, Any], expected: list[str]) -> None:
    assert check_params(policy, POLICY_SCHEMA, "") == expected
    assert _reference(policy, POLICY_SCHEMA, "") == expected
