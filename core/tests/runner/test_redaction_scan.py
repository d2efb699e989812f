"""Redaction decides to mask a record in one walk; it must decide as the two walks did.

The reference below is the definition the single walk replaced: one walk collecting every
string, another asking whether any key, name/value pair or flag names a secret.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from charter._policy.secrets import names_secret
from charter._runtime.redact import _HOLDING, _NAMING, Redactor, _flag, _scan
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_strings(value: Any, out: list[str]) -> None:
    t = type(value)
    if t is str:
        out.append(value)
    elif t is dict:
        for k, v in value.items():
            out.append(k)
            reference_strings(v, out)
    elif t is list:
        for v in value:
            reference_strings(v, out)


def reference_holder(d: dict[str, Any]) -> str | None:
    for k in _NAMING:
        named = d.get(k)
        if type(named) is str and names_secret(named):
            return next((h for h in _HOLDING if h in d), None)
    return None


def reference_names(value: Any) -> bool:
    t = type(value)
    if t is dict:
        if reference_holder(value) is not None:
            return True
        return any(names_secret(k) or reference_names(v) for k, v in value.items())
    if t is list:
        for v in value:
            if type(v) is str:
                name = _flag(v)
                if name is not None and names_secret(name):
                    return True
            elif reference_names(v):
                return True
    return False


words = st.sampled_from(
    [
        "command",
        "password",
        "api_key",
        "name",
        "key",
        "value",
        "data",
        "x",
        "--token=abc",
        "--password",
        "-v",
        "Authorization",
        "header",
        "secret",
        "notes",
        "",
        "ghp_",
    ]
)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), words, st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(words, st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_one_walk_finds_the_strings_and_names_the_two_walks_found(value: Any) -> None:
    strings: list[str] = []
    named = _scan(value, strings)
    expected: list[str] = []
    reference_strings(value, expected)
    assert Counter(strings) == Counter(expected)
    assert named == reference_names(value)


def test_a_value_named_by_its_sibling_is_masked_whole() -> None:
    record = {
        "agent_id": "a",
        "task_id": "t",
        "kind": "step.exec",
        "step_name": "call",
        "input": {"headers": [{"name": "X-Api-Key", "value": "plain-looking-value"}]},
    }
    redacted = Redactor().redact(record)
    assert redacted["input"]["headers"][0]["value"] == "[REDACTED:secret_field]"
    assert record["input"]["headers"][0]["value"] == "plain-looking-value"
