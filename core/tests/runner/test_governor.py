"""The Governor facade, sync and async: allow, block, failure, warn, ask, handles."""

from __future__ import annotations

import asyncio
import io
import logging
import warnings
from collections.abc import Callable
from datetime import datetime
from typing import Any

import charter
import pytest
from charter import (
    Approval,
    ApprovalRequest,
    BlockedError,
    Decision,
    Governor,
    PolicyWarning,
    Runner,
    callback_approver,
    canonical_digest,
)

Gov = Callable[..., Governor]


@pytest.fixture
def gov(make_runner: Callable[..., Runner]) -> Gov:
    def make(approver: Any = None, **settings: Any) -> Governor:
        return Governor(make_runner(**settings), approver=approver)

    return make


def test_allow_runs_the_body_and_records_its_output(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    g = gov()
    with g.task(name="job") as task:
        assert g.current_task() == task.task_id
        with g.step("step.exec", name="bash", input={"command": "ls"}) as s:
            assert s.result.decision is Decision.ALLOW
            s.output = {"stdout": "a\nb", "when": datetime(2024, 1, 2)}
    assert g.current_task() is None
    records = read_chain(task.task_id)
    assert [r["kind"] for r in records] == ["task.start", "step.exec", "task.end"]
    assert len(task.task_id) == 32 and int(task.task_id, 16) >= 0
    assert records[1]["output"] == {"stdout": "a\nb", "when": "2024-01-02T00:00:00"}
    assert records[1]["action_id"] == s.action_id
    assert records[0]["step_name"] == records[2]["step_name"] == "job"


def test_block_raises_before_the_body_and_is_recorded(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    g = gov()
    ran = []
    step = g.step("step.exec", name="bash", input={"command": "rm -rf /"})
    with g.task("t1"):
        with pytest.raises(PermissionError) as info, step:
            ran.append(1)
        assert isinstance(info.value, BlockedError)
        assert "\n" not in info.value.reason
        assert info.value.reason.startswith("blocked by policy 'no-rm' (critical)")
        assert info.value.result is not None and info.value.result.recorded_seq == 2
    assert ran == []
    assert read_chain("t1")[1]["meta"]["charter.outcome"] == "blocked"


def test_a_failing_body_is_recorded_as_failed_and_reraised_unchanged(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    g = gov()
    boom = KeyError("missing")
    step = g.step("step.resource", "GET", name="read", input={"path": "x"})
    with pytest.raises(KeyError) as info, g.task("t1"), step:
        raise boom
    assert info.value is boom
    records = read_chain("t1")
    step, end = records[1], records[2]
    assert step["meta"]["charter.outcome"] == "failed"
    assert step["output"] == {"error": {"type": "KeyError", "message": "'missing'"}}
    assert end["kind"] == "task.error"
    assert end["output"]["error"]["type"] == "KeyError"


def test_warn_proceeds_and_is_reported_once_per_policy(
    gov: Gov, caplog: pytest.LogCaptureFixture
) -> None:
    g = gov()
    level = caplog.at_level(logging.WARNING, logger="charter")
    with g.task("t1"), pytest.warns(PolicyWarning) as caught, level:
        for _ in range(3):
            with g.step("step.exec", name="bash", input={"command": "curl x"}) as s:
                assert s.result.decision is Decision.WARN
    assert len([w for w in caught if issubclass(w.category, PolicyWarning)]) == 1
    assert "warn-curl" in str(caught[0].message)
    assert g.incidents == 3
    # The PolicyWarning is the report: no second, log-line copy of the same warning.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert issubclass(PolicyWarning, UserWarning)


def test_ask_approved_records_a_gate_bound_to_the_input(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    g = gov(approver=callback_approver(approve, by="alice"))
    ran = []
    step = g.step("step.resource", "DELETE", name="delete_row", input={"id": 7})
    with g.task("t1"), step as s:
        ran.append(s.result.decision)
    assert ran == [Decision.ASK]  # the policy still asks; the approval authorised this run
    assert asked[0].policies == ("ask-delete",)
    gate, step = read_chain("t1")[1:3]
    assert gate["kind"] == "step.gate"
    assert gate["properties"]["gate"] == {
        "kind": "human",
        "step_name": "delete_row",
        "digest": canonical_digest({"id": 7}),
        "policies": ["ask-delete"],
        "action_id": step["action_id"],
    }
    assert gate["output"] == {"decision": "pass", "by": "alice", "why": "approved"}
    assert step["meta"]["charter.outcome"] == "ok"
    assert step["meta"]["charter.eval"]["approved"] is True


def test_ask_with_requires_gate_is_allowed_on_reevaluation(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    gated = {
        "name": "needs-approval",
        "rule_type": "requires_gate",
        "severity": "high",
        "action": "ask",
        "match": {"step_names": ["wire_money"]},
        "params": {"gate_kind": "human"},
    }
    asked: list[ApprovalRequest] = []
    g = gov(approver=callback_approver(lambda r: asked.append(r) is None), policies=[gated])
    with g.task("t1"):
        for _ in range(2):  # each approval authorises one run: the second step asks again
            with g.step("step.message", "POST", name="wire_money", input={"amount": 5}) as s:
                assert s.result.decision is Decision.ALLOW
    assert len(asked) == 2
    kinds = [
        (r["kind"], r["meta"].get("charter.eval", {}).get("decision")) for r in read_chain("t1")
    ]
    assert kinds[1:5] == [
        ("step.gate", None),
        ("step.message", "allow"),
        ("step.gate", None),
        ("step.message", "allow"),
    ]


def test_ask_denied_blocks_and_the_default_approver_denies(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    g = gov(approver=callback_approver(lambda r: (False, "not today"), by="bob"))
    step = g.step("step.resource", "DELETE", name="delete_row", input={"id": 1})
    denied = pytest.raises(BlockedError, match="approval denied by bob: not today")
    with g.task("t1"), denied, step:
        pytest.fail("ran")
    gate, blocked = read_chain("t1")[1:3]
    assert gate["output"]["decision"] == "deny"
    assert blocked["meta"]["charter.outcome"] == "blocked"
    assert blocked["meta"]["charter.eval"]["decision"] == "block"
    default = gov()
    with default.task("t2"), pytest.raises(BlockedError, match="no approver is configured"):
        default.begin_step("step.resource", "DELETE", name="delete_x")


def test_an_approver_that_raises_or_is_async_on_a_sync_path_denies(gov: Gov) -> None:
    def broken(request: ApprovalRequest) -> Approval:
        raise RuntimeError("approver down")

    async def later(request: ApprovalRequest) -> Approval:
        return Approval(True, "x")

    for approver, why in ((broken, "approver raised RuntimeError"), (later, "approver is async")):
        g = gov(approver=approver)
        with g.task(), pytest.raises(BlockedError, match=why):
            g.begin_step("step.resource", "DELETE", name="delete_x")


def test_external_approval_is_used_once(gov: Gov) -> None:
    g = gov()  # deny_all: only the recorded approval can let the step run
    with g.task("t1"):
        preview = g.evaluate("step.resource", "DELETE", name="delete_row", input={"id": 3})
        assert preview.decision is Decision.ASK and preview.recorded_seq is None
        request = ApprovalRequest(
            g.build_step("step.resource", "DELETE", name="delete_row", input={"id": 3}),
            preview.violations,
            preview.reason,
        )
        gate = g.record_approval("t1", request, True, "carol", "ticket 12")
        assert gate.kind.value == "step.gate"
        h = g.begin_step("step.resource", "DELETE", name="delete_row", input={"id": 3})
        h.complete({"deleted": 1})
        with pytest.raises(BlockedError, match="no approver"):
            g.begin_step("step.resource", "DELETE", name="delete_row", input={"id": 3})
        g.record_approval("t1", request.behavior, False, "carol", "no")
        with pytest.raises(BlockedError, match="approval denied by carol: no"):
            g.begin_step("step.resource", "DELETE", name="delete_row", input={"id": 3})


def test_handles_without_a_with_block(gov: Gov, read_chain: Callable[..., Any]) -> None:
    g = gov()
    tid = g.start_task("cb-task", name="callbacks", input={"q": "hi"})
    assert g.current_task() is None
    a = g.begin_step("step.model", name="llm", input={"prompt": "x"}, task_id=tid)
    b = g.begin_step("step.exec", name="bash", input={"command": "ls"}, task_id=tid)
    c = g.begin_step("step.exec", name="bash", input={"command": "pwd"}, task_id=tid)
    a.complete({"text": "y"})
    b.fail(TimeoutError("slow"))
    c.abandon()
    with pytest.raises(RuntimeError, match="already settled"):
        a.complete()
    d = g.begin_step("step.exec", name="bash", input={"command": "sleep"}, task_id=tid)
    g.end_task(tid, output={"answer": 42})
    outcomes = {r["action_id"]: r["meta"].get("charter.outcome") for r in read_chain(tid)}
    assert outcomes[a.action_id] == "ok"
    assert outcomes[b.action_id] == "failed"
    assert outcomes[c.action_id] == "abandoned"
    assert outcomes[d.action_id] == "abandoned"
    assert read_chain(tid)[-1]["output"] == {"answer": 42}


def test_steps_need_a_task_and_payloads_of_any_type_are_captured(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    g = gov()
    with pytest.raises(RuntimeError, match=r"gov\.task\(\)"):
        g.begin_step("step.exec", name="bash")

    class Opaque:
        __slots__ = ()

        def __repr__(self) -> str:
            return "<Opaque>"

    step = g.step("step.exec", name=len, input={"when": {1, 2}, "obj": Opaque()})
    with g.task("thread/with/slashes") as task, step as s:
        s.output = [1, 2]
    assert task.task_id == charter.task_id_from("thread/with/slashes")
    step = read_chain(task.task_id)[1]
    assert step["input"] == {"when": [1, 2], "obj": "<Opaque>"}
    assert step["output"] == {"value": [1, 2]}
    assert step["step_name"] == "len"


def test_async_variants(gov: Gov, read_chain: Callable[..., Any]) -> None:
    async def approve(request: ApprovalRequest) -> Approval:
        await asyncio.sleep(0)
        return Approval(request.behavior.input == {"id": 1}, "async-bot", "checked")

    g = gov(approver=approve)
    side_effects: list[str] = []

    async def main() -> None:
        async with g.task("a1") as task:
            async with g.step("step.exec", name="bash", input={"command": "ls"}) as s:
                side_effects.append("allowed")
                s.output = {"ok": True}
            with pytest.raises(BlockedError):
                async with g.step("step.exec", name="bash", input={"command": "rm -rf /"}):
                    side_effects.append("blocked ran")
            with pytest.raises(ValueError, match="bad"):
                async with g.step("step.exec", name="bash", input={"command": "x"}):
                    raise ValueError("bad")
            with pytest.warns(PolicyWarning):
                async with g.step("step.exec", name="bash", input={"command": "curl"}):
                    side_effects.append("warned")
            async with g.step("step.resource", "DELETE", name="delete_a", input={"id": 1}):
                side_effects.append("approved")
            with pytest.raises(BlockedError, match="denied by async-bot"):
                async with g.step("step.resource", "DELETE", name="delete_a", input={"id": 2}):
                    side_effects.append("denied ran")
            h = await g.abegin_step("step.model", name="llm")
            await h.acomplete({"text": "hi"})
            assert task.task_id == "a1"

    asyncio.run(main())
    assert side_effects == ["allowed", "warned", "approved"]
    outcomes = [
        (r["kind"], r["meta"].get("charter.outcome")) for r in read_chain("a1") if r["seq"] > 1
    ]
    assert outcomes == [
        ("step.exec", "ok"),
        ("step.exec", "blocked"),
        ("step.exec", "failed"),
        ("step.exec", "ok"),
        ("step.gate", None),
        ("step.resource", "ok"),
        ("step.gate", None),
        ("step.resource", "blocked"),
        ("step.model", "ok"),
        ("task.end", None),
    ]


def test_async_sync_durability_and_concurrent_tasks_keep_their_own_current_task(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    g = gov(audit_durability="sync")

    async def job(name: str) -> str:
        async with g.task(name) as task:
            for i in range(3):
                async with g.step("step.exec", name="bash", input={"command": f"echo {i}"}):
                    await asyncio.sleep(0.001)
            return task.task_id

    async def main() -> list[str]:
        return list(await asyncio.gather(job("x1"), job("x2")))

    assert asyncio.run(main()) == ["x1", "x2"]
    for tid in ("x1", "x2"):
        records = read_chain(tid)
        # start, each step's write-ahead intent and its outcome, end
        assert [r["seq"] for r in records] == list(range(1, 9))
        assert [r["meta"].get("charter.intent", False) for r in records[1:-1]] == [True, False] * 3
        assert {r["task_id"] for r in records} == {tid}


def test_governor_from_settings_and_status(tmp_path: Any) -> None:
    with Governor(policies=[], audit_location="none", approver=None) as g:
        with g.task(), warnings.catch_warnings():
            warnings.simplefilter("error")
            g.begin_step("step.exec", name="x").complete()
        status = g.status()
        assert status["governor"]["approver"] == "deny_all"
        assert status["load_state"] == "none_configured"
        assert g.flush(1)
    with pytest.raises(ValueError, match="either runner= or setting keywords"):
        Governor(g.runner, policies=[])


def test_warnings_point_at_the_callers_line(gov: Gov) -> None:
    g = gov()
    with g.task(), pytest.warns(PolicyWarning) as caught:
        g.begin_step("step.exec", name="bash", input={"command": "curl x"}).complete()
    assert caught[0].filename == __file__


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_console_approver_asks_only_on_a_terminal() -> None:
    request = ApprovalRequest(
        charter.Behavior(agent_id="a", task_id="t", kind="step.exec", step_name="bash"),
        (),
        "approval required by policy 'p'",
    )
    piped = charter.console_approver(request, stdin=io.StringIO("y\n"), stdout=io.StringIO())
    assert not piped.approved and "not a terminal" in piped.why
    shown = io.StringIO()
    yes = charter.console_approver(request, stdin=_Terminal("yes\n"), stdout=shown)
    assert yes.approved and yes.by.startswith("console:")
    assert "approval required by policy 'p'" in shown.getvalue()
    no = charter.console_approver(request, stdin=_Terminal("\n"), stdout=io.StringIO())
    assert not no.approved
    assert charter.deny_all(request).approved is False


def test_properties_known_after_the_step_feed_history_rules(
    gov: Gov, read_chain: Callable[..., Any]
) -> None:
    """Token usage exists only once a model call returned: complete(properties=) records it,
    and a budget policy then stops the call that would overspend."""
    budget = {
        "name": "token-budget",
        "rule_type": "budget",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {"field": "properties.model.usage.total_tokens", "limit": 1000},
    }
    g = gov(policies=[budget])
    calls = 0
    with g.task(name="chat") as task:
        for _ in range(2):
            with g.step("step.model", name="chat", properties={"model": {"name": "m"}}) as s:
                calls += 1
                s.complete({"text": "hi"}, properties={"model": {"usage": {"total_tokens": 600}}})
        with pytest.raises(BlockedError, match="token-budget"), g.step("step.model", name="chat"):
            calls += 1
    assert calls == 2
    model_steps = [r for r in read_chain(task.task_id) if r["kind"] == "step.model"]
    assert model_steps[0]["properties"]["model"] == {
        "name": "m",
        "usage": {"total_tokens": 600},
    }
    assert model_steps[2]["meta"]["charter.outcome"] == "blocked"
