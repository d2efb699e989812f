"""max_steps, rate_limit, budget and no_repeat, judged through a real PolicyEngine."""

from __future__ import annotations

from typing import Any

import pytest
from charter import Decision, PolicyEngine, PolicyLoadError

MODEL = {"kinds": ["step.model"]}

# -- max_steps ---------------------------------------------------------------------------------


def test_max_steps_allows_up_to_max_and_violates_the_next(Task: Any, policy: Any) -> None:
    t = Task(policy("max_steps", {"max": 3, "select": MODEL}))
    for _ in range(2):
        t.record("llm", "step.model")
    assert t.violation(t.step("llm", "step.model")) is None  # would be the 3rd
    t.record("llm", "step.model")
    detail = t.violation(t.step("llm", "step.model"))
    assert detail is not None
    assert "4th matching step" in detail and "limit 3" in detail and "3 already happened" in detail


def test_max_steps_on_an_empty_history(Task: Any, policy: Any) -> None:
    t = Task(policy("max_steps", {"max": 1}))
    assert t.violation(t.step()) is None
    t0 = Task(policy("max_steps", {"max": 0}))
    assert "1st matching step" in t0.violation(t0.step())


def test_max_steps_counts_only_steps_that_happened(Task: Any, policy: Any) -> None:
    t = Task(policy("max_steps", {"max": 2, "select": {"verbs": ["DELETE"]}}))
    t.record("rm", "step.resource", "DELETE", outcome="blocked")
    t.record("rm", "step.resource", "DELETE", outcome="failed")
    t.record("rm", "step.resource", "DELETE", outcome="abandoned")
    t.record("get", "step.resource", "GET")
    t.record("rm", "step.resource", "DELETE")
    assert t.violation(t.step("rm", "step.resource", "DELETE")) is None
    t.record("rm", "step.resource", "DELETE")
    assert t.violation(t.step("rm", "step.resource", "DELETE")) is not None


def test_max_steps_counts_running_intents_once(Task: Any, policy: Any) -> None:
    t = Task(policy("max_steps", {"max": 2}))
    running = t.start(t.step())
    # Judging the running intent again must not count it twice.
    assert t.violation(running) is None
    assert t.violation(t.step()) is None  # running + this = 2
    t.start(t.step())
    detail = t.violation(t.step())
    assert detail is not None and "2 still running" in detail
    t.record_step(running)
    assert "1 already happened, 1 still running" in t.violation(t.step())


def test_max_steps_ignores_steps_the_selector_does_not_count(Task: Any, policy: Any) -> None:
    t = Task(policy("max_steps", {"max": 1, "select": MODEL}))
    t.record("llm", "step.model")
    t.record("llm", "step.model")
    assert t.violation(t.step("Bash")) is None  # not counted, so it cannot exceed the limit
    assert t.violation(t.step("llm", "step.model")) is not None


def test_max_steps_blocks_with_a_critical_severity(Task: Any, policy: Any) -> None:
    t = Task(policy("max_steps", {"max": 0}))
    result = t.evaluate(t.step())
    assert result.decision is Decision.BLOCK
    assert "limit 0" in result.reason


# -- rate_limit --------------------------------------------------------------------------------


def test_rate_limit_window_boundary_is_exclusive(Task: Any, policy: Any) -> None:
    t = Task(policy("rate_limit", {"max": 2, "window_seconds": 10}))
    t.record(at=100)
    t.record(at=105)
    # A step exactly 10 s older than now is outside the window.
    assert t.violation(t.step(at=110)) is None
    detail = t.violation(t.step(at=109.999999))
    assert detail is not None
    assert "3rd matching step within 10 seconds" in detail and "limit 2" in detail


def test_rate_limit_slides(Task: Any, policy: Any) -> None:
    t = Task(policy("rate_limit", {"max": 3, "window_seconds": 60}))
    for at in (0, 10, 20):
        t.record(at=at)
    assert t.violation(t.step(at=30)) is not None
    assert t.violation(t.step(at=60.5)) is None  # the step at 0 has left the window
    assert t.violation(t.step(at=69)) is None
    assert t.violation(t.step(at=70)) is None


