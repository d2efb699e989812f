"""requires_gate: approvals recorded as step.gate, bound to a step and its input, used once."""

from __future__ import annotations

from typing import Any

import pytest

PAY = {"step_names": ["pay"]}


def _task(Task: Any, policy: Any, **params: Any) -> Any:
    return Task(policy("requires_gate", params, match=PAY))


def test_no_gate_in_the_task(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, gate_kind="human")
    detail = t.violation(t.step("pay", input={"amount": 5}))
    assert detail == (
        "needs a passing human approval for 'pay' with this exact input; "
        "none was recorded in the task"
    )
    assert t.evaluate(t.step("read")).results == ()  # the policy only matches pay


def test_a_passing_gate_authorises_one_step(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    gate = t.gate(pay)
    assert t.violation(pay) is None
    t.record_step(pay)
    detail = t.violation(t.step("pay", input={"amount": 5}))
    assert detail is not None
    assert f"approval seq {gate.seq} was already used by step seq {gate.seq + 1}" in detail


@pytest.mark.parametrize("decision", ["deny", "pending"])
def test_denied_and_pending_gates_do_not_count(Task: Any, policy: Any, decision: str) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    gate = t.gate(pay, decision)
    detail = t.violation(pay)
    assert detail is not None and f"the latest gate (seq {gate.seq}) decided {decision!r}" in detail


def test_a_gate_that_did_not_complete_does_not_count(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay, outcome="failed")
    t.gate(pay, outcome="abandoned")
    assert "none was recorded" in t.violation(pay)


def test_blocked_or_failed_steps_do_not_use_up_the_approval(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay)
    t.record_step(pay, outcome="failed")
    t.record_step(t.step("pay", input={"amount": 5}), outcome="blocked")
    t.record_step(t.step("pay", input={"amount": 5}), outcome="abandoned")
    assert t.violation(t.step("pay", input={"amount": 5})) is None


def test_the_approval_is_bound_to_the_input(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    t.gate(t.step("pay", input={"amount": 5, "to": "bob"}))
    assert t.violation(t.step("pay", input={"to": "bob", "amount": 5})) is None  # key order
    detail = t.violation(t.step("pay", input={"amount": 5000, "to": "bob"}))
    assert detail is not None and "with this exact input; none was recorded" in detail


def test_bind_input_false_accepts_any_input(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, bind_input=False)
    t.gate(step_name="pay")  # no digest at all
    detail_free = t.violation(t.step("pay", input={"amount": 5000}))
    assert detail_free is None


def test_the_approval_is_bound_to_the_step_name(Task: Any, policy: Any) -> None:
    t = Task(policy("requires_gate", {}, match={"step_names": ["pay", "refund"]}))
    refund = t.step("refund", input={"amount": 5})
    t.gate(refund)
    assert t.violation(t.step("pay", input={"amount": 5})) is not None
    assert t.violation(refund) is None


def test_same_step_false_matches_on_the_input_only(Task: Any, policy: Any) -> None:
    t = Task(
        policy(
            "requires_gate",
            {"same_step": False},
            match={"step_names": ["pay", "refund"]},
        )
    )
    t.gate(t.step("refund", input={"amount": 5}))
    detail_free = t.violation(t.step("pay", input={"amount": 5}))
    assert detail_free is None


def test_gate_kind_filters(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, gate_kind="human")
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay, kind="guardrail")
    assert "needs a passing human approval" in t.violation(pay)
    t.gate(pay, kind="human")
    assert t.violation(pay) is None
    any_kind = _task(Task, policy)
    any_kind.gate(pay, kind="guardrail")
    assert any_kind.violation(any_kind.step("pay", input={"amount": 5})) is None


def test_within_steps(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, within_steps=3)
    pay = t.step("pay", input={"amount": 5})
    gate = t.gate(pay)
    t.record("read")
    t.record("read", outcome="blocked")  # every recorded step counts towards the window
    assert t.violation(pay) is None  # the gate is the 3rd most recent step
    t.record("read")
    detail = t.violation(pay)
    assert detail is not None
    assert f"approval seq {gate.seq} is older than the last 3 steps" in detail


def test_within_steps_when_a_step_uses_an_older_gate(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, within_steps=2)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay)
    t.record("read")
    t.record("read")
    t.gate(pay)
    # The first gate expired; the step uses the second one.
    t.record_step(t.step("pay", input={"amount": 5}))
    assert "already used" in t.violation(t.step("pay", input={"amount": 5}))


def test_two_gates_authorise_two_steps_oldest_first(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay)
    t.gate(pay)
    t.record_step(pay)
    assert t.violation(t.step("pay", input={"amount": 5})) is None
    t.record("pay", input={"amount": 5})
    assert "already used" in t.violation(t.step("pay", input={"amount": 5}))


def test_a_running_step_holds_its_approval(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay)
    t.start(pay)
    assert t.violation(pay) is None  # judged again: it holds the approval itself
    detail = t.violation(t.step("pay", input={"amount": 5}))
    assert detail is not None and "the 1 open approval(s) are held by steps still running" in detail


def test_single_use_false_lets_one_approval_serve_many(Task: Any, policy: Any) -> None:
    t = _task(Task, policy, single_use=False)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay)
    for _ in range(3):
        t.record("pay", input={"amount": 5})
    assert t.violation(t.step("pay", input={"amount": 5})) is None


def test_unbound_approvals_are_used_by_selected_steps_only(Task: Any, policy: Any) -> None:
    t = Task(
        policy(
            "requires_gate",
            {"same_step": False, "bind_input": False, "select": PAY},
            match=PAY,
        )
    )
    t.gate(step_name="anything")
    t.record("read")  # not selected: does not use the approval up
    assert t.violation(t.step("pay")) is None
    t.record("pay")
    assert "already used" in t.violation(t.step("pay"))


def test_a_gate_recorded_after_a_step_is_not_used_by_it(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.record_step(pay)
    t.gate(pay)
    # The approval came after the payment: the next identical payment may use it.
    assert t.violation(t.step("pay", input={"amount": 5})) is None


def test_a_later_deny_revokes_unused_approvals(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.gate(pay)
    t.gate(pay, "pending")  # a new request does not revoke the approval
    assert t.violation(pay) is None
    denied = t.gate(pay, "deny")
    assert f"the latest gate (seq {denied.seq}) decided 'deny'" in t.violation(pay)
    t.gate(pay)
    assert t.violation(pay) is None


def test_gates_without_the_bound_fields_are_ignored(Task: Any, policy: Any) -> None:
    t = _task(Task, policy)
    pay = t.step("pay", input={"amount": 5})
    t.gate(step_name="pay")  # no digest: cannot prove it approved this input
    t.gate(digest="0" * 64)  # no step_name
    assert "none was recorded in the task" in t.violation(pay)
