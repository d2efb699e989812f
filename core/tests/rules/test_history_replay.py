"""Indexes never drift: judging after N steps equals judging after replaying them fresh.

Engine A lives through a random task and is probed at random moments (so each index is first
built midway, by whichever probe first needs it, and then fed step by step). At every probe,
a fresh engine B is given the same steps and intents from scratch; both must return the same
decision and the same per-policy results, details included.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from charter import Behavior, EvalContext, PolicyEngine, canonical_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

T0 = datetime(2024, 6, 3, 8, 0, tzinfo=UTC)
CTX = EvalContext(
    agent_id="agent", task_id="t1", project_root="/proj", trusted_values=("ok@example.com",)
)
PAY = {"step_names": ["pay"]}
INPUTS: list[dict[str, Any] | None] = [
    None,
    {"to": "bob@example.com", "amount": 4},
    {"to": "eve@evil.example", "amount": 7, "url": "https://evil.example/x"},
    {"path": "../etc/passwd", "amount": 1},
    {"to": "Bob@Example.com", "note": "tok " + "ghp_" + "x1" * 18},
]
DIGESTS = [canonical_digest(i or {}) for i in INPUTS]


def _p(name: str, rule_type: str, params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "rule_type": rule_type, "severity": "high", "params": params, **extra}


POLICIES = [
    _p("max-model", "max_steps", {"max": 3, "select": {"kinds": ["step.model"]}}),
    _p("max-all", "max_steps", {"max": 6}),
    _p("rate", "rate_limit", {"max": 2, "window_seconds": 5}),
    _p("rate-ok", "rate_limit", {"max": 2, "window_seconds": 3, "count": "ok"}),
    _p(
        "tokens",
        "budget",
        {"field": "properties.model.usage.total_tokens", "limit": 50},
    ),
    _p("amount", "budget", {"field": "input.amount", "limit": 12, "select": PAY}, match=PAY),
    _p("gate", "requires_gate", {}, match=PAY),
    _p("gate-human-3", "requires_gate", {"gate_kind": "human", "within_steps": 3}, match=PAY),
    _p(
        "gate-loose",
        "requires_gate",
        {"same_step": False, "bind_input": False, "single_use": True, "select": PAY},
        match=PAY,
    ),
    _p("gate-reusable", "requires_gate", {"single_use": False, "within_steps": 4}, match=PAY),
    _p(
        "flow",
        "forbid_after",
        {"after": {"where": [{"field": "properties.data.trust", "equals": "untrusted"}]}},
        match=PAY,
    ),
    _p(
        "flow-2",
        "forbid_after",
        {"after": {"kinds": ["step.resource"], "verbs": ["DELETE"]}, "within_steps": 2},
    ),
    _p("repeat", "no_repeat", {}),
    _p("repeat-failed", "no_repeat", {"max": 2, "include_failed": True}),
    _p(
        "provenance",
        "value_provenance",
        {"fields": ["input.to", {"field": "input.url", "normalise": "host"}]},
    ),
    _p("hours", "time_window", {"timezone": "Europe/Amsterdam", "hours": ["09:00-17:00"]}),
    _p("paths", "path_within_root", {}),
    _p("secrets", "no_secrets", {}),
]

# Payments and approvals are drawn more often: they exercise the most index state.
KINDS = [
    ("step.exec", None, "run"),
    ("step.model", None, "llm"),
    ("step.resource", "GET", "fetch"),
    ("step.resource", "DELETE", "rm"),
    ("step.resource", "POST", "pay"),
    ("step.resource", "POST", "pay"),
    ("step.resource", "POST", "pay"),
    ("step.message", "GET", "user_message"),
    ("step.gate", None, "approve"),
    ("step.gate", None, "approve"),
    ("step.gate", None, "approve"),
]


@st.composite
def steps(draw: st.DrawFn) -> dict[str, Any]:
    kind, verb, name = draw(st.sampled_from(KINDS))
    spec: dict[str, Any] = {
        "kind": kind,
        "verb": verb,
        "name": name,
        "input": draw(st.sampled_from([0, 1, 1, 1, 2, 3, 4])),
        "dt": draw(st.sampled_from([0, 0.5, 1, 1, 2, 3, 5, -1, 3600])),
        "outcome": draw(st.sampled_from(["ok", "ok", "ok", "failed", "blocked", "abandoned"])),
        "trust": draw(st.sampled_from([None, "trusted", "untrusted"])),
        "tokens": draw(st.sampled_from([None, 5, 20])),
    }
    if kind == "step.gate":
        spec["gate"] = {
            "kind": draw(st.sampled_from(["human", "guardrail"])),
            "step_name": draw(st.sampled_from(["pay", "run"])),
            "digest": DIGESTS[draw(st.sampled_from([0, 1, 1, 2]))],
        }
        spec["decision"] = draw(st.sampled_from(["pass", "pass", "deny", "pending"]))
    return spec


EVENTS = st.lists(
    st.tuples(st.sampled_from(["record", "record", "start", "finish", "probe", "probe"]), steps()),
    max_size=24,
)


class _Driver:
    """Turns event specs into behaviors with deterministic ids and timestamps."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.n = 0

    def behavior(self, spec: dict[str, Any]) -> Behavior:
        self.clock += spec["dt"]
        self.n += 1
        props: dict[str, Any] = {}
        if spec["trust"]:
            props["data"] = {"trust": spec["trust"]}
        if spec["tokens"] is not None:
            props["model"] = {"usage": {"total_tokens": spec["tokens"]}}
        if "gate" in spec:
            props["gate"] = spec["gate"]
        if spec["kind"] == "step.message":
            props["message"] = {"role": "user"}
        return Behavior(
            agent_id="agent",
            task_id="t1",
            kind=spec["kind"],
            verb=spec["verb"],
            step_name=spec["name"],
            action_id=f"a{self.n}",
            timestamp=T0 + timedelta(seconds=self.clock),
            input=INPUTS[spec["input"]],
            properties=props,
        )

    @staticmethod
    def output(spec: dict[str, Any]) -> dict[str, Any]:
        if "decision" in spec:
            return {"decision": spec["decision"], "by": "alice"}
        return {"text": "mail eve@evil.example or ok@example.com", "n": spec["input"]}


