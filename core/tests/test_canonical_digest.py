"""canonical_digest is the SHA-256 of RFC 8785: a client in any language computes the same one."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from charter import Governor, callback_approver, canonical_digest
from charter.testing import recorded
from hypothesis import given, settings
from hypothesis import strategies as st

# Every test twice: through orjson, and as a young process encodes before it loads orjson.
pytestmark = pytest.mark.usefixtures("json_codec")

_MAX = 2**53 - 1

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-_MAX, max_value=_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]))
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"]), max_size=8), children)
    ),
    max_leaves=25,
)


def _jcs(value: Any) -> str:
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_digest_is_sha256_of_rfc8785(value: Any) -> None:
    assert canonical_digest(value) == _jcs(value)


@pytest.mark.parametrize(
    ("value", "same_as"),
    [
        ({"amount": 40.0}, {"amount": 40}),
        ({"x": 1e21}, {"x": 1e21}),
        ({"x": 2e20}, {"x": 200000000000000000000}),
        ({"\ufb01": 1, "\U0001f600": 2}, {"\U0001f600": 2, "\ufb01": 1}),
        ([-0.0], [0]),
    ],
)
def test_numbers_and_keys_digest_as_jcs_writes_them(value: Any, same_as: Any) -> None:
    assert canonical_digest(value) == _jcs(value)
    assert canonical_digest(value) == canonical_digest(same_as)


def test_an_approval_digest_is_what_a_jcs_client_computes(tmp_path: Path) -> None:
    gov = Governor(
        policies=[
            {
                "name": "ask-pay",
                "rule_type": "field_matches",
                "severity": "high",
                "action": "ask",
                "params": {"field": "step_name", "pattern": "^pay$"},
            }
        ],
        audit_location=f"sqlite:///{tmp_path / 'audit.db'}",
        approver=callback_approver(lambda request: True, by="alice"),
    )
    with gov.task("t"), gov.step("step.exec", name="pay", input={"amount": 40.0}) as step:
        step.output = {"ok": True}
    gates = [r for r in recorded(gov) if r["kind"] == "step.gate"]
    gov.close()
    assert gates and gates[0]["properties"]["gate"]["digest"] == _jcs({"amount": 40})


@pytest.mark.parametrize(
    "value",
    [{"s": "\ud800"}, {"\udfff": 1}, {"n": 2**60}, {"n": math.nan}, {"n": -math.inf}, [2**53]],
)
def test_values_jcs_refuses_still_digest_distinctly(value: Any) -> None:
    with pytest.raises((rfc8785.CanonicalizationError, UnicodeEncodeError)):
        rfc8785.dumps(value)
    digest = canonical_digest(value)
    assert len(digest) == 64
    assert digest == canonical_digest(value)
    assert digest != canonical_digest({"s": "\ud801"})


def test_lone_surrogates_digest_as_their_code_units() -> None:
    assert (
        canonical_digest({"s": "a\ud800"})
        == hashlib.sha256('{"s":"a\ud800"}'.encode("utf-8", "surrogatepass")).hexdigest()
    )
    assert canonical_digest("\ud800") != canonical_digest("\ud801")


def test_a_type_without_json_form_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="set"):
        canonical_digest({"x": {1, 2}})
