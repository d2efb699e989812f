"""PolicyEngine: aggregation, filters, rule failures, task lifecycle, binding, threads."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from charter import (
    AgentBindingError,
    Behavior,
    Decision,
    EvalContext,
    PolicyEngine,
    PolicyLoadError,
    TaskClosedError,
    Violation,
    rule,
)
from charter._policy.registry import unregister

CTX = EvalContext(agent_id="agent", task_id="t1")


def step(
    name: str = "tool", kind: str = "step.exec", verb: str | None = None, **kw: Any
) -> Behavior:
    kw.setdefault("task_id", "t1")
    return Behavior(agent_id="agent", kind=kind, verb=verb, step_name=name, **kw)


def start(engine: PolicyEngine, task_id: str = "t1") -> None:
    engine.record(Behavior(agent_id="agent", task_id=task_id, kind="task.start", step_name="start"))


def deny(name: str, severity: str, tool: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "rule_type": "deny",
        "severity": severity,
        "params": {"reason": f"{name} fired"},
        "match": {"step_names": [tool]},
        **extra,
    }


@pytest.mark.parametrize(
    ("severity", "decision"),
    [
        ("critical", "block"),
        ("high", "warn"),
        ("medium", "warn"),
        ("low", "warn"),
        ("info", "allow"),
    ],
)
def test_default_aggregation_by_severity(severity: str, decision: str) -> None:
    engine = PolicyEngine([deny("p", severity, "tool")])
    result = engine.evaluate(step(), CTX)
    assert result.decision == Decision(decision)
    assert result.results[0].violated  # info violations are still reported
    assert 0.0 < result.risk_score <= 1.0


def test_worst_violation_wins_and_ask_yields_to_block() -> None:
    engine = PolicyEngine(
        [
            deny("warns", "low", "*"),
            deny("asks", "high", "*", action="ask"),
            deny("blocks", "critical", "rm"),
        ]
    )
    asked = engine.evaluate(step("tool"), CTX)
    assert asked.decision is Decision.ASK
    assert asked.reason == "approval required by policy 'asks' (high): asks fired"
    blocked = engine.evaluate(step("rm"), CTX)
    assert blocked.decision is Decision.BLOCK
    assert blocked.reason == "blocked by policy 'blocks' (critical): blocks fired"
    assert blocked.risk_score == 1.0
    assert {r.name for r in blocked.violations} == {"warns", "asks", "blocks"}


def test_no_violation_allows_with_zero_risk() -> None:
    engine = PolicyEngine([deny("p", "critical", "other")])
    result = engine.evaluate(step(action_id="a-1"), CTX)
    assert result.decision is Decision.ALLOW and result.risk_score == 0.0
    assert result.results == () and result.action_id == "a-1"


def test_selectors_kinds_verbs_and_boundaries() -> None:
    engine = PolicyEngine(
        [
            {
                "name": "deletes",
                "rule_type": "deny",
                "severity": "critical",
                "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
            },
            {"name": "everything", "rule_type": "deny", "severity": "low"},
        ]
    )
    delete = step("x", "step.resource", "DELETE")
    read = step("x", "step.resource", "GET")
    assert engine.evaluate(delete, CTX).decision is Decision.BLOCK
    assert engine.evaluate(read, CTX).decision is Decision.WARN
    boundary = Behavior(agent_id="agent", task_id="t1", kind="task.start", step_name="s")
    # a policy without `kinds` never judges task boundaries
    assert engine.evaluate(boundary, CTX).results == ()


def test_filters_by_environment_classification_and_agent() -> None:
    engine = PolicyEngine(
        [
            deny("prod-only", "critical", "*", environments=["production"]),
            deny("high-risk", "critical", "*", risk_classifications=["high"]),
            deny("other-agent", "critical", "*", agents=["someone-else"]),
        ]
    )
    dev = EvalContext(
        agent_id="agent", task_id="t1", environment="dev", risk_classification="minimal"
    )
    assert engine.evaluate(step(), dev).results == ()
    prod = EvalContext(agent_id="agent", task_id="t1", environment="production")
    names = {r.name for r in engine.evaluate(step(), prod).results}
    # an unknown classification does not exempt the step: the scoped policy still applies
    assert names == {"prod-only", "high-risk"}


def test_a_rule_that_raises_counts_as_violated_and_evaluation_continues() -> None:
    @rule(name="explodes", description="always raises")
    def explodes(view: Any, params: Any, ctx: Any) -> bool:
        raise RuntimeError("kaboom")

    try:
        engine = PolicyEngine(
            [
                {"name": "broken", "rule_type": "explodes", "severity": "critical"},
                deny("later", "low", "*"),
            ]
        )
        result = engine.evaluate(step(), CTX)
        assert result.decision is Decision.BLOCK
        broken = next(r for r in result.results if r.name == "broken")
        assert broken.details == "rule explodes raised RuntimeError: kaboom"
        assert any(r.name == "later" and r.violated for r in result.results)
    finally:
        unregister("explodes")


def test_user_rules_register_with_a_schema_and_return_violations() -> None:
    @rule(
        name="max_len",
        description="input.text at most n characters",
        params_schema={
            "type": "object",
            "required": ["n"],
            "properties": {"n": {"type": "integer", "minimum": 1}},
        },
        example_params={"n": 10},
    )
    def max_len(view: Behavior, params: dict[str, Any], ctx: Any) -> bool | Violation:
        text = (view.input or {}).get("text", "")
        return len(text) <= params["n"] or Violation(f"text is {len(text)} characters")

    try:
        with pytest.raises(PolicyLoadError, match=r"params\.n: 0 is below the minimum 1"):
            PolicyEngine(
                [{"name": "p", "rule_type": "max_len", "severity": "high", "params": {"n": 0}}]
            )
        engine = PolicyEngine(
            [{"name": "p", "rule_type": "max_len", "severity": "high", "params": {"n": 3}}]
        )
        assert engine.evaluate(step(input={"text": "abcd"}), CTX).results[0].details == (
            "text is 4 characters"
        )
        with pytest.raises(ValueError, match="already registered"):
            rule(name="max_len", description="again")(max_len)
    finally:
        unregister("max_len")


def test_inline_policies_are_checked_and_prepared_once_per_runner() -> None:
    import charter
    from charter._policy.policy import compile_policies

    prepared: list[dict[str, Any]] = []

    def prepare(params: dict[str, Any]) -> dict[str, Any]:
        prepared.append(params)
        return params

    @rule(name="counted", description="complies; counts its preparations", prepare=prepare)
    def counted(view: Any, params: Any, ctx: Any) -> bool:
        return True

    try:
        policy = {"name": "c", "rule_type": "counted", "severity": "low"}
        runner = charter.Runner(policies=[policy], audit_location="none")
        try:
            assert [p.name for p in runner.engine.policies] == ["c"]
        finally:
            runner.close()
        assert len(prepared) == 1
        compiled, problems = compile_policies([policy])
        again, problems = compile_policies([*compiled, deny("d", "low", "x")])
        assert not problems and again[0] is compiled[0] and len(prepared) == 2
        _, problems = compile_policies([*compiled, policy], "here")
        assert [str(p) for p in problems] == [
            "here: policy 'c' (rule counted): name: duplicate policy name; names must be "
            "unique in a set"
        ]
    finally:
        unregister("counted")


def test_load_report_states() -> None:
    engine = PolicyEngine()
    assert engine.load_report().state == "unavailable"
    engine.load_policies([])
    assert engine.load_report().state == "none_configured"
    engine.load_policies(
        [
            deny("a", "low", "*"),
            {
                "name": "r",
                "rule_type": "requires_fields",
                "severity": "low",
                "enforcement_point": "agent_registration",
                "params": {"fields": ["owner"]},
            },
            deny("b", "low", "*", agents=["other"]),
        ]
    )
    start(engine)
    report = engine.load_report()
    assert report.state == "enforcing" and report.offered == 3 and report.enforced == 2
    assert engine.counts_by_enforcement_point() == {"step_execution": 2, "agent_registration": 1}


def test_task_lifecycle() -> None:
    engine = PolicyEngine([])
    with pytest.raises(ValueError, match=r"was not started; record a task\.start first"):
        engine.record(step().completed({}))
    start(engine)
    with pytest.raises(ValueError, match="already started"):
        start(engine)
    recorded = engine.record(step(action_id="a1").completed({"ok": True}))
    assert recorded.seq == 2 and engine.task_state("t1") == "open"
    engine.record(Behavior(agent_id="agent", task_id="t1", kind="task.end", step_name="end"))
    assert engine.task_state("t1") == "closing"
    with pytest.raises(TaskClosedError, match="closing"):
        engine.record(step().completed({}))
    assert [b.seq for b in engine.get_history("t1")] == [1, 2, 3]
    engine.end_task("t1")
    assert engine.task_state("t1") == "ended" and engine.get_history("t1") == ()
    with pytest.raises(TaskClosedError, match="cannot be reused"):
        start(engine)
    with pytest.raises(TaskClosedError, match="has ended"):
        engine.record(step().completed({}))


def test_closed_ids_are_remembered_but_bounded() -> None:
    engine = PolicyEngine([], closed_task_memory=2)
    for tid in ("a", "b", "c"):
        start(engine, tid)
        engine.end_task(tid)
    assert engine.task_state("a") == "unknown"
    assert engine.task_state("c") == "ended"


def test_action_ids_are_unique_except_for_an_intents_own_outcome() -> None:
    engine = PolicyEngine([])
    start(engine)
    intent = step(action_id="a1")
    engine.register_intent(intent)
    assert engine.open_intents("t1") == (intent,)
    with pytest.raises(ValueError, match="already used"):
        engine.register_intent(step(action_id="a1"))
    engine.record(intent.completed({"done": True}))
    assert engine.open_intents("t1") == ()
    with pytest.raises(ValueError, match="the only reuse allowed"):
        engine.record(intent.completed({"again": True}))
    with pytest.raises(ValueError, match="needs an action_id"):
        engine.register_intent(step())


def test_seq_must_increase_strictly() -> None:
    engine = PolicyEngine([])
    start(engine)
    engine.record(step(seq=5).completed({}))
    with pytest.raises(ValueError, match="seq 5 is not above the task's last seq 5"):
        engine.record(step(seq=5).completed({}))
    assert engine.record(step().completed({})).seq == 6


def test_an_engine_is_bound_to_one_agent() -> None:
    engine = PolicyEngine([])
    start(engine)
    other = Behavior(agent_id="other", task_id="t2", kind="task.start", step_name="s")
    with pytest.raises(AgentBindingError, match="serves agent 'agent', not 'other'"):
        engine.record(other)


def test_context_must_describe_the_step() -> None:
    engine = PolicyEngine([])
    with pytest.raises(ValueError, match="context does not describe this step"):
        engine.evaluate(step(task_id="t2"), CTX)


def test_explain_lists_each_policys_verdict() -> None:
    engine = PolicyEngine(
        [
            deny("blocks", "critical", "rm"),
            deny("warns", "low", "*"),
            deny("unrelated", "low", "other"),
        ]
    )
    text = engine.explain(step("rm"), CTX)
    assert text.splitlines()[0] == "step.exec 'rm': BLOCK (risk 1.00)"
    assert "[VIOLATED] blocks (deny, critical): blocks fired" in text
    assert "not matching this step: unrelated" in text


def test_concurrent_recording_keeps_seq_strict_and_complete() -> None:
    engine = PolicyEngine([deny("warns", "low", "*")])
    start(engine)

    def worker(n: int) -> None:
        for i in range(200):
            b = step(action_id=f"w{n}-{i}")
            engine.evaluate(b, CTX)
            engine.register_intent(b)
            engine.record(b.completed({"i": i}))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [b.seq for b in engine.get_history("t1")]
    assert seqs == list(range(1, 802))


def test_may_ask_reads_only_the_selectors_of_policies_that_ask() -> None:
    engine = PolicyEngine(
        [
            {
                "name": "ask-deletes",
                "rule_type": "deny",
                "severity": "high",
                "action": "ask",
                "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
            },
            {
                "name": "no-rm",
                "rule_type": "deny",
                "severity": "critical",
                "match": {"kinds": ["step.exec"]},
            },
        ]
    )

    def probe(kind: str, verb: str | None) -> Behavior:
        return Behavior(agent_id="a", task_id="t", kind=kind, verb=verb, step_name="x")

    assert engine.may_ask(probe("step.resource", "DELETE"))
    assert not engine.may_ask(probe("step.resource", "GET"))
    assert not engine.may_ask(probe("step.exec", None))  # it blocks; it never asks
