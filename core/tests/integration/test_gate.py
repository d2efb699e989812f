"""charter.integration: the step builders' property paths, the Gate's decisions and
recording rule, task lifecycle across processes, claims and the approval flow."""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import charter
import charter.integration as ci
import pytest
from charter import Approval, Governor
from charter.audit import is_intent_record

ASK_SEND = {
    "name": "ask-send",
    "rule_type": "deny",
    "severity": "high",
    "action": "ask",
    "match": {"step_names": ["send_email"]},
}
NO_DELETE = {
    "name": "no-delete",
    "rule_type": "deny",
    "severity": "critical",
    "match": {"step_names": ["delete_file"]},
}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("CHARTER_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Callable[..., ci.Gate]]:
    built: list[ci.Gate] = []

    def build(*policies: dict[str, Any], **settings: Any) -> ci.Gate:
        settings.setdefault("audit_location", f"sqlite:///{tmp_path / 'audit.db'}")
        settings.setdefault("audit_durability", "sync")
        g = ci.Gate("toy", policies=list(policies), agent_id="bot", **settings)
        built.append(g)
        return g

    yield build
    for g in built:
        g.governor.close(5.0)


def _trail(g: ci.Gate, task_id: str) -> list[dict[str, Any]]:
    g.governor.flush(5.0)
    store = g.governor.runner.store
    assert store is not None
    # Outcomes only: sync durability also stores each allowed step's intent ahead of it.
    return [r for r in store.read_task(task_id, g.agent_id) if not is_intent_record(r)]


# -- builders ---------------------------------------------------------------------------


def test_a_tool_step_puts_framework_facts_at_the_shared_paths(gate: Callable[..., ci.Gate]):
    step = gate().tool_step(
        "delete_file",
        {"path": "/tmp/x"},
        call_id="call-7",
        description="Deletes a file",
        ids={"run_id": "r-1", "thread_id": None},
    )
    assert (step.kind, step.verb, step.name) == ("step.resource", "DELETE", "delete_file")
    assert step.input == {"path": "/tmp/x"}
    tool = step.properties["tool"]
    assert (tool["name"], tool["call_id"], tool["description"]) == (
        "delete_file",
        "call-7",
        "Deletes a file",
    )
    assert step.properties["framework"] == {"name": "toy", "run_id": "r-1"}


def test_a_model_step_records_only_what_is_new_since_the_models_last_turn() -> None:
    history = [
        ci.chat_message("system", "You are terse."),
        ci.chat_message("user", "weather?"),
        ci.chat_message(
            "assistant", "", tool_calls=[{"id": "c1", "name": "get_weather", "args": {}}]
        ),
        ci.chat_message("tool", "sunny", tool_call_id="c1"),
    ]
    step = ci.model_step(
        "toy", "gpt-x", history, provider="acme", params={"temperature": 0}, tools=["get_weather"]
    )
    assert step.input == {
        "messages": [{"role": "tool", "content": "sunny", "tool_call_id": "c1"}],
        "message_count": 4,
    }
    assert step.properties["model"] == {
        "name": "gpt-x",
        "provider": "acme",
        "params": {"temperature": 0},
        "tools": ["get_weather"],
    }
    first = ci.model_step("toy", "gpt-x", history[:2])
    assert [m["role"] for m in first.input["messages"]] == ["system", "user"]


@pytest.mark.parametrize("roles", ["", "s", "su", "sua", "suat", "suatau", "suatat", "a", "aa"])
def test_converting_from_after_the_models_turn_records_what_converting_all_does(
    roles: str,
) -> None:
    # A framework's raw messages, converted only from `after_model_turn` on and counted in
    # full, must give the very step that converting every one of them gives.
    names = {"s": "system", "u": "user", "a": "assistant", "t": "tool"}
    raw = [(names[r], f"{r}{i}") for i, r in enumerate(roles)]
    start = ci.after_model_turn(raw, lambda m: m[0] == "assistant")
    assert start == roles.rfind("a") + 1
    every = ci.model_step("toy", "gpt-x", [ci.chat_message(r, c) for r, c in raw])
    recent = [ci.chat_message(r, c) for r, c in raw[start:]]
    assert ci.model_step("toy", "gpt-x", recent, message_count=len(raw)).input == every.input


class _Settings(Mapping[str, int]):
    """A mapping that is not a dict (a framework's own config object, say)."""

    def __getitem__(self, key: str) -> int:
        if key != "a":
            raise KeyError(key)
        return 1

    def __iter__(self) -> Iterator[str]:
        return iter(("a",))

    def __len__(self) -> int:
        return 1


class _Registered:
    """Registered as a Mapping without inheriting from one: only isinstance knows."""


Mapping.register(_Registered)


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"role": "user"},
        OrderedDict(a=1),
        MappingProxyType({"a": 1}),
        _Settings(),
        _Registered(),
        None,
        [("role", "user")],
        "role",
        ("role", "user"),
        object(),
        1,
    ],
    ids=repr,
)
def test_is_mapping_answers_as_isinstance_mapping_does(value: Any) -> None:
    assert ci.is_mapping(value) is isinstance(value, Mapping)