def test_rate_limit_counts_attempts_but_not_blocked_steps(Task: Any, policy: Any) -> None:
    t = Task(policy("rate_limit", {"max": 3, "window_seconds": 60}))
    t.record(at=1, outcome="failed")
    t.record(at=2, outcome="abandoned")
    t.record(at=3, outcome="blocked")
    t.record(at=4, outcome="blocked")
    assert t.violation(t.step(at=5)) is None
    t.record(at=6)
    assert "3 already in the window" in t.violation(t.step(at=7))


def test_rate_limit_count_ok_only(Task: Any, policy: Any) -> None:
    t = Task(policy("rate_limit", {"max": 1, "window_seconds": 60, "count": "ok"}))
    t.record(at=1, outcome="failed")
    t.record(at=2, outcome="abandoned")
    assert t.violation(t.step(at=3)) is None
    t.record(at=4)
    assert t.violation(t.step(at=5)) is not None


def test_rate_limit_counts_running_steps_and_selects(Task: Any, policy: Any) -> None:
    t = Task(
        policy("rate_limit", {"max": 2, "window_seconds": 5, "select": {"step_names": ["search*"]}})
    )
    t.record("other", at=1)
    t.record("other", at=2)
    t.start(t.step("search_web", at=3))
    assert t.violation(t.step("search_web", at=4)) is None
    t.start(t.step("search_web", at=4))
    assert t.violation(t.step("search_web", at=5)) is not None
    assert t.violation(t.step("other", at=5)) is None  # not selected
    assert t.violation(t.step("search_web", at=8.5)) is None  # the running ones left the window


def test_rate_limit_counts_out_of_order_timestamps(Task: Any, policy: Any) -> None:
    t = Task(policy("rate_limit", {"max": 2, "window_seconds": 10}))
    t.record(at=50)
    t.record(at=20)  # a concurrent step recorded late
    t.record(at=45)
    assert t.violation(t.step(at=52)) is not None
    # A step stamped later than now still counts: clocks that disagree must not open a gap.
    assert t.violation(t.step(at=41)) is not None
    assert "3 already in the window" in t.violation(t.step(at=25))
    assert t.violation(t.step(at=59)) is None  # only 50 is in (49, 59]


def test_rate_limit_refuses_a_zero_window() -> None:
    with pytest.raises(PolicyLoadError, match="window_seconds"):
        PolicyEngine(
            [
                {
                    "name": "p",
                    "rule_type": "rate_limit",
                    "severity": "high",
                    "params": {"max": 1, "window_seconds": 0},
                }
            ]
        )


# -- budget ------------------------------------------------------------------------------------

TOKENS = "properties.model.usage.total_tokens"


def _llm(t: Any, tokens: int, outcome: str = "ok") -> Any:
    return t.record(
        "llm",
        "step.model",
        properties={"model": {"usage": {"total_tokens": tokens}}},
        outcome=outcome,
    )


def test_budget_sums_outcome_values_and_stops_when_spent(Task: Any, policy: Any) -> None:
    t = Task(policy("budget", {"field": TOKENS, "limit": 1000, "select": MODEL}))
    assert t.violation(t.step("llm", "step.model")) is None
    _llm(t, 600)
    _llm(t, 400)
    assert t.violation(t.step("llm", "step.model")) is None  # exactly at the limit
    _llm(t, 1)
    detail = t.violation(t.step("llm", "step.model"))
    assert detail is not None
    assert "would total 1001, above the budget of 1000" in detail and "spent 1001" in detail
    # Once spent, every step the policy matches is stopped, selected or not.
    assert t.violation(t.step("Bash")) is not None


def test_budget_ignores_steps_that_did_not_happen(Task: Any, policy: Any) -> None:
    t = Task(policy("budget", {"field": TOKENS, "limit": 100}))
    _llm(t, 500, "failed")
    _llm(t, 500, "blocked")
    _llm(t, 500, "abandoned")
    assert t.violation(t.step("llm", "step.model")) is None