def _fresh(log: list[tuple[str, Behavior]]) -> PolicyEngine:
    engine = PolicyEngine(POLICIES)
    engine.record(
        Behavior(agent_id="agent", task_id="t1", kind="task.start", step_name="s", timestamp=T0)
    )
    for op, b in log:
        if op == "start":
            engine.register_intent(b)
        else:
            engine.record(b)
    return engine


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, final=steps())
def test_incremental_indexes_match_a_fresh_replay(
    events: list[tuple[str, dict[str, Any]]], final: dict[str, Any]
) -> None:
    live = PolicyEngine(POLICIES)
    live.record(
        Behavior(agent_id="agent", task_id="t1", kind="task.start", step_name="s", timestamp=T0)
    )
    log: list[tuple[str, Behavior]] = []
    running: list[tuple[Behavior, dict[str, Any]]] = []
    driver = _Driver()

    def probe(spec: dict[str, Any]) -> None:
        candidate = driver.behavior(spec)
        got = live.evaluate(candidate, CTX)
        want = _fresh(log).evaluate(candidate, CTX)
        assert got.decision == want.decision
        assert got.results == want.results

    for op, spec in events:
        if op == "probe":
            probe(spec)
        elif op == "start":
            b = driver.behavior(spec)
            live.register_intent(b)
            log.append(("start", b))
            running.append((b, spec))
        elif op == "finish" and running:
            b, started = running.pop(0)
            done = b.completed(driver.output(started), outcome=spec["outcome"])
            log.append(("record", live.record(done)))
        else:
            b = driver.behavior(spec)
            done = b.completed(driver.output(spec), outcome=spec["outcome"])
            log.append(("record", live.record(done)))
    probe(final)


class _NoScan(list[Behavior]):
    """A step list that refuses to be read: judging must go through the indexes."""

    def __iter__(self) -> Any:
        raise AssertionError("a rule scanned the history")

    def __getitem__(self, item: Any) -> Any:
        raise AssertionError("a rule read the history by position")


def test_judging_reads_indexes_not_the_history() -> None:
    engine = PolicyEngine(POLICIES)
    engine.record(Behavior(agent_id="agent", task_id="t1", kind="task.start", step_name="s"))
    driver = _Driver()
    spec = {"kind": "step.resource", "verb": "POST", "name": "pay", "input": 1, "dt": 1}
    spec |= {"outcome": "ok", "trust": "trusted", "tokens": 5}
    engine.evaluate(driver.behavior(spec), CTX)  # builds every index by one replay
    for _ in range(50):
        engine.record(driver.behavior(spec).completed({"ok": True}))
    task = engine._tasks["t1"]
    task.steps = _NoScan(task.steps)
    result = engine.evaluate(driver.behavior(spec), CTX)
    assert len(result.results) == len(POLICIES)  # every policy judged a payment
    assert not any("raised" in (r.details or "") for r in result.results)


def test_policies_with_equal_params_share_an_index() -> None:
    same = {"max": 5, "select": {"kinds": ["step.exec"]}}
    engine = PolicyEngine(
        [
            _p("a", "max_steps", same),
            _p("b", "max_steps", dict(same)),
            _p("c", "max_steps", {"max": 9, "select": {"kinds": ["step.exec"]}}),
            _p("d", "max_steps", {"max": 5, "select": {"kinds": ["step.model"]}}),
        ]
    )
    engine.record(Behavior(agent_id="agent", task_id="t1", kind="task.start", step_name="s"))
    b = Behavior(agent_id="agent", task_id="t1", kind="step.exec", step_name="x")
    engine.evaluate(b, CTX)
    # a, b and c count the same steps; d is not evaluated for an exec step.
    assert len(engine._tasks["t1"]._indexes) == 1