def test_messages_take_one_role_vocabulary() -> None:
    with pytest.raises(ValueError, match="role 'human' is not one of system, user"):
        ci.chat_message("human", "hi")
    with pytest.raises(ValueError, match="GET \\(received\\) or POST \\(sent\\)"):
        ci.message_step("toy", "PATCH", "user", "hi")
    got = ci.message_step("toy", "GET", "user", "pay alice@example.com")
    assert (got.kind, got.verb, got.properties["message"]) == (
        "step.message",
        "GET",
        {"role": "user"},
    )


def test_usage_and_outcome_properties() -> None:
    assert ci.usage(10, 5) == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    assert ci.usage(None, "5", -1) is None  # no trustworthy count is no count
    assert ci.model_outcome(usage=ci.usage(3, 4), stop_reason="stop") == {
        "model": {
            "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
            "stop_reason": "stop",
        }
    }
    assert ci.model_outcome() is None


def test_a_node_step_refuses_an_invalid_kind_verb_pair() -> None:
    with pytest.raises(ValueError, match=r"step\.resource takes GET, POST, PATCH, DELETE"):
        ci.node_step("toy", "fetch", {}, kind="step.resource")
    step = ci.node_step("toy", "fetch", "raw text", kind="step.resource", verb="GET")
    assert step.input == {"input": "raw text"}
    assert step.properties["framework"] == {"name": "toy", "node": "fetch"}


# -- deciding ---------------------------------------------------------------------------


def test_decide_allows_blocks_and_records_the_block_once(gate: Callable[..., ci.Gate]) -> None:
    g = gate(NO_DELETE)
    assert g.start_task("t1", "run") == "t1"
    allowed = g.decide(g.tool_step("get_weather", {"city": "Oslo"}), "t1")
    assert isinstance(allowed, ci.Allowed) and allowed.handle is not None
    g.complete(allowed.handle, "sunny", properties=ci.model_outcome(stop_reason="stop"))
    blocked = g.decide(g.tool_step("delete_file", {"path": "/"}), "t1")
    assert isinstance(blocked, ci.Blocked) and blocked.recorded
    assert "no-delete" in blocked.reason
    error = blocked.error()
    assert isinstance(error, PermissionError) and error.step_name == "delete_file"
    again = pickle.loads(pickle.dumps(error))
    assert (again.reason, again.step_name, again.kind) == (error.reason, "delete_file", error.kind)
    g.end_task("t1")
    kinds = [(r["kind"], r["step_name"], r["meta"].get("charter.outcome")) for r in _trail(g, "t1")]
    assert kinds == [
        ("task.start", "run", None),
        ("step.resource", "get_weather", "ok"),
        ("step.resource", "delete_file", "blocked"),
        ("task.end", "run", None),
    ]


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_when_charter_cannot_decide_the_fail_mode_rule_applies(
    gate: Callable[..., ci.Gate], monkeypatch: pytest.MonkeyPatch, fail_mode: str
) -> None:
    g = gate(fail_mode=fail_mode)
    g.start_task("t1", "run")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("translation bug")

    monkeypatch.setattr(g.governor, "build_step", broken)
    decision = g.decide(g.tool_step("get_weather", {}), "t1")
    if fail_mode == "closed":
        assert isinstance(decision, ci.Blocked) and not decision.recorded
        assert "could not judge" in decision.reason and "fails closed" in decision.reason
    else:
        assert isinstance(decision, ci.Allowed) and decision.handle is None
        assert decision.reason.endswith("fail_mode is open")
        g.complete(decision.handle, "ran ungoverned")  # nothing to record, no error
    assert charter.testing.swallowed_errors()[-1].message == "'translation bug'"