def test_budget_counts_the_current_and_running_inputs(Task: Any, policy: Any) -> None:
    t = Task(
        policy(
            "budget",
            {"field": "input.amount", "limit": 100, "select": {"step_names": ["pay"]}},
            match={"step_names": ["pay"]},
        )
    )
    t.record("pay", input={"amount": 40})
    t.record("pay", input={"amount": 500}, outcome="failed")
    assert t.violation(t.step("pay", input={"amount": 60})) is None
    detail = t.violation(t.step("pay", input={"amount": 61}))
    assert detail is not None and "this step 61" in detail and "spent 40" in detail
    t.start(t.step("pay", input={"amount": 50}))
    detail = t.violation(t.step("pay", input={"amount": 20}))
    assert detail is not None and "running 50" in detail
    assert t.violation(t.step("pay")) is None  # no amount: adds nothing (40 + 50 running)


def test_budget_values_in_lists_and_negative_values(Task: Any, policy: Any) -> None:
    t = Task(policy("budget", {"field": "input.items[*].price", "limit": 10}))
    t.record(input={"items": [{"price": 3}, {"price": 4.5}]})
    t.record(input={"items": [{"price": -100}]})  # cannot hand budget back
    assert t.violation(t.step(input={"items": [{"price": 2.5}]})) is None
    detail = t.violation(t.step(input={"items": [{"price": 2.5}, {"price": 0.25}]}))
    assert detail is not None and "would total 10.25" in detail


def test_budget_violates_a_non_number_on_the_judged_step(Task: Any, policy: Any) -> None:
    t = Task(policy("budget", {"field": "input.amount", "limit": 10}))
    t.record(input={"amount": "lots"})  # recorded non-numbers are ignored
    detail = t.violation(t.step(input={"amount": "5"}))
    assert detail == "input.amount value '5' is not a number"
    assert t.violation(t.step(input={"amount": True})) is not None


# -- no_repeat ---------------------------------------------------------------------------------


def test_no_repeat_detects_the_same_step_and_input(Task: Any, policy: Any) -> None:
    t = Task(policy("no_repeat", {}))
    t.record("send_email", input={"to": "bob@example.com", "body": "hi"})
    assert t.violation(t.step("send_email", input={"to": "bob@example.com", "body": "hi!"})) is None
    assert t.violation(t.step("send_sms", input={"to": "bob@example.com", "body": "hi"})) is None
    # Key order does not make it a different input.
    detail = t.violation(t.step("send_email", input={"body": "hi", "to": "bob@example.com"}))
    assert detail is not None
    assert "'send_email' with this exact input would run 2 times (limit 1)" in detail


def test_no_repeat_max_and_empty_input(Task: Any, policy: Any) -> None:
    t = Task(policy("no_repeat", {"max": 3}))
    assert t.violation(t.step("poll")) is None
    t.record("poll")
    t.record("poll", input={})  # no input and {} are the same input
    assert t.violation(t.step("poll")) is None
    t.record("poll")
    assert "would run 4 times (limit 3): 3 ran" in t.violation(t.step("poll"))


def test_no_repeat_failed_retries_only_with_include_failed(Task: Any, policy: Any) -> None:
    t = Task(
        [
            policy("no_repeat", {}, name="strict"),
            policy("no_repeat", {"max": 2, "include_failed": True}, name="retries"),
        ]
    )
    t.record("charge", input={"n": 1}, outcome="failed")
    t.record("charge", input={"n": 1}, outcome="abandoned")
    t.record("charge", input={"n": 1}, outcome="blocked")
    b = t.step("charge", input={"n": 1})
    assert t.violation(b, "strict") is None
    detail = t.violation(b, "retries")
    assert detail is not None and "2 failed or were abandoned" in detail


def test_no_repeat_counts_running_duplicates(Task: Any, policy: Any) -> None:
    t = Task(policy("no_repeat", {}))
    first = t.start(t.step("pay", input={"id": 7}))
    assert t.violation(first) is None  # the running intent itself is not a duplicate
    assert "1 still running" in t.violation(t.step("pay", input={"id": 7}))
