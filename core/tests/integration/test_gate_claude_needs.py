"""What an integration that runs one process per event needs from the Gate (Claude Code's
hooks): a Gate from a Settings object, the store's health, the task's history, the intent to
carry to the next process, a pending step nobody will answer, and a step seen only at its end.
Each "process" here is a fresh Gate on the same SQLite trail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from charter import Settings, verify
from charter.integration import Allowed, Answer, Blocked, Gate, Pending

ASK = {
    "name": "ask-deletes",
    "rule_type": "deny",
    "severity": "high",
    "action": "ask",
    "match": {"step_names": ["rm"]},
}


def _gate(tmp_path: Path, policies: list[dict[str, Any]] | None = None, **kw: Any) -> Gate:
    settings = Settings.from_sources(
        env={},
        policies=policies or [],
        agent_id="hooked",
        audit_location=f"sqlite:///{tmp_path / 'audit.db'}",
        audit_durability="sync",
        **kw,
    )
    return Gate.from_settings("hooked", settings)


def test_from_settings_builds_a_gate_that_owns_its_governor(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    assert gate.agent_id == "hooked" and gate.framework == "hooked" and gate.sync_durability
    tid = gate.start_task("t1", name="run")
    assert tid == "t1"
    decision = gate.decide(gate.tool_step("ls", {"path": "."}), "t1")
    assert isinstance(decision, Allowed)
    gate.complete(decision.handle, {"files": 2})
    gate.end_task("t1")
    assert gate.governor.close(5.0)
    assert verify(f"sqlite:///{tmp_path / 'audit.db'}").ok


def test_from_settings_uses_given_templates(tmp_path: Path) -> None:
    import charter_templates

    templates = charter_templates.load_templates(None)
    gate = Gate.from_settings(
        "claude-code",
        Settings.from_sources(env={}, policies=[], audit_location="none"),
        templates=templates,
    )
    try:
        assert gate._templates is templates
        step = gate.tool_step("Bash", {"command": "ls"}, call_id="c1", template="claude_code")
        assert (step.kind, step.properties["tool"]["call_id"]) == ("step.exec", "c1")
        assert step.properties["framework"]["name"] == "claude-code"
    finally:
        gate.governor.close(1.0)


@pytest.mark.allow_internal_errors  # the unreadable store is reported when it is opened
def test_store_health(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    try:
        assert gate.store_health()["ok"] is True
    finally:
        gate.governor.close(1.0)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "audit.db").write_bytes(b"not a database" * 200)
    broken = _gate(bad)
    try:
        health = broken.store_health()
        assert health["ok"] is False and health["detail"]
    finally:
        broken.governor.close(1.0)


def test_history_intent_and_reopen_across_processes(tmp_path: Path) -> None:
    first = _gate(tmp_path)
    first.start_task("t", name="session")
    decision = first.decide(first.tool_step("ls", {}), "t")
    assert isinstance(decision, Allowed) and decision.handle is not None
    carried = first.intent(decision.handle).to_dict()
    assert carried["meta"]["charter.eval"]["decision"] == "allow"
    assert [b.kind.value for b in first.history("t")] == ["task.start"]
    first.governor.close(5.0)

    second = _gate(tmp_path)  # the next process
    assert second.history("t") == ()
    assert second.resume_task("t") == "open"
    assert [b.seq for b in second.history("t")] == [1]
    handle = second.reopen(carried)
    second.complete(handle, {"ok": True})
    recorded = second.history("t")[-1]
    assert recorded.meta["charter.outcome"] == "ok"
    assert recorded.meta["charter.eval"]["decision"] == "allow"
    # Once settled, intent() gives the handle's own behavior back.
    assert second.intent(handle).action_id == handle.action_id
    second.governor.close(5.0)


def test_expire_records_an_unanswered_ask_as_blocked_without_a_gate(tmp_path: Path) -> None:
    gate = _gate(tmp_path, [ASK])
    gate.start_task("t", name="session")
    pending = gate.decide(gate.tool_step("rm", {"path": "x"}), "t", pause=True)
    assert isinstance(pending, Pending)
    blocked = gate.expire(pending, "blocked: the turn ended before anyone answered")
    assert isinstance(blocked, Blocked) and blocked.recorded
    kinds = [(b.kind.value, b.meta.get("charter.outcome")) for b in gate.history("t")]
    assert [outcome for _, outcome in kinds] == [None, "blocked"]  # no step.gate
    last = gate.history("t")[-1]
    assert last.meta["charter.eval"]["reason"].startswith("blocked: the turn ended")
    assert [v["name"] for v in last.meta["charter.eval"]["violations"]] == ["ask-deletes"]
    gate.governor.close(5.0)


def test_adopt_records_a_step_that_ran_unjudged(tmp_path: Path) -> None:
    block = {k: v for k, v in ASK.items() if k != "action"} | {"severity": "critical"}
    gate = _gate(tmp_path, [block])
    gate.start_task("t", name="session")
    # A policy would block it, but it already ran: adopt records what happened, unjudged.
    handle = gate.adopt(gate.tool_step("rm", {"path": "x"}, call_id="c9"), "t")
    gate.complete(handle, {"removed": 1})
    last = gate.history("t")[-1]
    assert last.meta["charter.outcome"] == "ok" and "charter.eval" not in last.meta
    assert last.properties["tool"]["call_id"] == "c9"
    gate.governor.close(5.0)


def test_adopt_needs_a_known_task(tmp_path: Path) -> None:
    gate = _gate(tmp_path)
    try:
        with pytest.raises(ValueError):
            gate.adopt(gate.tool_step("ls", {}), "never-started")
    finally:
        gate.governor.close(1.0)


def test_a_pending_step_saved_in_one_process_is_approved_and_settled_in_the_next(
    tmp_path: Path,
) -> None:
    first = _gate(tmp_path, [ASK])
    first.start_task("t", name="session")
    pending = first.decide(first.tool_step("rm", {"path": "x"}, call_id="c1"), "t", pause=True)
    assert isinstance(pending, Pending)
    saved = json.loads(json.dumps(first.save_pending(pending)))  # plain JSON
    assert saved["verdict"]["decision"] == "ask" and saved["call_id"] == "c1"
    first.governor.close(5.0)

    second = _gate(tmp_path, [ASK])  # the person answered; the framework ran the step
    assert second.resume_task("t") == "open"
    again = second.load_pending(saved)
    assert (again.step.name, again.step.input, again.call_id) == ("rm", {"path": "x"}, "c1")
    assert again.digest == pending.digest and again.request.policies == ("ask-deletes",)
    second.answer(again, Answer("approve", "someone", "fine"))
    handle = second.approved(again)
    second.complete(handle, {"removed": 1})
    gate, step = second.history("t")[-2:]
    assert gate.kind.value == "step.gate" and gate.output is not None
    assert gate.output["decision"] == "pass"
    assert step.meta["charter.outcome"] == "ok"
    assert step.meta["charter.eval"]["decision"] == "ask"
    assert step.meta["charter.eval"]["approved"] is True
    second.governor.close(5.0)

    third = _gate(tmp_path, [ASK])  # the same ask cannot be settled twice
    third.resume_task("t")
    with pytest.raises(ValueError, match="already used"):
        third.expire(third.load_pending(saved), "blocked: no answer")
    third.governor.close(5.0)
    assert verify(f"sqlite:///{tmp_path / 'audit.db'}").ok


@pytest.mark.allow_internal_errors
def test_an_approved_step_that_already_ran_is_recorded_by_its_outcome_alone(
    tmp_path: Path,
) -> None:
    """Sync durability is write-ahead, but `approved` is for a step that has run: nothing is
    written before its outcome (a refusing store cannot block what ran), the outcome carries
    the approval, and a store refusing that outcome raises AuditError, retryable."""
    from charter import AuditError
    from charter.testing import refused_writes

    gate = _gate(tmp_path, [ASK])
    gate.start_task("t", name="session")
    pending = gate.decide(gate.tool_step("rm", {"path": "x"}, call_id="c1"), "t", pause=True)
    assert isinstance(pending, Pending)
    answer = Answer("approve", "someone", "approved in the framework's own prompt")
    with refused_writes(tmp_path / "audit.db"):
        handle = gate.approved(pending, answer)
        assert handle.result.decision.value == "ask" and handle.settled is None
        with pytest.raises(AuditError):
            gate.complete(handle, {"removed": 1})
    gate.complete(handle, {"removed": 1})  # the store takes writes again
    step = gate.history("t")[-1]
    assert step.meta["charter.outcome"] == "ok"
    verdict = step.meta["charter.eval"]
    assert verdict["approved"] is True and verdict["approved_by"] == "someone"
    assert verdict["approval"] == "approved in the framework's own prompt"
    gate.governor.close(5.0)
    assert verify(f"sqlite:///{tmp_path / 'audit.db'}").ok