@pytest.mark.allow_internal_errors
def test_the_recording_rule_per_durability(
    gate: Callable[..., ci.Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise charter.AuditError("disk full")

    for durability, raises in (("buffered", False), ("sync", True)):
        g = gate(audit_durability=durability, audit_location="stdout")
        tid = f"t-{durability}"
        g.start_task(tid, "run")
        decision = g.decide(g.tool_step("get_weather", {}), tid)
        assert isinstance(decision, ci.Allowed) and decision.handle is not None
        monkeypatch.setattr(charter.StepHandle, "complete", disk_full)
        if raises:
            with pytest.raises(charter.AuditError, match="disk full"):
                g.complete(decision.handle, "sunny")
        else:
            g.complete(decision.handle, "sunny")  # reported and counted, never raised
        assert charter.testing.swallowed_errors()[-1].message == "disk full"


# -- approvals --------------------------------------------------------------------------


def test_asks_says_whether_any_policy_can_ask(gate: Callable[..., ci.Gate]) -> None:
    g = gate(NO_DELETE)
    g.start_task("t1", "run")
    assert g.asks is False
    # What an integration may skip when asks is False: no step needs an approval.
    assert g.pending(g.tool_step("send_email", {"to": "a@example.com"}), "t1") is None
    asking = gate(NO_DELETE, ASK_SEND)
    asking.start_task("t2", "run")
    assert asking.asks is True
    assert isinstance(asking.pending(asking.tool_step("send_email", {}), "t2"), ci.Pending)


def test_pending_follows_a_reloaded_policy_set(gate: Callable[..., ci.Gate]) -> None:
    # pending remembers "nothing can ask this step" per policy set: a reload that adds or
    # drops an ask policy must change its answer for a step it has already seen.
    g = gate(NO_DELETE)
    g.start_task("t1", "run")
    engine = g.governor.runner.engine
    step = g.tool_step("send_email", {"to": "a@example.com"})
    assert g.pending(step, "t1") is None
    engine.load_policies([NO_DELETE, ASK_SEND])
    assert isinstance(g.pending(step, "t1"), ci.Pending)
    engine.load_policies([NO_DELETE])
    assert g.pending(step, "t1") is None


def test_pause_returns_a_digest_bound_request_and_the_answer_is_used_once(
    gate: Callable[..., ci.Gate],
) -> None:
    g = gate(ASK_SEND)
    g.start_task("t1", "run")
    step = g.tool_step("send_email", {"to": "a@example.com"}, call_id="c1")
    assert g.pending(g.tool_step("get_weather", {}), "t1") is None
    preview = g.pending(step, "t1")
    assert isinstance(preview, ci.Pending)
    pending = g.decide(step, "t1", pause=True)
    assert isinstance(pending, ci.Pending)
    assert pending.digest == charter.canonical_digest({"to": "a@example.com"})
    assert pending.call_id == "c1"
    assert g.answer(pending, ci.Answer("approve", "ann", "fine")) is step
    assert g.pending(step, "t1") is None  # an answer is on record
    allowed = g.decide(step, "t1", pause=True)
    assert isinstance(allowed, ci.Allowed)
    g.complete(allowed.handle, "sent")
    # The approval authorised one run: the same call asks again.
    assert isinstance(g.decide(step, "t1", pause=True), ci.Pending)
    gates = [r for r in _trail(g, "t1") if r["kind"] == "step.gate"]
    assert [(r["output"]["decision"], r["output"]["by"]) for r in gates] == [("pass", "ann")]


def test_an_edit_is_judged_again_and_the_original_never_runs(gate: Callable[..., ci.Gate]):
    g = gate(ASK_SEND, NO_DELETE)
    g.start_task("t1", "run")
    pending = g.decide(
        g.tool_step("send_email", {"to": "a@example.com"}, call_id="c1"), "t1", pause=True
    )
    assert isinstance(pending, ci.Pending)
    edited = g.answer(pending, ci.Answer("edit", "ann", "", ("delete_file", {"path": "/"})))
    assert (edited.kind, edited.name, edited.properties["tool"]["call_id"]) == (
        "step.resource",
        "delete_file",
        "c1",
    )
    assert isinstance(g.decide(edited, "t1", pause=True), ci.Blocked)  # no bypass by edit
    outcomes = [(r["step_name"], r["meta"].get("charter.outcome")) for r in _trail(g, "t1")[1:]]
    assert outcomes == [("approval", None), ("send_email", "blocked"), ("delete_file", "blocked")]


def test_one_request_lists_every_pending_action_and_answers_come_in_order(
    gate: Callable[..., ci.Gate],
) -> None:
    g = gate(ASK_SEND)
    g.start_task("t1", "run")
    steps = [
        g.tool_step("send_email", {"to": "a@example.com"}, call_id="c1"),
        g.tool_step("send_email", {"to": "b@example.com"}),
    ]
    pending = [g.decide(s, "t1", pause=True) for s in steps]
    assert all(isinstance(p, ci.Pending) for p in pending)
    request = ci.approval_request(pending)  # type: ignore[arg-type]
    assert [a["args"]["to"] for a in request["action_requests"]] == [
        "a@example.com",
        "b@example.com",
    ]
    assert [c["allowed_decisions"] for c in request["review_configs"]] == [
        ["approve", "edit", "reject"],
        ["approve", "reject"],  # no call id: nothing to attach an edit to
    ]
    answers = ci.read_answers(
        {"decisions": [{"type": "approve", "by": "ann"}, {"type": "edit"}]},
        pending,  # type: ignore[arg-type]
    )
    assert [(a.kind, a.by) for a in answers] == [("approve", "ann"), ("reject", "charter")]
    assert "not one of approve or reject" in answers[1].why
    short = ci.read_answers({"decisions": [{"type": "approve"}]}, pending)  # type: ignore[arg-type]
    assert [a.kind for a in short] == ["reject", "reject"]
    assert "expected 2 decision(s)" in short[0].why
    single = ci.read_answers({"type": "approve"}, pending[:1])  # type: ignore[arg-type]
    assert single[0].kind == "approve"
    with pytest.raises(ValueError, match="at least one pending step"):
        ci.approval_request([])


def test_without_pause_the_governors_approver_answers(tmp_path: Path) -> None:
    asked: list[str] = []

    def approver(request: charter.ApprovalRequest) -> Approval:
        asked.append(request.behavior.step_name)
        return Approval(False, "ops", "not today")

    g = ci.Gate("toy", policies=[ASK_SEND], approver=approver, audit_location="stdout")
    g.start_task("t1", "run")
    decision = g.decide(g.tool_step("send_email", {"to": "x@example.com"}), "t1")
    assert asked == ["send_email"]
    assert isinstance(decision, ci.Blocked) and "denied by ops: not today" in decision.reason
    g.governor.close(5.0)


# -- tasks, processes, claims -----------------------------------------------------------


def test_run_task_ids_and_superseded_runs(gate: Callable[..., ci.Gate]) -> None:
    assert ci.run_task_id("thread/7", 1) == charter.task_id_from("thread/7")
    assert ci.run_task_id("t", 3) == "t:3"
    with pytest.raises(ValueError, match="numbered from 1"):
        ci.run_task_id("t", 0)
    g = gate()
    first = g.run_task_id("t", 1)
    g.start_task(first, "run")
    assert g.run_task_id("t", 1) != first  # taken here: made unique
    g.supersede(first)
    assert g.task_state(first) == "ended"
    end = _trail(g, first)[-1]
    assert end["kind"] == "task.error"
    assert end["output"]["error"]["type"] == "RunNotFinishedError"


def test_a_task_and_an_intent_continue_in_another_process(
    gate: Callable[..., ci.Gate], tmp_path: Path
) -> None:
    first = gate()
    first.start_task("t1", "run")
    allowed = first.decide(first.tool_step("get_weather", {"city": "Rome"}), "t1")
    assert isinstance(allowed, ci.Allowed) and allowed.handle is not None
    intent = allowed.handle.behavior.to_dict()
    first.governor.close(5.0)

    second = gate()  # a new Governor on the same trail stands in for the next process
    assert second.task_state("t1") == "unknown"
    assert second.resume_task("t1") == "open"
    handle = second.reopen(intent)
    second.complete(handle, "sunny")
    second.end_task("t1")
    records = _trail(second, "t1")
    assert [r["kind"] for r in records] == ["task.start", "step.resource", "task.end"]
    assert records[1]["output"] == {"value": "sunny"}
    assert second.governor.runner.store.verify().ok  # type: ignore[union-attr]
    assert second.resume_task("t1") == "ended"
    assert second.resume_task("never-started") == "unknown"


def test_a_claim_is_taken_once_and_carries_its_task(tmp_path: Path) -> None:
    gov = Governor(policies=[], audit_location="stdout")
    claim = ci.Claim("tool", "c1", "send_email", gov, "t1")
    assert ci.current_claim() is None
    with ci.claim(claim):
        assert ci.current_claim() is claim
        assert not claim.take("model", None)
        assert not claim.take("tool", "c2", "send_email")
        assert claim.take("tool", "c1", "other-name")
        assert not claim.take("tool", "c1")  # a nested run of the same tool is not claimed
    assert ci.current_claim() is None
    by_name = ci.Claim("tool", None, "send_email", gov, "t1")
    assert by_name.take("tool", None, "send_email")
    assert claim.metadata()[ci.CLAIM_KEY]["task_id"] == "t1"
    gov.close(1.0)


def test_claims_nest_and_an_error_in_the_step_restores_the_outer_one() -> None:
    gov = charter.Governor(policies=[], audit_location="none")
    outer = ci.Claim("node", None, "agent", gov, "t1")
    inner = ci.Claim("tool", "c1", "send_email", gov, "t1")
    with ci.claim(outer) as held:
        assert held is outer
        with pytest.raises(RuntimeError, match="tool failed"), ci.claim(inner):
            assert ci.current_claim() is inner
            raise RuntimeError("tool failed")
        assert ci.current_claim() is outer  # the failing step's claim is gone, the outer held
    assert ci.current_claim() is None
    gov.close(1.0)


def test_the_module_api() -> None:
    assert ci.CLOSING_KINDS == charter.CLOSING_KINDS
    assert {k.value for k in ci.CLOSING_KINDS} == {"task.end", "task.error", "task.idle"}


def test_outputs_are_cut_to_the_output_limits_and_inputs_never_are(
    gate: Callable[..., ci.Gate],
) -> None:
    g = gate(max_output_chars=10, max_output_items=2)
    g.start_task("t1", "run")
    long = "x" * 50_000
    allowed = g.decide(g.tool_step("write_note", {"text": long}), "t1")
    assert isinstance(allowed, ci.Allowed)
    g.complete(allowed.handle, {"echo": "y" * 100, "rows": [1, 2, 3, 4]})
    (_, step) = _trail(g, "t1")
    assert step["input"]["text"] == long  # what was judged is what is kept
    assert step["output"]["echo"] == "y" * 10 + "…[truncated 90 chars]"
    assert step["output"]["rows"] == [1, 2, "…[2 more items]"]


def test_a_claim_travels_in_run_metadata_for_its_own_governor_only() -> None:
    gov = Governor(policies=[], audit_location="stdout")
    other = Governor(policies=[], audit_location="stdout")
    meta = ci.Claim("tool", "c1", "send_email", gov, "t1").metadata()
    found = ci.inherited_claim(meta, gov)
    assert found is not None and found.task_id == "t1" and found.governor is gov
    assert found.covers("tool", "c1") and not found.covers("tool", "c2")
    assert ci.inherited_claim(meta, other) is None  # another Governor's claim is not ours
    assert ci.inherited_claim({ci.CLAIM_KEY: {"governor": id(gov)}}, gov) is None
    assert ci.inherited_claim(None, gov) is None
    gov.close(1.0)
    other.close(1.0)


def test_an_edit_of_the_same_tool_is_mapped_from_its_new_arguments(
    gate: Callable[..., ci.Gate],
) -> None:
    ask_deletes = {**ASK_SEND, "name": "ask-delete", "match": {"step_names": ["delete_file"]}}
    g = gate(ask_deletes)
    g.start_task("t1", "run")
    step = g.tool_step("delete_file", {"path": "/tmp/old"}, call_id="c1", ids={"run_id": "r1"})
    pending = g.decide(step, "t1", pause=True)
    assert isinstance(pending, ci.Pending)
    edited = g.answer(pending, ci.Answer("edit", "ann", "", ("delete_file", {"path": "/etc"})))
    # A path policy reads properties.target: it must see the path that will be deleted.
    assert edited.properties["target"] == {"path": "/etc"}
    assert edited.properties["tool"]["call_id"] == "c1"
    assert edited.properties["framework"] == {"name": "toy", "run_id": "r1"}
