"""forbid_after: once a step has happened, other steps are forbidden (for a while)."""

from __future__ import annotations

from typing import Any

import pytest
from charter import PolicyEngine, PolicyLoadError

UNTRUSTED = {"where": [{"field": "properties.data.trust", "equals": "untrusted"}]}
SEND = {"step_names": ["send_*"]}


def _task(Task: Any, policy: Any, after: dict[str, Any], **params: Any) -> Any:
    return Task(policy("forbid_after", {"after": after, **params}, match=SEND))


def _read(t: Any, trust: str = "untrusted", outcome: str = "ok", name: str = "fetch") -> Any:
    return t.record(
        name, "step.resource", "GET", properties={"data": {"trust": trust}}, outcome=outcome
    )


def test_nothing_happened_yet(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, UNTRUSTED)
    assert t.violation(t.step("send_email")) is None


def test_forbidden_after_untrusted_content_was_read(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, UNTRUSTED)
    _read(t, "trusted")
    assert t.violation(t.step("send_email")) is None
    fetch = _read(t)
    t.record("summarise", "step.model")
    detail = t.violation(t.step("send_email"))
    assert detail == f"'send_email' is forbidden after 'fetch' (seq {fetch.seq}) ran"


@pytest.mark.parametrize("outcome", ["blocked", "failed", "abandoned"])
def test_a_step_that_did_not_happen_does_not_trigger(Task: Any, policy: Any, outcome: str) -> None:
    t = _task(Task, policy, UNTRUSTED)
    _read(t, outcome=outcome)
    assert t.violation(t.step("send_email")) is None


def test_a_running_trigger_has_not_happened_yet(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, UNTRUSTED)
    fetch = t.start(
        t.step("fetch", "step.resource", "GET", properties={"data": {"trust": "untrusted"}})
    )
    assert t.violation(t.step("send_email")) is None
    t.record_step(fetch)
    assert t.violation(t.step("send_email")) is not None


def test_within_steps_counts_steps_that_happened(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, UNTRUSTED, within_steps=2)
    fetch = _read(t)
    detail = t.violation(t.step("send_email"))
    assert detail == (
        f"'send_email' is forbidden for 2 step(s) after 'fetch' (seq {fetch.seq}) ran; "
        "0 happened since"
    )
    t.record("think", "step.model")
    assert "1 happened since" in t.violation(t.step("send_email"))
    # Blocked attempts do not use the window up: the agent cannot wait it out by trying.
    t.record("send_email", outcome="blocked")
    t.record("send_email", outcome="failed")
    assert t.violation(t.step("send_email")) is not None
    t.record("think", "step.model")
    assert t.violation(t.step("send_email")) is None


def test_a_later_trigger_restarts_the_window(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, UNTRUSTED, within_steps=1)
    _read(t)
    t.record("think")
    assert t.violation(t.step("send_email")) is None
    again = _read(t, name="fetch_again")
    assert f"'fetch_again' (seq {again.seq})" in t.violation(t.step("send_email"))


def test_after_selector_and_conditions(Task: Any, policy: Any) -> None:
    after = {
        "kinds": ["step.resource"],
        "verbs": ["GET"],
        "step_names": ["read_*"],
        "where": [
            {"field": "input.path", "pattern": r"\.env$"},
            {"field": "properties.sensitivity", "in": ["secret", "pii"]},
        ],
    }
    t = _task(Task, policy, after)
    t.record("read_file", "step.resource", "GET", input={"path": "app/.env"})
    t.record(
        "read_file",
        "step.resource",
        "GET",
        input={"path": "notes.txt"},
        properties={"sensitivity": "secret"},
    )
    t.record(
        "write_file",
        "step.resource",
        "PATCH",
        input={"path": "app/.env"},
        properties={"sensitivity": "secret"},
    )
    assert t.violation(t.step("send_email")) is None
    t.record(
        "read_file",
        "step.resource",
        "GET",
        input={"path": "app/.env"},
        properties={"sensitivity": "pii"},
    )
    assert t.violation(t.step("send_email")) is not None


def test_equals_does_not_confuse_booleans_and_numbers(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, {"where": [{"field": "output.code", "equals": 1}]})
    t.record(output={"code": True})
    assert t.violation(t.step("send_email")) is None
    t.record(output={"code": 1})
    assert t.violation(t.step("send_email")) is not None


def test_conditions_on_list_values(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, {"where": [{"field": "properties.labels[*]", "equals": "tainted"}]})
    t.record(properties={"labels": ["a", "b"]})
    assert t.violation(t.step("send_email")) is None
    t.record(properties={"labels": ["a", "tainted"]})
    assert t.violation(t.step("send_email")) is not None


@pytest.mark.parametrize(
    ("cond", "message"),
    [
        ({"field": "input.x"}, "exactly one of equals, in, pattern"),
        ({"field": "input.x", "equals": 1, "in": [1]}, "exactly one of equals, in, pattern"),
        ({"field": "input.x", "pattern": "(?=x)"}, "RE2"),
        ({"field": "nowhere.x", "equals": 1}, "a path starts with"),
    ],
)
def test_bad_conditions_are_refused_at_load(cond: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyLoadError, match=message):
        PolicyEngine(
            [
                {
                    "name": "p",
                    "rule_type": "forbid_after",
                    "severity": "high",
                    "params": {"after": {"where": [cond]}},
                }
            ]
        )


@pytest.mark.parametrize("wanted", ["untrusted", "external"])
@pytest.mark.parametrize("marked", ["untrusted", "external", "unknown-word"])
def test_trust_words_compare_as_levels(Task: Any, policy: Any, wanted: str, marked: str) -> None:
    """Templates mark outside content `external`; older trails and policies say `untrusted`.
    On properties.data.trust the words are levels, so either policy fires on either record."""
    after = {"where": [{"field": "properties.data.trust", "equals": wanted}]}
    t = _task(Task, policy, after)
    _read(t, "internal")
    _read(t, "trusted")
    assert t.violation(t.step("send_email")) is None
    _read(t, marked)
    assert t.violation(t.step("send_email")) is not None


def test_trust_levels_in_a_list_and_other_fields_compare_as_written(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, {"where": [{"field": "properties.data.trust", "in": ["internal"]}]})
    _read(t, "external")
    assert t.violation(t.step("send_email")) is None
    _read(t, "trusted")  # the older word for internal
    assert t.violation(t.step("send_email")) is not None
    plain = {"where": [{"field": "properties.data.label", "equals": "untrusted"}]}
    t = _task(Task, policy, plain)
    t.record("fetch", "step.resource", "GET", properties={"data": {"label": "external"}})
    assert t.violation(t.step("send_email")) is None
